#include "runtime_kernels.h"

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace mgs::cuda {
namespace {

template <typename T>
struct ScaleOp {
  __device__ static T apply(T x, double f) { return static_cast<T>(static_cast<double>(x) * f); }
};
template <>
struct ScaleOp<float> {
  __device__ static float apply(float x, double f) { return x * static_cast<float>(f); }
};
template <>
struct ScaleOp<__half> {
  __device__ static __half apply(__half x, double f) {
    return __float2half_rn(__half2float(x) * static_cast<float>(f));
  }
};
template <>
struct ScaleOp<__nv_bfloat16> {
  __device__ static __nv_bfloat16 apply(__nv_bfloat16 x, double f) {
    return __float2bfloat16_rn(__bfloat162float(x) * static_cast<float>(f));
  }
};
template <typename T>
struct TruncOp {
  __device__ static T apply(T x, double f) { return static_cast<T>(trunc(static_cast<double>(x) * f)); }
};

template <typename T, typename Op>
__global__ void scaleKernel(T* __restrict__ x, size_t n, double factor) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    x[i] = Op::apply(x[i], factor);
}

template <typename T, typename Op>
int launch(void* d, size_t n, double factor, cudaStream_t s) {
  constexpr int kThreads = 256;
  const size_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
  scaleKernel<T, Op><<<grid, kThreads, 0, s>>>(static_cast<T*>(d), n, factor);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int scaleAsync(void* d_data, mgs_dtype_t dtype, size_t n, double factor, void* stream) {
  if (n == 0 || factor == 1.0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case MGS_FLOAT32:
      return launch<float, ScaleOp<float>>(d_data, n, factor, s);
    case MGS_FLOAT64:
      return launch<double, ScaleOp<double>>(d_data, n, factor, s);
    case MGS_FLOAT16:
      return launch<__half, ScaleOp<__half>>(d_data, n, factor, s);
    case MGS_BFLOAT16:
      return launch<__nv_bfloat16, ScaleOp<__nv_bfloat16>>(d_data, n, factor, s);
    case MGS_INT32:
      return launch<int32_t, TruncOp<int32_t>>(d_data, n, factor, s);
    case MGS_INT64:
      return launch<int64_t, TruncOp<int64_t>>(d_data, n, factor, s);
    case MGS_UINT8:
      return launch<uint8_t, TruncOp<uint8_t>>(d_data, n, factor, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace mgs::cuda
