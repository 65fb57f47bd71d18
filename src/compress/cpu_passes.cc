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

// The fused pass, written with GCC/Clang vector extensions in 8 lanes: the
// same lane arithmetic whichever instructions carry it (two SSE2 halves in
// the baseline build, one AVX2 register in the avx2 clone that GCC's
// target_clones dispatches to at run time), so the statistics are bitwise the
// same on every x86-64. Per block of 512: acc = x + r stored to r (unless in
// place), the statistics of acc in float lanes (non-finite entries masked to
// 0 on their bits: selects, not branches), flushed to double per block; float
// partial sums of 512 values lose nothing the threshold's estimate could
// notice. Candidates: per group of 32 a lane-wise OR of "key >= tc" on the
// integer keys; only groups that hold one are scanned (scalar) and appended.
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

constexpr size_t kBlock = 512;
constexpr size_t kGroup = 32;
constexpr size_t kLanes = 8;
constexpr int32_t kNoCandidates = 0x7fffffff;  // above every finite key

typedef uint32_t v8u __attribute__((vector_size(32)));

// Where one thread's candidates go. Magnitude keys: finite entries with
// magnitudeKey >= tc (tc < 2^31; kNoCandidates lists none). random: entries
// with randomKey(seed, i) >= tc, whatever their value (randomk sends zeros).
struct CandOut {
  float* values = nullptr;
  uint32_t* indices = nullptr;
  size_t cap = 0;
  size_t count = 0;
  uint32_t tc = kNoCandidates;
  bool random = false;
  uint64_t seed = 0;
};

struct Lanes {
  v8f sum{}, sq{}, ab{}, mx{};
  v8i bad{};
};

// Vector casts between same-size vector types reinterpret the bits (GCC and
// Clang); loads and stores go through memcpy (unaligned).
#define MGS_LOADV(dst, p) __builtin_memcpy(&(dst), (p), sizeof(dst))

// randomKey of 8 consecutive indices i0.. (the same arithmetic as randomKey).
// (0 stays 0 here where randomKey folds it to 1: below every tc >= 2 either way.)
inline __attribute__((always_inline)) void randomKeys(uint64_t seed, size_t i0, v8u* out) {
  const v8u lane = {0, 1, 2, 3, 4, 5, 6, 7};
  v8u x = (lane + static_cast<uint32_t>(i0)) * 0x9E3779B1u + static_cast<uint32_t>(seed);
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x ^= static_cast<uint32_t>(seed >> 32);
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  *out = x;
}

// Appends the entries of r[i0, i1) that pass (scalar; rare).
inline void scanGroup(const float* r, size_t i0, size_t i1, CandOut* out) {
  for (size_t i = i0; i < i1; ++i) {
    const uint32_t key = out->random ? randomKey(out->seed, i) : magnitudeKey(r[i]);
    if (key >= out->tc && (out->random || key < 0x7f800000u)) {
      if (out->count < out->cap) {
        out->values[out->count] = r[i];
        out->indices[out->count] = static_cast<uint32_t>(i);
      }
      ++out->count;
    }
  }
}

// One block [b, b + len) (len <= kBlock): r = x + r when kHasX, statistics
// into `s`, candidates into `out`. xb points at x[b] (ignored without kHasX).
template <bool kHasX, bool kRandom>
inline __attribute__((always_inline)) void fusedBlock(const float* xb, float* r, size_t b,
                                                      size_t len, BufferStats* s, CandOut* out) {
  const v8i absMask = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff,
                       0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
  const v8i infKey = {0x7f800000, 0x7f800000, 0x7f800000, 0x7f800000,
                      0x7f800000, 0x7f800000, 0x7f800000, 0x7f800000};
  // Random keys are compared as signed after flipping the top bit.
  const int32_t tc = static_cast<int32_t>(kRandom ? out->tc ^ 0x80000000u : out->tc);
  v8i tcv = {};
  tcv += tc;
  Lanes l;
  float* rb = r + b;
  const size_t full = len / kGroup * kGroup;
  for (size_t g = 0; g < full; g += kGroup) {
    v8i hit = {};
    v8i hv[kGroup / kLanes];  // per-vector lane masks of "is a candidate"
    for (size_t v = g; v < g + kGroup; v += kLanes) {
      v8f a;
      MGS_LOADV(a, rb + v);
      if constexpr (kHasX) {
        v8f xv;
        MGS_LOADV(xv, xb + v);
        a = xv + a;
        __builtin_memcpy(rb + v, &a, sizeof(a));
      }
      const v8i u = (v8i)a;
      const v8i key = u & absMask;
      const v8i fin = key < infKey;  // -1 or 0 per lane
      const v8f f = (v8f)(u & fin);
      const v8i mk = key & fin;  // finite key, else 0
      const v8f m = (v8f)mk;
      l.sum += f;
      l.sq += f * f;
      l.ab += m;
      const v8i gt = l.mx > m;
      l.mx = (v8f)(((v8i)l.mx & gt) | (mk & ~gt));
      l.bad += fin;  // counts down by one per finite lane
      if constexpr (kRandom) {
        v8u rk;
        randomKeys(out->seed, b + v, &rk);
        hv[(v - g) / kLanes] = (v8i)(rk ^ 0x80000000u) >= tcv;
      } else {
        hv[(v - g) / kLanes] = mk >= tcv;
      }
      hit |= hv[(v - g) / kLanes];
    }
    uint64_t h[4];
    __builtin_memcpy(h, &hit, sizeof(h));
    if ((h[0] | h[1] | h[2] | h[3]) == 0) continue;
    // Rare: append the lanes the masks name, in index order.
    for (size_t q = 0; q < kGroup / kLanes; ++q) {
      __builtin_memcpy(h, &hv[q], sizeof(h));
      if ((h[0] | h[1] | h[2] | h[3]) == 0) continue;
      for (size_t j = 0; j < kLanes; ++j) {
        if (hv[q][j] == 0) continue;
        const size_t i = b + g + q * kLanes + j;
        if (out->count < out->cap) {
          out->values[out->count] = r[i];
          out->indices[out->count] = static_cast<uint32_t>(i);
        }
        ++out->count;
      }
    }
  }
  // Horizontal sums in a fixed lane order, then the scalar tail in the same way.
  float sum = 0, sq = 0, ab = 0, mx = 0;
  int64_t fin = 0;
  for (size_t j = 0; j < kLanes; ++j) {
    sum += l.sum[j];
    sq += l.sq[j];
    ab += l.ab[j];
    mx = std::max(mx, l.mx[j]);
    fin -= l.bad[j];
  }
  for (size_t i = full; i < len; ++i) {
    float a = rb[i];
    if constexpr (kHasX) {
      a = xb[i] + a;
      rb[i] = a;
    }
    if (std::isfinite(a)) {
      sum += a;
      sq += a * a;
      ab += std::fabs(a);
      mx = std::max(mx, std::fabs(a));
      ++fin;
    }
  }
  if (full < len) scanGroup(r, b + full, b + len, out);
  s->sum += sum;
  s->sumSq += sq;
  s->sumAbs += ab;
  s->maxAbs = std::max(s->maxAbs, mx);
  s->nonFinite += len - static_cast<size_t>(fin);
}

template <bool kHasX>
inline __attribute__((always_inline)) BufferStats fusedRange(const float* x, float* r, size_t b,
                                                             size_t e, CandOut* out) {
  BufferStats s;
  for (size_t blk = b; blk < e; blk += kBlock) {
    const float* xb = kHasX ? x + blk : nullptr;
    const size_t len = std::min(kBlock, e - blk);
    if (out->random)
      fusedBlock<kHasX, true>(xb, r, blk, len, &s, out);
    else
      fusedBlock<kHasX, false>(xb, r, blk, len, &s, out);
  }
  return s;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(MGS_NO_TARGET_CLONES)
#define MGS_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MGS_CLONES
#endif

// f32 input (x != nullptr) or in place (x == nullptr).
MGS_CLONES BufferStats fusedRangeF32(const float* x, float* r, size_t b, size_t e, CandOut* out) {
  return x ? fusedRange<true>(x, r, b, e, out) : fusedRange<false>(nullptr, r, b, e, out);
}

// f16/bf16: widened a block at a time into a float buffer, then as f32.
template <typename Widen>
BufferStats fusedRangeWiden(Widen widen, float* r, size_t b, size_t e, CandOut* out) {
  BufferStats s;
  float xf[kBlock];
  for (size_t blk = b; blk < e; blk += kBlock) {
    const size_t len = std::min(kBlock, e - blk);
    for (size_t j = 0; j < len; ++j) xf[j] = widen(blk + j);
    if (out->random)
      fusedBlock<true, true>(xf, r, blk, len, &s, out);
    else
      fusedBlock<true, false>(xf, r, blk, len, &s, out);
  }
  return s;
}

BufferStats fusedChunkAny(const void* x, DataType dtype, float* r, size_t b, size_t e,
                          CandOut* out) {
  if (x != nullptr && dtype == MGS_FLOAT16) {
    const auto* h = static_cast<const uint16_t*>(x);
    return fusedRangeWiden([h](size_t i) { return halfToFloat(h[i]); }, r, b, e, out);
  }
  if (x != nullptr && dtype == MGS_BFLOAT16) {
    const auto* h = static_cast<const uint16_t*>(x);
    return fusedRangeWiden([h](size_t i) { return bfloat16ToFloat(h[i]); }, r, b, e, out);
  }
  return fusedRangeF32(static_cast<const float*>(x), r, b, e, out);
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
    CandOut none;
    part[c] = fusedChunkAny(x, dtype, r, b, e, &none);
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
    CandOut out;
    out.values = cand->values + cand->cap * t;
    out.indices = cand->indices + cand->cap * t;
    out.cap = cand->cap;
    out.tc = tc;
    out.random = cand->random;
    out.seed = cand->seed;
    for (int c = c0; c < c1; ++c) {
      const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
      part[c] = fusedChunkAny(x, dtype, r, b, e, &out);
    }
    cand->count[t] = out.count;
  }
  cand->overflow = false;
  for (int t = 0; t < cand->regions; ++t)
    if (cand->count[t] > cand->cap) cand->overflow = true;
  return reduceInChunkOrder(part);
}

namespace {
// keys[i - b] = key of acc[i], or 0 for a non-finite acc[i]; returns how many were non-finite.
template <typename Load>
size_t sampleRange(Load load, const float* r, size_t b, size_t e, uint32_t* keys) {
  size_t bad = 0;
  for (size_t i = b; i < e; ++i) {
    const uint32_t k = magnitudeKey(load(i) + r[i]);
    const bool fin = k < 0x7f800000u;
    keys[i - b] = fin ? k : 0u;
    bad += !fin;
  }
  return bad;
}
// Blocks of the sample read in parallel (scattered reads: latency-bound).
template <typename Load>
size_t sampleAll(Load load, const float* r, size_t n, int threads, uint32_t* keys) {
  if (n <= kSampleMax) return n - sampleRange(load, r, 0, n, keys);
  constexpr long blocks = kSampleMax / kSampleBlock;
  const size_t step = n / blocks;  // >= kSampleBlock
  size_t bad = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : bad)
  for (long j = 0; j < blocks; ++j)
    bad += sampleRange(load, r, j * step, j * step + kSampleBlock, keys + j * kSampleBlock);
  return kSampleMax - bad;
}
}  // namespace

size_t sampleKeys(const void* x, DataType dtype, const float* r, size_t n, [[maybe_unused]] int threads,
                  uint32_t* keys) {
  if (x == nullptr) return sampleAll([](size_t) { return 0.0f; }, r, n, threads, keys);
  if (dtype == MGS_FLOAT16) {
    const auto* h = static_cast<const uint16_t*>(x);
    return sampleAll([h](size_t i) { return halfToFloat(h[i]); }, r, n, threads, keys);
  }
  if (dtype == MGS_BFLOAT16) {
    const auto* h = static_cast<const uint16_t*>(x);
    return sampleAll([h](size_t i) { return bfloat16ToFloat(h[i]); }, r, n, threads, keys);
  }
  const auto* f = static_cast<const float*>(x);
  return sampleAll([f](size_t i) { return f[i]; }, r, n, threads, keys);
}

uint32_t kthLargestKey(uint32_t* keys, size_t s, size_t want) {
  constexpr uint32_t kShift = 20;  // keys < 2^31: 2^11 bins
  std::vector<uint32_t> h(size_t{1} << (31 - kShift), 0);
  for (size_t j = 0; j < s; ++j) ++h[keys[j] >> kShift];
  size_t above = 0;
  uint32_t bin = static_cast<uint32_t>(h.size() - 1);
  while (above + h[bin] < want) above += h[bin--];  // stops: the counts sum to s >= want
  size_t m = 0;
  for (size_t j = 0; j < s; ++j)
    if ((keys[j] >> kShift) == bin) keys[m++] = keys[j];
  const size_t r = want - above;  // 1 <= r <= m
  std::nth_element(keys, keys + (r - 1), keys + m, std::greater<uint32_t>());
  return keys[r - 1];
}

void candidateHistogram(const Candidates& cand, Window w, uint64_t* hist) {
  std::fill(hist, hist + kStride, uint64_t{0});
  for (int t = 0; t < cand.regions; ++t) {
    const float* v = cand.values + cand.cap * t;
    const uint32_t* ix = cand.indices + cand.cap * t;
    const size_t m = std::min(cand.count[t], cand.cap);
    for (size_t j = 0; j < m; ++j) {
      const int b = binOf(cand.random ? randomKey(cand.seed, ix[j]) : magnitudeKey(v[j]), w);
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
      const uint32_t k = cand.random ? randomKey(cand.seed, ix[j]) : magnitudeKey(v[j]);
      bool take = k >= sel.keyAll;
      if (!take && quota > 0 && k >= sel.keyTie) {
        take = true;
        --quota;
      }
      if (take) {
        // r, not v: a random candidate may have been non-finite and zeroed since.
        values[off] = r[ix[j]];
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
