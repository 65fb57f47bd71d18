// The CPU passes over a buffer behind the selectors. Each pass splits [0, n)
// into `chunks` contiguous chunks (chunksFor(n): a function of n only), one
// OpenMP iteration each on up to `threads` threads, and reduces the per-chunk
// results in chunk order, so results are bitwise the same for any thread
// count. Per-chunk histograms let the compaction pass
// know every chunk's output offset without another counting pass.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "compress/threshold_search.h"

namespace mgs::compress::cpu {

struct BufferStats {
  double sum = 0, sumSq = 0, sumAbs = 0;  // over finite entries
  float maxAbs = 0;                       // over finite entries
  size_t nonFinite = 0;
};

constexpr int kMaxChunks = 64;
inline int chunksFor(size_t n) {
  return static_cast<int>(std::min<size_t>(kMaxChunks, std::max<size_t>(1, n >> 16)));
}
inline size_t chunkBegin(size_t n, int chunks, int c) {
  return n / chunks * c + std::min<size_t>(c, n % chunks);
}

// r[i] = float(x[i]) + r[i]; returns the statistics of the new r.
BufferStats accumulate(const void* x, DataType dtype, float* r, size_t n, int chunks, int threads);
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
void compact(const KeySource& keys, size_t n, const Selection& sel, int chunks, int threads,
             const uint32_t* hist, float* r, float* values, uint32_t* indices);

// Dense path (none, k >= n): values = r, indices = 0..n-1, r = 0.
void takeAll(float* r, size_t n, int chunks, int threads, float* values, uint32_t* indices);

}  // namespace mgs::compress::cpu
