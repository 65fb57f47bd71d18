#include "compress/cpu_passes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/parallel.h"

namespace mgs::compress::cpu {
namespace {

constexpr size_t kStride = kHistBins + 1;

// The fused pass, written with GCC/Clang vector extensions over 8 logical
// lanes: lane j of every statistic accumulates elements i with i % 8 == j of
// each block, held in two 4-wide vectors (SSE2, the baseline build) or one
// 8-wide vector (AVX2, picked at run time with __builtin_cpu_supports), so the
// statistics are bitwise the same on every x86-64. Per block of 512: acc =
// x + r stored to r (unless in place), the statistics of acc in float lanes
// (non-finite entries masked to 0 on their bits: selects, not branches),
// flushed to double per block; float partial sums of 512 values lose nothing
// the threshold's estimate could notice. Candidates: per group of 32 an OR of
// the per-vector "key >= tc" masks; only groups with a hit look at their
// masks' lanes (rare) and append those entries in index order.
constexpr size_t kBlock = 512;
constexpr size_t kGroup = 32;
constexpr size_t kLanes = 8;
constexpr int32_t kNoCandidates = 0x7fffffff;  // above every finite key

template <int W>
struct Vec;
template <>
struct Vec<4> {
  typedef float F __attribute__((vector_size(16)));
  typedef int32_t I __attribute__((vector_size(16)));
  typedef uint32_t U __attribute__((vector_size(16)));
  static constexpr U lane = {0, 1, 2, 3};
};
template <>
struct Vec<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
  typedef uint32_t U __attribute__((vector_size(32)));
  static constexpr U lane = {0, 1, 2, 3, 4, 5, 6, 7};
};

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
  // With x: where the old residual is read (null: from r itself). acc is
  // always written to r, so r may be a scratch buffer and rin stays intact.
  const float* rin = nullptr;
};

inline void append(const float* r, size_t i, CandOut* out) {
  if (out->count < out->cap) {
    out->values[out->count] = r[i];
    out->indices[out->count] = static_cast<uint32_t>(i);
  }
  ++out->count;
}

// Appends the entries of r[i0, i1) that pass (scalar: the block's tail).
inline void scanRange(const float* r, size_t i0, size_t i1, CandOut* out) {
  for (size_t i = i0; i < i1; ++i) {
    const uint32_t key = out->random ? randomKey(out->seed, i) : magnitudeKey(r[i]);
    if (key >= out->tc && (out->random || key < 0x7f800000u)) append(r, i, out);
  }
}

template <typename V>
inline __attribute__((always_inline)) bool anyLane(const V& v) {
  uint64_t h[sizeof(V) / 8];
  __builtin_memcpy(h, &v, sizeof(h));
  uint64_t o = 0;
  for (size_t j = 0; j < sizeof(V) / 8; ++j) o |= h[j];
  return o != 0;
}

// One block [b, b + len) (len <= kBlock): r = x + r when kHasX, statistics
// into `s`, candidates into `out`. xb points at x[b] (ignored without kHasX).
// Vector casts between same-size vector types reinterpret the bits.
template <int W, bool kHasX, bool kRandom>
inline __attribute__((always_inline)) void fusedBlock(const float* xb, float* r, size_t b, size_t len, BufferStats* s,
                                                      CandOut* out) {
  typedef typename Vec<W>::F F;
  typedef typename Vec<W>::I I;
  typedef typename Vec<W>::U U;
  constexpr size_t P = kLanes / W;  // vectors per 8 logical lanes
  I absMask = {}, infKey = {}, tcv = {};
  absMask += 0x7fffffff;
  infKey += 0x7f800000;
  // Random keys are compared as signed after flipping the top bit.
  tcv += static_cast<int32_t>(kRandom ? out->tc ^ 0x80000000u : out->tc);
  F sumv[P] = {}, sqv[P] = {}, abv[P] = {}, mxv[P] = {};
  I badv[P] = {};
  float* rb = r + b;
  const float* rsrc = (kHasX && out->rin ? out->rin : r) + b;  // == rb in place
  const size_t full = len / kGroup * kGroup;
  for (size_t g = 0; g < full; g += kGroup) {
    I hit = {};
    I hv[kGroup / W];  // per-vector lane masks of "is a candidate"
    for (size_t q = 0; q < kGroup / W; ++q) {
      const size_t v = g + q * W;
      const size_t p = q % P;
      F a;
      __builtin_memcpy(&a, rsrc + v, sizeof(a));
      if constexpr (kHasX) {
        F xv;
        __builtin_memcpy(&xv, xb + v, sizeof(xv));
        a = xv + a;
        __builtin_memcpy(rb + v, &a, sizeof(a));
      }
      const I u = (I)a;
      const I key = u & absMask;
      const I fin = key < infKey;  // -1 or 0 per lane
      const F f = (F)(u & fin);
      const I mk = key & fin;  // finite key, else 0
      const F m = (F)mk;
      sumv[p] += f;
      sqv[p] += f * f;
      abv[p] += m;
      const I gt = mxv[p] > m;
      mxv[p] = (F)(((I)mxv[p] & gt) | (mk & ~gt));
      badv[p] += fin;  // counts down by one per finite lane
      if constexpr (kRandom) {
        // randomKey of W consecutive indices (0 stays 0 here where randomKey
        // folds it to 1: below every tc >= 2 either way).
        U x = (Vec<W>::lane + static_cast<uint32_t>(b + v)) * 0x9E3779B1u + static_cast<uint32_t>(out->seed);
        x ^= x >> 16;
        x *= 0x85EBCA6Bu;
        x ^= x >> 13;
        x ^= static_cast<uint32_t>(out->seed >> 32);
        x *= 0xC2B2AE35u;
        x ^= x >> 16;
        hv[q] = (I)(x ^ 0x80000000u) >= tcv;
      } else {
        hv[q] = mk >= tcv;
      }
      hit |= hv[q];
    }
    if (!anyLane(hit)) continue;
    for (size_t q = 0; q < kGroup / W; ++q) {  // rare: the lanes the masks name, in order
      if (!anyLane(hv[q])) continue;
      for (size_t j = 0; j < W; ++j)
        if (hv[q][j] != 0) append(r, b + g + q * W + j, out);
    }
  }
  // Horizontal sums in the fixed logical lane order, then the scalar tail.
  float sum = 0, sq = 0, ab = 0, mx = 0;
  int64_t fin = 0;
  for (size_t j = 0; j < kLanes; ++j) {
    sum += sumv[j / W][j % W];
    sq += sqv[j / W][j % W];
    ab += abv[j / W][j % W];
    mx = std::max(mx, mxv[j / W][j % W]);
    fin -= badv[j / W][j % W];
  }
  for (size_t i = full; i < len; ++i) {
    float a = rsrc[i];
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
  if (full < len) scanRange(r, b + full, b + len, out);
  s->sum += sum;
  s->sumSq += sq;
  s->sumAbs += ab;
  s->maxAbs = std::max(s->maxAbs, mx);
  s->nonFinite += len - static_cast<size_t>(fin);
}

// The gradient of a pass: parts laid end to end (GradientParts), with each
// part's first index. A cursor walks it a block at a time in index order.
class Source {
 public:
  explicit Source(const GradientParts& x) : parts_(x.parts), count_(x.count), begin_(x.count + 1, 0) {
    for (size_t j = 0; j < count_; ++j) begin_[j + 1] = begin_[j] + parts_[j].n;
  }
  bool empty() const { return count_ == 0; }
  size_t total() const { return begin_[count_]; }
  // The part holding index i (i < total()), searched from `from` on: parts
  // of n = 0 are skipped.
  size_t partOf(size_t i, size_t from) const {
    while (begin_[from + 1] <= i) ++from;
    return from;
  }
  // x[b, b + len) as floats: a pointer into the part itself when the range
  // lies inside one unscaled float32 part, else converted into buf. *part is
  // the cursor (a part at or before b's), advanced.
  const float* block(size_t b, size_t len, float* buf, size_t* part) const {
    size_t q = partOf(b, *part);
    *part = q;
    const GradientPart& p0 = parts_[q];
    if (p0.dtype == MGS_FLOAT32 && p0.scale == 1.0f && b + len <= begin_[q + 1])
      return static_cast<const float*>(p0.data) + (b - begin_[q]);
    for (size_t done = 0; done < len;) {
      q = partOf(b + done, q);
      const GradientPart& p = parts_[q];
      const size_t at = b + done - begin_[q];
      const size_t take = std::min(len - done, begin_[q + 1] - (b + done));
      float* d = buf + done;
      if (p.dtype == MGS_FLOAT16)
        halfToFloatN(static_cast<const uint16_t*>(p.data) + at, take, d);
      else if (p.dtype == MGS_BFLOAT16)
        bfloat16ToFloatN(static_cast<const uint16_t*>(p.data) + at, take, d);
      else
        std::memcpy(d, static_cast<const float*>(p.data) + at, take * sizeof(float));
      if (p.scale != 1.0f)
        for (size_t j = 0; j < take; ++j) d[j] = d[j] * p.scale;
      done += take;
    }
    return buf;
  }

 private:
  const GradientPart* parts_;
  size_t count_;
  std::vector<size_t> begin_;
};

// x empty: in place.
template <int W>
inline __attribute__((always_inline)) BufferStats fusedRangeW(const Source& x, float* r, size_t b, size_t e,
                                                              CandOut* out) {
  BufferStats s;
  float xf[kBlock];
  size_t part = 0;
  for (size_t blk = b; blk < e; blk += kBlock) {
    const size_t len = std::min(kBlock, e - blk);
    if (x.empty()) {
      if (out->random)
        fusedBlock<W, false, true>(nullptr, r, blk, len, &s, out);
      else
        fusedBlock<W, false, false>(nullptr, r, blk, len, &s, out);
    } else {
      const float* xb = x.block(blk, len, xf, &part);
      if (out->random)
        fusedBlock<W, true, true>(xb, r, blk, len, &s, out);
      else
        fusedBlock<W, true, false>(xb, r, blk, len, &s, out);
    }
  }
  return s;
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(MGS_NO_AVX2_PATH)
#define MGS_AVX2_PATH 1
__attribute__((target("avx2"))) BufferStats fusedRangeAvx2(const Source& x, float* r, size_t b, size_t e,
                                                           CandOut* out) {
  return fusedRangeW<8>(x, r, b, e, out);
}
bool haveAvx2() {
  static const bool yes = [] {
    __builtin_cpu_init();  // in case this runs from a static constructor
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}
#endif

BufferStats fusedChunkAny(const Source& x, float* r, size_t b, size_t e, CandOut* out) {
#ifdef MGS_AVX2_PATH
  if (haveAvx2() && !testForceBaseline.load(std::memory_order_relaxed)) return fusedRangeAvx2(x, r, b, e, out);
#endif
  return fusedRangeW<4>(x, r, b, e, out);
}

// One part for a single buffer; none (in place) for x == nullptr.
struct OnePart {
  GradientPart part;
  GradientParts parts() const { return part.data ? GradientParts{&part, 1} : GradientParts{}; }
};
OnePart onePart(const void* x, DataType dtype, size_t n) {
  OnePart o;
  o.part.data = x;
  o.part.dtype = dtype;
  o.part.n = n;
  return o;
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
void compactChunk(KeyFn key, size_t b, size_t e, const Selection& sel, size_t quota, size_t off, float* r,
                  float* values, uint32_t* indices) {
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
std::atomic<bool> testForceBaseline{false};

BufferStats accumulate(const GradientParts& x, float* r, size_t n, int chunks, int threads, const float* rin) {
  const Source src(x);
  std::vector<BufferStats> part(chunks);
  parallelFor(chunks, threads, [&](int c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    CandOut none;
    none.rin = rin;
    part[c] = fusedChunkAny(src, r, b, e, &none);
  });
  return reduceInChunkOrder(part);
}

BufferStats accumulate(const void* x, DataType dtype, float* r, size_t n, int chunks, int threads,
                       const float* rin) {
  return accumulate(onePart(x, dtype, n).parts(), r, n, chunks, threads, rin);
}

BufferStats accumulateCandidates(const GradientParts& x, float* r, size_t n, int chunks, int threads, uint32_t tc,
                                 Candidates* cand, const float* rin) {
  const Source src(x);
  std::vector<BufferStats> part(chunks);
  std::fill(cand->count, cand->count + cand->regions, size_t{0});
  const int team = std::max(1, std::min(threads, cand->regions));
  const int nt = team;
  parallelFor(team, threads, [&](int t) {
    // Contiguous chunk ranges in task order: region t's indices precede region t+1's.
    const int c0 = static_cast<int>(int64_t{chunks} * t / nt);
    const int c1 = static_cast<int>(int64_t{chunks} * (t + 1) / nt);
    CandOut out;
    out.values = cand->values + cand->cap * t;
    out.indices = cand->indices + cand->cap * t;
    out.cap = cand->cap;
    out.tc = tc;
    out.random = cand->random;
    out.seed = cand->seed;
    out.rin = rin;
    for (int c = c0; c < c1; ++c) {
      const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
      part[c] = fusedChunkAny(src, r, b, e, &out);
    }
    cand->count[t] = out.count;
  });
  cand->overflow = false;
  for (int t = 0; t < cand->regions; ++t)
    if (cand->count[t] > cand->cap) cand->overflow = true;
  return reduceInChunkOrder(part);
}

BufferStats accumulateCandidates(const void* x, DataType dtype, float* r, size_t n, int chunks, int threads,
                                 uint32_t tc, Candidates* cand, const float* rin) {
  return accumulateCandidates(onePart(x, dtype, n).parts(), r, n, chunks, threads, tc, cand, rin);
}

namespace {
// keys[i - b] = key of acc[i] = x[i] + r[i] (x: xb[i - b], or 0 in place),
// or 0 for a non-finite acc[i]; returns how many were non-finite.
template <typename Load>
size_t sampleRangeOf(Load load, const float* r, size_t b, size_t e, uint32_t* keys) {
  size_t bad = 0;
  for (size_t i = b; i < e; ++i) {
    const uint32_t k = magnitudeKey(load(i - b) + r[i]);
    const bool fin = k < 0x7f800000u;
    keys[i - b] = fin ? k : 0u;
    bad += !fin;
  }
  return bad;
}
size_t sampleRange(const float* xb, const float* r, size_t b, size_t e, uint32_t* keys) {
  if (xb == nullptr) return sampleRangeOf([](size_t) { return 0.0f; }, r, b, e, keys);
  return sampleRangeOf([xb](size_t j) { return xb[j]; }, r, b, e, keys);
}
// x[b, e) through the source a sample block at a time, then its keys.
size_t sampleSpan(const Source& x, const float* r, size_t b, size_t e, uint32_t* keys) {
  size_t bad = 0, part = 0;
  float buf[kSampleBlock];
  for (size_t i = b; i < e; i += kSampleBlock) {
    const size_t len = std::min(kSampleBlock, e - i);
    const float* xb = x.empty() ? nullptr : x.block(i, len, buf, &part);
    bad += sampleRange(xb, r, i, i + len, keys + (i - b));
  }
  return bad;
}
}  // namespace

size_t sampleKeys(const GradientParts& x, const float* r, size_t n, int threads, uint32_t* keys) {
  const Source src(x);
  if (n <= kSampleMax) return n - sampleSpan(src, r, 0, n, keys);
  // Blocks of the sample read in parallel (scattered reads: latency-bound).
  constexpr long blocks = kSampleMax / kSampleBlock;
  const size_t step = n / blocks;  // >= kSampleBlock
  // Tasks of several blocks each; per-task counts, summed in order.
  constexpr int kTasks = 16;
  size_t bad[kTasks] = {};
  parallelFor(kTasks, threads, [&](int t) {
    for (long j = blocks * t / kTasks; j < blocks * (t + 1) / kTasks; ++j)
      bad[t] += sampleSpan(src, r, j * step, j * step + kSampleBlock, keys + j * kSampleBlock);
  });
  size_t total = 0;
  for (size_t b : bad) total += b;
  return kSampleMax - total;
}

size_t sampleKeys(const void* x, DataType dtype, const float* r, size_t n, int threads, uint32_t* keys) {
  return sampleKeys(onePart(x, dtype, n).parts(), r, n, threads, keys);
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

size_t compactCandidates(const Candidates& cand, const Selection& sel, float* r, float* values, uint32_t* indices) {
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

void zeroNonFinite(float* r, size_t n, int chunks, int threads) {
  parallelFor(chunks, threads, [&](int c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    for (size_t i = b; i < e; ++i)
      if (!std::isfinite(r[i])) r[i] = 0.0f;
  });
}

void histogram(const KeySource& keys, size_t n, Window w, int chunks, int threads, uint32_t* hist) {
  parallelFor(chunks, threads, [&](int c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    if (keys.kind == KeyKind::kMagnitude)
      histogramChunk(MagKey{keys.acc}, b, e, w, hist + c * kStride);
    else
      histogramChunk(RandKey{keys.seed}, b, e, w, hist + c * kStride);
  });
}

void compact(const KeySource& keys, size_t n, const Selection& sel, int chunks, int threads,
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
  parallelFor(chunks, threads, [&](int c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    if (keys.kind == KeyKind::kMagnitude)
      compactChunk(MagKey{keys.acc}, b, e, sel, quota[c], offset[c], r, values, indices);
    else
      compactChunk(RandKey{keys.seed}, b, e, sel, quota[c], offset[c], r, values, indices);
  });
}

void takeAll(float* r, size_t n, int chunks, int threads, float* values, uint32_t* indices) {
  parallelFor(chunks, threads, [&](int c) {
    const size_t b = chunkBegin(n, chunks, c), e = chunkBegin(n, chunks, c + 1);
    std::memcpy(values + b, r + b, (e - b) * sizeof(float));
    std::fill(r + b, r + e, 0.0f);
    for (size_t i = b; i < e; ++i) indices[i] = static_cast<uint32_t>(i);
  });
}

}  // namespace mgs::compress::cpu
