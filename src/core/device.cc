#include "core/device.h"

#include <string>

#include "common/check.h"

#ifdef MGS_HAVE_CUDA
#include <cuda_runtime.h>

#include "runtime_kernels.h"
#endif

namespace mgs::device {

#ifdef MGS_HAVE_CUDA

#define MGS_CUDA_CHECK(call)                                                                     \
  do {                                                                                           \
    const cudaError_t _mgs_e = (call);                                                           \
    if (_mgs_e != cudaSuccess)                                                                   \
      return Status(Code::kCuda, std::string(#call) + " failed: " + cudaGetErrorString(_mgs_e) + \
                                     detail::where(__FILE__, __LINE__));                         \
  } while (0)

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
    MGS_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(t.ready_event)));
  } else {
    MGS_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(t.stream)));
  }
  return Status::OK();
}

Status copyToHost(void* dst, const TensorDesc& src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  MGS_CUDA_CHECK(cudaSetDevice(src.device));
  MGS_CUDA_CHECK(cudaMemcpy(dst, src.data, bytes, cudaMemcpyDeviceToHost));
  return Status::OK();
}

Status copyFromHost(const TensorDesc& dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  MGS_CUDA_CHECK(cudaSetDevice(dst.device));
  MGS_CUDA_CHECK(cudaMemcpy(dst.data, src, bytes, cudaMemcpyHostToDevice));
  return Status::OK();
}

Status scale(const TensorDesc& t, double factor) {
  if (factor == 1.0 || t.numel() == 0) return Status::OK();
  MGS_CUDA_CHECK(cudaSetDevice(t.device));
  // The default (legacy) stream orders this after the blocking copies above.
  MGS_CUDA_CHECK(static_cast<cudaError_t>(cuda::scaleAsync(t.data, t.dtype, t.numel(), factor, nullptr)));
  MGS_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return Status::OK();
}

#else  // !MGS_HAVE_CUDA

namespace {
Status noCuda() {
  return Status(Code::kUnsupported, "this mgs library was built without CUDA (MGS_WITH_CUDA=OFF or no nvcc)");
}
}  // namespace

bool builtWithCuda() { return false; }
Status checkUsable(const TensorDesc& t) { return t.onCuda() ? noCuda() : Status::OK(); }
Status waitReady(const TensorDesc& t) { return t.onCuda() ? noCuda() : Status::OK(); }
Status copyToHost(void*, const TensorDesc&, size_t) { return noCuda(); }
Status copyFromHost(const TensorDesc&, const void*, size_t) { return noCuda(); }
Status scale(const TensorDesc&, double) { return noCuda(); }

#endif

}  // namespace mgs::device
