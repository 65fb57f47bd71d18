// Device primitives of the GPU selectors and of sparse decompression
// (cuda/compress_kernels.cu). Plain host header: no CUDA types, streams are
// void* (cudaStream_t), every function returns a cudaError_t as int (0 = ok),
// is asynchronous on `stream`, allocates nothing and never synchronises.
// Temporary storage follows CUB's two-phase style: ask compressTempBytes()
// once for the largest n, hand the same block to every call.
// The orchestration (which pass, when a count must reach the host) lives in
// gpu_selector.cc; the thresholds come from src/compress/threshold_search.h,
// shared with the CPU path so both pick the same entries.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mgs/mgs.h"

namespace mgs::cuda::kernels {

// Statistics of acc over finite entries, as one fused reduction produces them.
struct DeviceStats {
  double sum;
  double sumSq;
  double sumAbs;
  float maxAbs;
  uint32_t pad;
  unsigned long long nonFinite;
};

// Per-block partials of accumulateStats (fixed grid, so the reduction order
// is the same on every run).
size_t statsPartials(size_t n);

// CUB temporary storage for every primitive below on up to n elements
// (sampleCapacity: dgc sample keys).
int compressTempBytes(size_t n, size_t sampleCapacity, size_t* bytes);

// r = float(x) + r (x: f32, f16 or bf16) and the statistics of the new r into
// *d_stats. d_partials: statsPartials(n) DeviceStats.
int accumulateStats(const void* d_x, mgs_dtype_t dtype, float* d_r, size_t n,
                    DeviceStats* d_partials, DeviceStats* d_stats, void* d_temp, size_t tempBytes,
                    void* stream);
// r[i] = 0 where r[i] is not finite.
int zeroNonFinite(float* d_r, size_t n, void* stream);

// Keys: |r| bit patterns (seed ignored) or randomKey(seed, i) (d_r ignored).
enum class Keys { kMagnitude, kRandom };

// kHistBins + 1 counters of the window (lo, shift), see threshold_search.h.
int histogram(Keys keys, const float* d_r, uint64_t seed, size_t n, uint32_t lo, uint32_t shift,
              unsigned* d_hist, void* d_temp, size_t tempBytes, void* stream);

// Selects key >= keyAll, plus the first `quota` (index order) of the keys in
// [keyTie, keyAll) when hasTie; writes indices ascending, gathers the values
// and zeroes them in r. `count` is the total the search computed (the
// gather needs no device-to-host copy). d_ranks: n uint32 (used when hasTie).
struct Rule {
  uint64_t keyAll;
  uint32_t keyTie;
  int hasTie;
  uint64_t quota;
};
int compact(Keys keys, float* d_r, uint64_t seed, size_t n, Rule rule, size_t count,
            uint32_t* d_ranks, uint32_t* d_numSelected, float* d_values, uint32_t* d_indices,
            void* d_temp, size_t tempBytes, void* stream);

// values = r, indices = 0..n-1, r = 0.
int takeAll(float* d_r, size_t n, float* d_values, uint32_t* d_indices, void* stream);

// dgc: keys of r[start + j*stride], j < count, sorted descending into d_sorted.
int sampleKeysDescending(const float* d_r, size_t start, size_t stride, size_t count,
                         uint32_t* d_keys, uint32_t* d_sorted, void* d_temp, size_t tempBytes,
                         void* stream);

// Decompression, bitwise equal to compress::scatterAdd: the `total` pairs of
// all ranks (concatenated in rank order) are stably sorted by index, each
// output element is summed in that order from +0.0f and scaled. Indices >= n
// are ignored (the pad sentinel of algorithms.md 7.7). d_work: total uint32 +
// total float; temp: scatterAddTempBytes(total).
int scatterAddTempBytes(size_t total, size_t* bytes);
int scatterAdd(const float* d_values, const uint32_t* d_indices, size_t total, size_t n,
               float scale, float* d_out, void* d_work, void* d_temp, size_t tempBytes,
               void* stream);

}  // namespace mgs::cuda::kernels
