// The CPU passes over a buffer behind the selectors. Each pass splits [0, n)
// into `chunks` contiguous chunks (chunksFor(n): a function of n only), one
// parallelFor task each on up to `threads` threads, and reduces the per-chunk
// results in chunk order, so results are bitwise the same for any thread
// count. Per-chunk histograms let the compaction pass
// know every chunk's output offset without another counting pass.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "compress/gradient_parts.h"
#include "compress/threshold_search.h"

namespace mgs::compress::cpu {

struct BufferStats {
  double sum = 0, sumSq = 0, sumAbs = 0;  // over finite entries
  float maxAbs = 0;                       // over finite entries
  size_t nonFinite = 0;
};

constexpr int kMaxChunks = 64;
inline int chunksFor(size_t n) { return static_cast<int>(std::min<size_t>(kMaxChunks, std::max<size_t>(1, n >> 16))); }
inline size_t chunkBegin(size_t n, int chunks, int c) { return n / chunks * c + std::min<size_t>(c, n % chunks); }

// r[i] = float(x[i]) + r[i]; returns the statistics of the new r. x == nullptr:
// r already holds acc (in-place mode), nothing is written. rin (with x): read
// the old residual from rin instead, r[i] = float(x[i]) + rin[i] (rin intact).
BufferStats accumulate(const void* x, DataType dtype, float* r, size_t n, int chunks, int threads,
                       const float* rin = nullptr);
// The same with x given as parts (x.count == 0: in place). One part
// {x, dtype, scale 1, n} is the call above, bit for bit; parts give the
// statistics and acc of the buffer their values would fuse into.
BufferStats accumulate(const GradientParts& x, float* r, size_t n, int chunks, int threads,
                       const float* rin = nullptr);

// Candidate list of the single-pass path: thread t of the fused pass owns the
// contiguous chunk range [chunks*t/T, chunks*(t+1)/T) (T: threads in the
// team) and appends to region t = [t*cap, (t+1)*cap) of values/indices, so
// regions 0, 1, ... read in order are ascending by index. count[t] keeps
// counting past cap (then overflow is true and the list is incomplete).
struct Candidates {
  float* values = nullptr;
  uint32_t* indices = nullptr;
  size_t cap = 0;           // entries per region
  int regions = 0;          // >= the fused pass's thread count
  size_t* count = nullptr;  // `regions` counters
  bool overflow = false;
  bool random = false;  // randomk: keys randomKey(seed, index), any value
  uint64_t seed = 0;
  size_t total() const {
    size_t t = 0;
    for (int i = 0; i < regions; ++i) t += count[i];
    return t;
  }
};

// The fused pass: accumulate (as above; x == nullptr: in place, read only)
// plus the candidate list of every finite entry with magnitudeKey >= tc
// (1 <= tc < 2^31), or with cand->random of every entry with
// randomKey(seed, i) >= tc (tc >= 1). Statistics are reduced in chunk order as in accumulate(), so
// they are bitwise those of accumulate() for any thread count.
BufferStats accumulateCandidates(const void* x, DataType dtype, float* r, size_t n, int chunks, int threads,
                                 uint32_t tc, Candidates* cand, const float* rin = nullptr);
BufferStats accumulateCandidates(const GradientParts& x, float* r, size_t n, int chunks, int threads, uint32_t tc,
                                 Candidates* cand, const float* rin = nullptr);

// Keys of acc = float(x) + r (x == nullptr: r) at the sample positions,
// written nowhere else: all of [0, n) when n <= kSampleMax, else
// kSampleMax / kSampleBlock blocks of kSampleBlock entries starting at
// j * (n / blocks). keys[j] (capacity min(n, kSampleMax)) gets the key, or 0
// for a non-finite entry; returns the number of finite entries.
constexpr size_t kSampleMax = 65536;
constexpr size_t kSampleBlock = 256;
size_t sampleKeys(const void* x, DataType dtype, const float* r, size_t n, int threads, uint32_t* keys);
size_t sampleKeys(const GradientParts& x, const float* r, size_t n, int threads, uint32_t* keys);
// The want-th largest of keys[0, s) (1 <= want <= s, keys < 2^31), as
// std::nth_element would find it, by a 2048-bin histogram of the top key
// bits and a selection among the keys of the crossing bin; reorders keys.
uint32_t kthLargestKey(uint32_t* keys, size_t s, size_t want);
// r[i] = 0 where r[i] is NaN or +-Inf.
void zeroNonFinite(float* r, size_t n, int chunks, int threads);

enum class KeyKind { kMagnitude, kRandom };
struct KeySource {
  KeyKind kind = KeyKind::kMagnitude;
  const float* acc = nullptr;  // kMagnitude
  uint64_t seed = 0;           // kRandom
};

// hist[c * (kHistBins + 1) + b] = number of keys of chunk c in bin b of `w`.
void histogram(const KeySource& keys, size_t n, Window w, int chunks, int threads, uint32_t* hist);

// Writes the selected entries (ascending index) and zeroes them in r.
// `hist` is the per-chunk histogram of the window the search finished in.
void compact(const KeySource& keys, size_t n, const Selection& sel, int chunks, int threads, const uint32_t* hist,
             float* r, float* values, uint32_t* indices);

// Histogram of window `w` over the candidate list (single thread): the same
// counts as histogram() over the whole buffer as long as w.lo >= tc and the
// list is complete.
void candidateHistogram(const Candidates& cand, Window w, uint64_t* hist);
// Compaction from the candidate list: every candidate with key >= keyAll plus
// the first `quota` (index order) with key in [keyTie, keyAll); values and
// indices ascending, r zeroed at those indices. Returns the count written.
size_t compactCandidates(const Candidates& cand, const Selection& sel, float* r, float* values, uint32_t* indices);

// Tests only: when nonzero, caps the entries per candidate region (the
// workspace keeps its size), which forces the overflow fallback.
extern std::atomic<size_t> testCandidateCapLimit;
// Tests only: when true, the fused pass uses its baseline (SSE2 / generic)
// code even where AVX2 is available.
extern std::atomic<bool> testForceBaseline;

// Dense path (none, k >= n): values = r, indices = 0..n-1, r = 0.
void takeAll(float* r, size_t n, int chunks, int threads, float* values, uint32_t* indices);

}  // namespace mgs::compress::cpu
