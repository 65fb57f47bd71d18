// Sparse decompression: CUB's stable radix sort by index, then one thread per
// run of equal indices sums in rank order (bitwise the CPU's scatterAdd).
#include "compress_kernels.h"

#include <algorithm>

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

namespace mgs::cuda::kernels {
namespace {

constexpr int kThreads = 256;

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }
unsigned gridFor(size_t n, size_t cap = 65535) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min(b, cap)));
}

// One thread per run of equal indices (after the stable sort): sums the run
// in rank order from +0.0f, exactly like the CPU loop, so no atomics.
__global__ void sumRunsKernel(const uint32_t* idx, const float* vals, size_t total, size_t n, float scale, float* out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t j = blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x; j < total; j += stride) {
    const uint32_t i = idx[j];
    if (i >= n || (j > 0 && idx[j - 1] == i)) continue;
    float s = 0.0f;
    for (size_t m = j; m < total && idx[m] == i; ++m) s += vals[m];
    out[i] = s * scale;
  }
}

}  // namespace

int scatterAddTempBytes(size_t total, size_t* bytes) {
  uint32_t* u = nullptr;
  float* f = nullptr;
  size_t b = 0;
  cudaError_t e =
      cub::DeviceRadixSort::SortPairs(nullptr, b, u, u, f, f, static_cast<int64_t>(std::max<size_t>(total, 1)));
  *bytes = b;
  return e;
}

int scatterAdd(const float* d_values, const uint32_t* d_indices, size_t total, size_t n, float scale, float* d_out,
               void* d_work, void* d_temp, size_t tempBytes, void* stream) {
  const auto s = asStream(stream);
  if (n == 0) return 0;
  if (cudaError_t e = cudaMemsetAsync(d_out, 0, n * sizeof(float), s)) return e;
  if (total == 0) return 0;
  auto* idx = static_cast<uint32_t*>(d_work);
  auto* vals = reinterpret_cast<float*>(idx + total);
  // Stable: equal indices keep their concatenation (= rank) order.
  if (cudaError_t e = cub::DeviceRadixSort::SortPairs(d_temp, tempBytes, d_indices, idx, d_values, vals,
                                                      static_cast<int64_t>(total), 0, 32, s))
    return e;
  sumRunsKernel<<<gridFor(total), kThreads, 0, s>>>(idx, vals, total, n, scale, d_out);
  return cudaGetLastError();
}

}  // namespace mgs::cuda::kernels
