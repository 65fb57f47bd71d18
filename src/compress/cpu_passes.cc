#include "compress/cpu_passes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mgs::compress::cpu {
namespace {

constexpr size_t kStride = kHistBins + 1;

// Written for the auto-vectoriser: the add runs over a block, then the
// statistics over the same block (still in L1) in float (omp simd lanes),
// flushed to double per block; no branches (non-finite entries are masked to
// 0 on their bits). Float partial sums of 512 values lose nothing the threshold's
// estimate could notice. kHasX = false: r already holds acc (read only).
// kCand: also append the finite entries with key >= tc to cv/ci (count in
// *cnt, stores only below cap): a 32-entry group is scanned only when its
// largest masked magnitude, a vectorisable float max, reaches tcf = the float
// of tc (monotone in the key; under denormals-are-zero the float test can
// only over-admit a group, and the scan compares integer keys).
template <bool kHasX, bool kCand, typename Load>
inline __attribute__((always_inline)) BufferStats fusedChunk(Load load, float* r, size_t b,
                                                             size_t e, uint32_t tc, float* cv,
                                                             uint32_t* ci, size_t cap,
                                                             size_t* cnt) {
  constexpr size_t kBlock = 512;
  constexpr size_t kGroup = 32;
  BufferStats s;
  const float tcf = keyToMagnitude(tc);
  size_t c = kCand ? *cnt : 0;
  for (size_t blk = b; blk < e; blk += kBlock) {
    const size_t end = std::min(e, blk + kBlock);
    if constexpr (kHasX) {
      for (size_t i = blk; i < end; ++i) r[i] = load(i) + r[i];
    }
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
    if constexpr (kCand) {
      if (!(mx >= tcf)) continue;  // nothing in this block reaches tc
      for (size_t g = blk; g < end; g += kGroup) {
        const size_t ge = std::min(end, g + kGroup);
        float gm = 0;
#pragma omp simd reduction(max : gm)
        for (size_t i = g; i < ge; ++i) {
          uint32_t u;
          std::memcpy(&u, &r[i], 4);
          const uint32_t a = u & 0x7fffffffu;
          const uint32_t mbits = a < 0x7f800000u ? a : 0u;
          float m;
          std::memcpy(&m, &mbits, 4);
          gm = gm > m ? gm : m;
        }
        if (!(gm >= tcf)) continue;
        for (size_t i = g; i < ge; ++i) {
          const uint32_t key = magnitudeKey(r[i]);
          if (key >= tc && key < 0x7f800000u) {
            if (c < cap) {
              cv[c] = r[i];
              ci[c] = static_cast<uint32_t>(i);
            }
            ++c;
          }
        }
      }
    }
  }
  if (kCand) *cnt = c;
  return s;
}

template <bool kCand>
BufferStats fusedChunkAny(const void* x, DataType dtype, float* r, size_t b, size_t e,
                          uint32_t tc, float* cv, uint32_t* ci, size_t cap, size_t* cnt) {
  if (x == nullptr)
    return fusedChunk<false, kCand>([](size_t) { return 0.0f; }, r, b, e, tc, cv, ci, cap, cnt);
  if (dtype == MGS_FLOAT16) {
    const auto* h = static_cast<const uint16_t*>(x);
    return fusedChunk<true, kCand>([h](size_t i) { return halfToFloat(h[i]); }, r, b, e, tc, cv,
                                   ci, cap, cnt);
  }
  if (dtype == MGS_BFLOAT16) {
    const auto* h = static_cast<const uint16_t*>(x);
    return fusedChunk<true, kCand>([h](size_t i) { return bfloat16ToFloat(h[i]); }, r, b, e, tc,
                                   cv, ci, cap, cnt);
  }
  const auto* f = static_cast<const float*>(x);
  return fusedChunk<true, kCand>([f](size_t i) { return f[i]; }, r, b, e, tc, cv, ci, cap, cnt);
}

BufferStats reduceInChunkOrder(const std::vector<BufferStats>& part) {
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

std::atomic<size_t> testCandidateCapLimit{0};

BufferStats accumulate(const void* x, DataType dtype, float* r, size_t n, int chunks, [[maybe_unused]] int threads) {
  std::vector<BufferStats> part(chunks);
#pragma omp parallel for schedule(static, 1) num_threads(threads)
  for (int c = 0; c < chunks; ++c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    part[c] = fusedChunkAny<false>(x, dtype, r, b, e, 0, nullptr, nullptr, 0, nullptr);
  }
  return reduceInChunkOrder(part);
}

BufferStats accumulateCandidates(const void* x, DataType dtype, float* r, size_t n, int chunks,
                                 [[maybe_unused]] int threads, uint32_t tc, Candidates* cand) {
  std::vector<BufferStats> part(chunks);
  std::fill(cand->count, cand->count + cand->regions, size_t{0});
  const int team = std::max(1, std::min(threads, cand->regions));
#pragma omp parallel num_threads(team)
  {
    int t = 0, nt = 1;
#ifdef _OPENMP
    t = omp_get_thread_num();
    nt = omp_get_num_threads();
#endif
    // Contiguous chunk ranges in thread order: region t's indices precede region t+1's.
    const int c0 = static_cast<int>(int64_t{chunks} * t / nt);
    const int c1 = static_cast<int>(int64_t{chunks} * (t + 1) / nt);
    float* cv = cand->values + cand->cap * t;
    uint32_t* ci = cand->indices + cand->cap * t;
    size_t cnt = 0;
    for (int c = c0; c < c1; ++c) {
      const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
      part[c] = fusedChunkAny<true>(x, dtype, r, b, e, tc, cv, ci, cand->cap, &cnt);
    }
    cand->count[t] = cnt;
  }
  cand->overflow = false;
  for (int t = 0; t < cand->regions; ++t)
    if (cand->count[t] > cand->cap) cand->overflow = true;
  return reduceInChunkOrder(part);
}

namespace {
template <typename Load>
size_t sampleRange(Load load, const float* r, size_t b, size_t e, uint32_t* keys) {
  size_t m = 0;
  for (size_t i = b; i < e; ++i) {
    const uint32_t k = magnitudeKey(load(i) + r[i]);
    keys[m] = k;
    m += k < 0x7f800000u;  // finite only
  }
  return m;
}
template <typename Load>
size_t sampleAll(Load load, const float* r, size_t n, uint32_t* keys) {
  if (n <= kSampleMax) return sampleRange(load, r, 0, n, keys);
  constexpr size_t blocks = kSampleMax / kSampleBlock;
  const size_t step = n / blocks;  // >= kSampleBlock
  size_t m = 0;
  for (size_t j = 0; j < blocks; ++j) m += sampleRange(load, r, j * step, j * step + kSampleBlock, keys + m);
  return m;
}
}  // namespace

size_t sampleKeys(const void* x, DataType dtype, const float* r, size_t n, uint32_t* keys) {
  if (x == nullptr) return sampleAll([](size_t) { return 0.0f; }, r, n, keys);
  if (dtype == MGS_FLOAT16) {
    const auto* h = static_cast<const uint16_t*>(x);
    return sampleAll([h](size_t i) { return halfToFloat(h[i]); }, r, n, keys);
  }
  if (dtype == MGS_BFLOAT16) {
    const auto* h = static_cast<const uint16_t*>(x);
    return sampleAll([h](size_t i) { return bfloat16ToFloat(h[i]); }, r, n, keys);
  }
  const auto* f = static_cast<const float*>(x);
  return sampleAll([f](size_t i) { return f[i]; }, r, n, keys);
}

void candidateHistogram(const Candidates& cand, Window w, uint64_t* hist) {
  std::fill(hist, hist + kStride, uint64_t{0});
  for (int t = 0; t < cand.regions; ++t) {
    const float* v = cand.values + cand.cap * t;
    const size_t m = std::min(cand.count[t], cand.cap);
    for (size_t j = 0; j < m; ++j) {
      const int b = binOf(magnitudeKey(v[j]), w);
      if (b >= 0) ++hist[b];
    }
  }
}

size_t compactCandidates(const Candidates& cand, const Selection& sel, float* r, float* values,
                         uint32_t* indices) {
  size_t off = 0, quota = sel.hasTie ? sel.quota : 0;
  for (int t = 0; t < cand.regions; ++t) {
    const float* v = cand.values + cand.cap * t;
    const uint32_t* ix = cand.indices + cand.cap * t;
    const size_t m = std::min(cand.count[t], cand.cap);
    for (size_t j = 0; j < m; ++j) {
      const uint32_t k = magnitudeKey(v[j]);
      bool take = k >= sel.keyAll;
      if (!take && quota > 0 && k >= sel.keyTie) {
        take = true;
        --quota;
      }
      if (take) {
        values[off] = v[j];
        indices[off] = ix[j];
        r[ix[j]] = 0.0f;
        ++off;
      }
    }
  }
  return off;
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
