#include "compress/cpu_passes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace mgs::compress::cpu {
namespace {

constexpr size_t kStride = kHistBins + 1;

// Written for the auto-vectoriser: the add runs over a block, then the
// statistics over the same block (still in L1) in float (omp simd lanes),
// flushed to double per block; no branches (non-finite entries are masked to
// 0 on their bits). Float partial sums of 512 values lose nothing the threshold's
// estimate could notice.
template <typename Load>
BufferStats accumulateChunk(Load load, float* r, size_t b, size_t e) {
  constexpr size_t kBlock = 512;
  BufferStats s;
  for (size_t blk = b; blk < e; blk += kBlock) {
    const size_t end = std::min(e, blk + kBlock);
    for (size_t i = blk; i < end; ++i) r[i] = load(i) + r[i];
    // omp simd licenses the reassociation the vectoriser needs for these sums.
    float sum = 0, sq = 0, ab = 0, mx = 0;
    uint32_t bad = 0;
#pragma omp simd reduction(+ : sum, sq, ab, bad) reduction(max : mx)
    for (size_t i = blk; i < end; ++i) {
      // Finite test and masking on the bits: selects, not branches.
      uint32_t u;
      std::memcpy(&u, &r[i], 4);
      const uint32_t fin = (u & 0x7fffffffu) < 0x7f800000u;
      const uint32_t keep = u & (0u - fin);
      float f, m;
      std::memcpy(&f, &keep, 4);
      const uint32_t mbits = keep & 0x7fffffffu;
      std::memcpy(&m, &mbits, 4);
      sum += f;
      sq += f * f;
      ab += m;
      mx = mx > m ? mx : m;
      bad += 1u - fin;
    }
    s.sum += sum;
    s.sumSq += sq;
    s.sumAbs += ab;
    s.maxAbs = std::max(s.maxAbs, mx);
    s.nonFinite += bad;
  }
  return s;
}

// Bins are computed a block at a time in a branch-free loop the vectoriser
// handles (keys below the window go to a dump counter), then counted into
// four interleaved sub-histograms so that runs of equal bins do not
// serialise on one counter's store-to-load latency.
template <typename KeyFn>
void histogramChunk(KeyFn key, size_t b, size_t e, Window w, uint32_t* h) {
  constexpr uint32_t kDump = kHistBins + 1;
  constexpr size_t kBlock = 1024;
  uint32_t sub[4][kHistBins + 2] = {};
  uint32_t bins[kBlock];
  for (size_t blk = b; blk < e; blk += kBlock) {
    const size_t len = std::min(kBlock, e - blk);
    for (size_t j = 0; j < len; ++j) {
      const uint32_t k = key(blk + j);
      const uint32_t raw = std::min<uint32_t>((k - w.lo) >> w.shift, kHistBins);
      bins[j] = k >= w.lo ? raw : kDump;
    }
    size_t j = 0;
    for (; j + 4 <= len; j += 4) {
      ++sub[0][bins[j]];
      ++sub[1][bins[j + 1]];
      ++sub[2][bins[j + 2]];
      ++sub[3][bins[j + 3]];
    }
    for (; j < len; ++j) ++sub[0][bins[j]];
  }
  for (uint32_t j = 0; j < kStride; ++j) h[j] = sub[0][j] + sub[1][j] + sub[2][j] + sub[3][j];
}

template <typename KeyFn>
void compactChunk(KeyFn key, size_t b, size_t e, const Selection& sel, size_t quota,
                  size_t off, float* r, float* values, uint32_t* indices) {
  // Few entries pass, so skip 32-entry groups whose largest key is below the
  // lowest selectable key; the max is a vectorisable reduction.
  constexpr size_t kGroup = 32;
  const uint64_t floor = sel.hasTie ? sel.keyTie : sel.keyAll;
  size_t i = b;
  while (i < e) {
    const size_t end = std::min(e, i + kGroup);
    uint32_t top = 0;
    for (size_t j = i; j < end; ++j) top = std::max(top, key(j));
    if (top >= floor) {
      for (size_t j = i; j < end; ++j) {
        const uint32_t k = key(j);
        bool take = k >= sel.keyAll;
        if (!take && sel.hasTie && quota > 0 && k >= sel.keyTie) {
          take = true;
          --quota;
        }
        if (take) {
          values[off] = r[j];
          indices[off] = static_cast<uint32_t>(j);
          r[j] = 0.0f;
          ++off;
        }
      }
    }
    i = end;
  }
}

struct MagKey {
  const float* a;
  uint32_t operator()(size_t i) const { return magnitudeKey(a[i]); }
};
struct RandKey {
  uint64_t seed;
  uint32_t operator()(size_t i) const { return randomKey(seed, i); }
};

}  // namespace

BufferStats accumulate(const void* x, DataType dtype, float* r, size_t n, int chunks, [[maybe_unused]] int threads) {
  std::vector<BufferStats> part(chunks);
#pragma omp parallel for schedule(static, 1) num_threads(threads)
  for (int c = 0; c < chunks; ++c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    if (dtype == MGS_FLOAT16) {
      const auto* h = static_cast<const uint16_t*>(x);
      part[c] = accumulateChunk([h](size_t i) { return halfToFloat(h[i]); }, r, b, e);
    } else if (dtype == MGS_BFLOAT16) {
      const auto* h = static_cast<const uint16_t*>(x);
      part[c] = accumulateChunk([h](size_t i) { return bfloat16ToFloat(h[i]); }, r, b, e);
    } else {
      const auto* f = static_cast<const float*>(x);
      part[c] = accumulateChunk([f](size_t i) { return f[i]; }, r, b, e);
    }
  }
  BufferStats s;
  for (const auto& p : part) {  // chunk order: same sums for any thread count
    s.sum += p.sum;
    s.sumSq += p.sumSq;
    s.sumAbs += p.sumAbs;
    s.maxAbs = std::max(s.maxAbs, p.maxAbs);
    s.nonFinite += p.nonFinite;
  }
  return s;
}

void zeroNonFinite(float* r, size_t n, int chunks, [[maybe_unused]] int threads) {
#pragma omp parallel for schedule(static, 1) num_threads(threads)
  for (int c = 0; c < chunks; ++c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    for (size_t i = b; i < e; ++i)
      if (!std::isfinite(r[i])) r[i] = 0.0f;
  }
}

void histogram(const KeySource& keys, size_t n, Window w, int chunks, [[maybe_unused]] int threads, uint32_t* hist) {
#pragma omp parallel for schedule(static, 1) num_threads(threads)
  for (int c = 0; c < chunks; ++c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    if (keys.kind == KeyKind::kMagnitude)
      histogramChunk(MagKey{keys.acc}, b, e, w, hist + c * kStride);
    else
      histogramChunk(RandKey{keys.seed}, b, e, w, hist + c * kStride);
  }
}

void compact(const KeySource& keys, size_t n, const Selection& sel, int chunks, [[maybe_unused]] int threads,
             const uint32_t* hist, float* r, float* values, uint32_t* indices) {
  if (sel.count == 0) return;
  // Offsets and tie quotas per chunk, in chunk order, from the last histograms.
  std::vector<size_t> offset(chunks), quota(chunks, 0);
  size_t off = 0, quotaLeft = sel.hasTie ? sel.quota : 0;
  for (int c = 0; c < chunks; ++c) {
    const uint32_t* h = hist + c * kStride;
    size_t all = 0;
    for (uint32_t b = sel.binAll; b <= kHistBins; ++b) all += h[b];
    if (sel.hasTie) {
      quota[c] = std::min<size_t>(quotaLeft, h[sel.binTie]);
      quotaLeft -= quota[c];
    }
    offset[c] = off;
    off += all + quota[c];
  }
#pragma omp parallel for schedule(static, 1) num_threads(threads)
  for (int c = 0; c < chunks; ++c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    if (keys.kind == KeyKind::kMagnitude)
      compactChunk(MagKey{keys.acc}, b, e, sel, quota[c], offset[c], r, values, indices);
    else
      compactChunk(RandKey{keys.seed}, b, e, sel, quota[c], offset[c], r, values, indices);
  }
}

void takeAll(float* r, size_t n, int chunks, [[maybe_unused]] int threads, float* values, uint32_t* indices) {
#pragma omp parallel for schedule(static, 1) num_threads(threads)
  for (int c = 0; c < chunks; ++c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    std::memcpy(values + b, r + b, (e - b) * sizeof(float));
    std::fill(r + b, r + e, 0.0f);
    for (size_t i = b; i < e; ++i) indices[i] = static_cast<uint32_t>(i);
  }
}

}  // namespace mgs::compress::cpu
