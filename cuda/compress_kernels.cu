// Device side of the selectors: one fused accumulate+statistics kernel, then
// CUB for everything that is a histogram, a selection, a scan or a sort.
// All of it in one translation unit: each CUB instantiation costs compile time.
#include "compress_kernels.h"

#include <algorithm>

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_histogram.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "compress/threshold_search.h"

namespace mgs::cuda::kernels {
namespace {

using compress::binOf;
using compress::kHistBins;
using compress::magnitudeKey;
using compress::randomKey;
using compress::Window;

constexpr int kThreads = 256;
constexpr size_t kMaxStatsBlocks = 1024;

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }
unsigned gridFor(size_t n, size_t cap = 65535) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min(b, cap)));
}

struct StatsOp {
  __host__ __device__ DeviceStats operator()(const DeviceStats& a, const DeviceStats& b) const {
    DeviceStats s;
    s.sum = a.sum + b.sum;
    s.sumSq = a.sumSq + b.sumSq;
    s.sumAbs = a.sumAbs + b.sumAbs;
    s.maxAbs = a.maxAbs > b.maxAbs ? a.maxAbs : b.maxAbs;
    s.pad = 0;
    s.nonFinite = a.nonFinite + b.nonFinite;
    return s;
  }
};

__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void accumulateStatsKernel(const T* __restrict__ x, float* __restrict__ r, size_t n,
                                      DeviceStats* __restrict__ partials) {
  DeviceStats s{0, 0, 0, 0.0f, 0, 0};
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t i = blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x; i < n; i += stride) {
    const float a = toFloat(x[i]) + r[i];  // one fp32 add, as on the CPU
    r[i] = a;
    if (isfinite(a)) {
      const double d = a;
      s.sum += d;
      s.sumSq += d * d;
      s.sumAbs += fabs(d);
      s.maxAbs = fmaxf(s.maxAbs, fabsf(a));
    } else {
      ++s.nonFinite;
    }
  }
  using Reduce = cub::BlockReduce<DeviceStats, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const DeviceStats t = Reduce(tmp).Reduce(s, StatsOp{});
  if (threadIdx.x == 0) partials[blockIdx.x] = t;
}

__global__ void zeroNonFiniteKernel(float* r, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t i = blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x; i < n; i += stride)
    if (!isfinite(r[i])) r[i] = 0.0f;
}

// Histogram samples: the bin of each key in the window, -1 (below) is dropped by CUB.
struct MagnitudeBin {
  const float* r;
  Window w;
  __host__ __device__ int operator()(uint32_t i) const { return binOf(magnitudeKey(r[i]), w); }
};
struct RandomBin {
  uint64_t seed;
  Window w;
  __host__ __device__ int operator()(uint32_t i) const { return binOf(randomKey(seed, i), w); }
};

struct KeyOf {
  const float* r;
  uint64_t seed;
  int random;
  __host__ __device__ __forceinline__ uint32_t operator()(uint32_t i) const {
    return random ? randomKey(seed, i) : magnitudeKey(r[i]);
  }
};
struct IsTie {
  KeyOf key;
  uint64_t keyAll;
  uint32_t keyTie;
  __host__ __device__ uint32_t operator()(uint32_t i) const {
    const uint32_t k = key(i);
    return k >= keyTie && k < keyAll ? 1u : 0u;
  }
};
struct Selected {
  KeyOf key;
  Rule rule;
  const uint32_t* ranks;
  __host__ __device__ bool operator()(uint32_t i) const {
    const uint32_t k = key(i);
    if (k >= rule.keyAll) return true;
    return rule.hasTie && k >= rule.keyTie && ranks[i] < rule.quota;
  }
};

__global__ void gatherKernel(float* r, const uint32_t* idx, size_t count, float* values) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t j = blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x; j < count; j += stride) {
    const uint32_t i = idx[j];
    values[j] = r[i];
    r[i] = 0.0f;
  }
}

__global__ void takeAllKernel(float* r, size_t n, float* values, uint32_t* indices) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t i = blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x; i < n; i += stride) {
    values[i] = r[i];
    indices[i] = static_cast<uint32_t>(i);
    r[i] = 0.0f;
  }
}

__global__ void sampleKernel(const float* r, size_t start, size_t stride, size_t count,
                             uint32_t* keys) {
  const size_t step = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t j = blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x; j < count; j += step)
    keys[j] = magnitudeKey(r[start + j * stride]);
}

// One thread per run of equal indices (after the stable sort): sums the run
// in rank order from +0.0f, exactly like the CPU loop, so no atomics.
__global__ void sumRunsKernel(const uint32_t* idx, const float* vals, size_t total, size_t n,
                              float scale, float* out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t j = blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x; j < total; j += stride) {
    const uint32_t i = idx[j];
    if (i >= n || (j > 0 && idx[j - 1] == i)) continue;
    float s = 0.0f;
    for (size_t m = j; m < total && idx[m] == i; ++m) s += vals[m];
    out[i] = s * scale;
  }
}

using Count = thrust::counting_iterator<uint32_t>;

}  // namespace

size_t statsPartials(size_t n) { return std::max<size_t>(1, std::min(kMaxStatsBlocks, (n + kThreads - 1) / kThreads)); }

int compressTempBytes(size_t n, size_t sampleCapacity, size_t* bytes) {
  const auto items = static_cast<int64_t>(std::max<size_t>(n, 1));
  size_t best = 0, b = 0;
  cudaError_t e;
  auto keep = [&](cudaError_t err) {
    if (err == cudaSuccess) best = std::max(best, b);
    return err;
  };
  DeviceStats* st = nullptr;
  if ((e = keep(cub::DeviceReduce::Reduce(nullptr, b, st, st, static_cast<int>(statsPartials(n)),
                                          StatsOp{}, DeviceStats{0, 0, 0, 0.0f, 0, 0}))))
    return e;
  unsigned* hist = nullptr;
  auto magBins = thrust::make_transform_iterator(Count(0), MagnitudeBin{nullptr, Window{}});
  auto rndBins = thrust::make_transform_iterator(Count(0), RandomBin{0, Window{}});
  if ((e = keep(cub::DeviceHistogram::HistogramEven(nullptr, b, magBins, hist, kHistBins + 2, 0,
                                                    static_cast<int>(kHistBins + 1), items))))
    return e;
  if ((e = keep(cub::DeviceHistogram::HistogramEven(nullptr, b, rndBins, hist, kHistBins + 2, 0,
                                                    static_cast<int>(kHistBins + 1), items))))
    return e;
  auto ties = thrust::make_transform_iterator(Count(0), IsTie{KeyOf{nullptr, 0, 0}, 0, 0});
  uint32_t* u = nullptr;
  if ((e = keep(cub::DeviceScan::ExclusiveSum(nullptr, b, ties, u, items)))) return e;
  if ((e = keep(cub::DeviceSelect::If(nullptr, b, Count(0), u, u, items,
                                      Selected{KeyOf{nullptr, 0, 0}, Rule{}, nullptr}))))
    return e;
  if ((e = keep(cub::DeviceRadixSort::SortKeysDescending(
           nullptr, b, u, u, static_cast<int64_t>(std::max<size_t>(sampleCapacity, 1))))))
    return e;
  *bytes = best;
  return 0;
}

int accumulateStats(const void* d_x, mgs_dtype_t dtype, float* d_r, size_t n,
                    DeviceStats* d_partials, DeviceStats* d_stats, void* d_temp, size_t tempBytes,
                    void* stream) {
  const auto s = asStream(stream);
  const unsigned grid = static_cast<unsigned>(statsPartials(n));
  switch (dtype) {
    case MGS_FLOAT32:
      accumulateStatsKernel<<<grid, kThreads, 0, s>>>(static_cast<const float*>(d_x), d_r, n, d_partials);
      break;
    case MGS_FLOAT16:
      accumulateStatsKernel<<<grid, kThreads, 0, s>>>(static_cast<const __half*>(d_x), d_r, n, d_partials);
      break;
    case MGS_BFLOAT16:
      accumulateStatsKernel<<<grid, kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(d_x), d_r, n,
                                                       d_partials);
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  if (cudaError_t e = cudaGetLastError()) return e;
  return cub::DeviceReduce::Reduce(d_temp, tempBytes, d_partials, d_stats, static_cast<int>(grid),
                                   StatsOp{}, DeviceStats{0, 0, 0, 0.0f, 0, 0}, s);
}

int zeroNonFinite(float* d_r, size_t n, void* stream) {
  zeroNonFiniteKernel<<<gridFor(n), kThreads, 0, asStream(stream)>>>(d_r, n);
  return cudaGetLastError();
}

int histogram(Keys keys, const float* d_r, uint64_t seed, size_t n, uint32_t lo, uint32_t shift,
              unsigned* d_hist, void* d_temp, size_t tempBytes, void* stream) {
  const Window w{lo, shift};
  const auto items = static_cast<int64_t>(n);
  const int levels = kHistBins + 2, upper = kHistBins + 1;
  if (keys == Keys::kMagnitude) {
    auto bins = thrust::make_transform_iterator(Count(0), MagnitudeBin{d_r, w});
    return cub::DeviceHistogram::HistogramEven(d_temp, tempBytes, bins, d_hist, levels, 0, upper,
                                               items, asStream(stream));
  }
  auto bins = thrust::make_transform_iterator(Count(0), RandomBin{seed, w});
  return cub::DeviceHistogram::HistogramEven(d_temp, tempBytes, bins, d_hist, levels, 0, upper,
                                             items, asStream(stream));
}

int compact(Keys keys, float* d_r, uint64_t seed, size_t n, Rule rule, size_t count,
            uint32_t* d_ranks, uint32_t* d_numSelected, float* d_values, uint32_t* d_indices,
            void* d_temp, size_t tempBytes, void* stream) {
  if (count == 0) return 0;
  const auto s = asStream(stream);
  const auto items = static_cast<int64_t>(n);
  const KeyOf key{d_r, seed, keys == Keys::kRandom ? 1 : 0};
  if (rule.hasTie) {
    // Rank of every tie among the ties before it: the first `quota` are taken.
    auto ties = thrust::make_transform_iterator(Count(0), IsTie{key, rule.keyAll, rule.keyTie});
    if (cudaError_t e = cub::DeviceScan::ExclusiveSum(d_temp, tempBytes, ties, d_ranks, items, s))
      return e;
  }
  if (cudaError_t e = cub::DeviceSelect::If(d_temp, tempBytes, Count(0), d_indices, d_numSelected,
                                            items, Selected{key, rule, d_ranks}, s))
    return e;
  gatherKernel<<<gridFor(count), kThreads, 0, s>>>(d_r, d_indices, count, d_values);
  return cudaGetLastError();
}

int takeAll(float* d_r, size_t n, float* d_values, uint32_t* d_indices, void* stream) {
  takeAllKernel<<<gridFor(n), kThreads, 0, asStream(stream)>>>(d_r, n, d_values, d_indices);
  return cudaGetLastError();
}

int sampleKeysDescending(const float* d_r, size_t start, size_t stride, size_t count,
                         uint32_t* d_keys, uint32_t* d_sorted, void* d_temp, size_t tempBytes,
                         void* stream) {
  const auto s = asStream(stream);
  sampleKernel<<<gridFor(count), kThreads, 0, s>>>(d_r, start, stride, count, d_keys);
  if (cudaError_t e = cudaGetLastError()) return e;
  return cub::DeviceRadixSort::SortKeysDescending(d_temp, tempBytes, d_keys, d_sorted,
                                                  static_cast<int64_t>(count), 0, 32, s);
}

int scatterAddTempBytes(size_t total, size_t* bytes) {
  uint32_t* u = nullptr;
  float* f = nullptr;
  size_t b = 0;
  cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, b, u, u, f, f,
                                                  static_cast<int64_t>(std::max<size_t>(total, 1)));
  *bytes = b;
  return e;
}

int scatterAdd(const float* d_values, const uint32_t* d_indices, size_t total, size_t n,
               float scale, float* d_out, void* d_work, void* d_temp, size_t tempBytes,
               void* stream) {
  const auto s = asStream(stream);
  if (n == 0) return 0;
  if (cudaError_t e = cudaMemsetAsync(d_out, 0, n * sizeof(float), s)) return e;
  if (total == 0) return 0;
  auto* idx = static_cast<uint32_t*>(d_work);
  auto* vals = reinterpret_cast<float*>(idx + total);
  // Stable: equal indices keep their concatenation (= rank) order.
  if (cudaError_t e = cub::DeviceRadixSort::SortPairs(d_temp, tempBytes, d_indices, idx, d_values,
                                                      vals, static_cast<int64_t>(total), 0, 32, s))
    return e;
  sumRunsKernel<<<gridFor(total), kThreads, 0, s>>>(idx, vals, total, n, scale, d_out);
  return cudaGetLastError();
}

}  // namespace mgs::cuda::kernels
