// The device interface that src/core names (core/device.h), implemented with
// the CUDA runtime: CUDA tensors are waited for, staged through host memory
// and scaled on the GPU (runtime_kernels.cu). src/core includes nothing from
// cuda/; the top-level CMakeLists.txt links this file's library into the core
// when CUDA is on (MGS_DEVICE_IMPL), src/core/device_none.cc otherwise.
#include <cuda_runtime.h>

#include "core/device.h"
#include "cuda_check.h"
#include "host_sync.h"
#include "runtime_kernels.h"

namespace mgs::device {

bool builtWithCuda() { return true; }

Status checkUsable(const TensorDesc& t) {
  if (!t.onCuda()) return Status::OK();
  const int n = cuda::deviceCount();
  MGS_ENSURE(t.device >= 0 && t.device < n, kCuda,
             "CUDA device " << t.device << " is not visible (" << n << " CUDA devices)");
  return Status::OK();
}

Status waitReady(const TensorDesc& t) {
  if (!t.onCuda()) return Status::OK();
  MGS_CUDA_CHECK(cudaSetDevice(t.device));
  if (t.ready_event) {
    MGS_RETURN_IF_ERROR(cuda::syncEvent(t.ready_event));
  } else {
    MGS_RETURN_IF_ERROR(cuda::syncStream(t.stream));
  }
  return Status::OK();
}

Status copyToHost(void* dst, const TensorDesc& src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  MGS_CUDA_CHECK(cudaSetDevice(src.device));
  MGS_RETURN_IF_ERROR(cuda::copyToHostBlocking(dst, src.data, bytes));
  return Status::OK();
}

Status copyFromHost(const TensorDesc& dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  MGS_CUDA_CHECK(cudaSetDevice(dst.device));
  MGS_RETURN_IF_ERROR(cuda::copyToDeviceBlocking(dst.data, src, bytes));
  return Status::OK();
}

Status scale(const TensorDesc& t, double factor) {
  if (factor == 1.0 || t.numel() == 0) return Status::OK();
  MGS_CUDA_CHECK(cudaSetDevice(t.device));
  // The default (legacy) stream orders this after the blocking copies above.
  MGS_CUDA_CHECK(static_cast<cudaError_t>(cuda::scaleAsync(t.data, t.dtype, t.numel(), factor, nullptr)));
  MGS_RETURN_IF_ERROR(cuda::syncStream(nullptr));
  return Status::OK();
}

}  // namespace mgs::device
