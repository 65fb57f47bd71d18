// The device's memory and streams (core/device_memory.h) with the CUDA
// runtime: CUDA tensors are waited for, staged through host memory and
// scaled on the GPU (runtime_kernels.cu); every blocking wait goes through
// host_sync.h, which counts it. Ran on an H100 (2026-11-26) inside the
// end-to-end runs (python.backend_nccl.np1, python.cuda_sparse.*).
#include <cuda_runtime.h>

#include "core/device_memory.h"
#include "common/cuda_check.h"
#include "host_sync.h"
#include "runtime_kernels.h"

namespace mgs::device {

bool builtWithCuda() { return true; }
uint64_t hostSyncs() { return cuda::hostSyncs(); }
int visibleDevices() { return cuda::deviceCount(); }

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

// Never ran on a GPU (no test machine had one when it was written).
Status deviceZeros(int device, size_t bytes, std::shared_ptr<void>* out) {
  MGS_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  MGS_CUDA_CHECK(cudaMalloc(&p, bytes > 0 ? bytes : 1));
  std::shared_ptr<void> owned(p, [device](void* q) {
    cudaSetDevice(device);
    cudaFree(q);
  });
  MGS_CUDA_CHECK(cudaMemset(p, 0, bytes));
  *out = std::move(owned);
  return Status::OK();
}

Status streamWaitReady(const TensorDesc& t, void* stream) {
  MGS_CUDA_CHECK(cudaSetDevice(t.device));
  const auto s = static_cast<cudaStream_t>(stream);
  if (t.ready_event) {
    MGS_CUDA_CHECK(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(t.ready_event), 0));
    return Status::OK();
  }
  // No event: order after what the framework's stream holds now. A
  // temporary event (destroying it after the wait was enqueued is allowed).
  cudaEvent_t ev = nullptr;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t e = cudaEventRecord(ev, static_cast<cudaStream_t>(t.stream));
  if (e == cudaSuccess) e = cudaStreamWaitEvent(s, ev, 0);
  (void)cudaEventDestroy(ev);
  MGS_CUDA_CHECK(e);
  return Status::OK();
}

Status copyDeviceAsync(const TensorDesc& dst, const TensorDesc& src, void* stream) {
  if (dst.data == src.data || src.bytes() == 0) return Status::OK();
  MGS_ENSURE(dst.bytes() == src.bytes(), kInvalidArgument,
             "device copy of " << src.bytes() << " bytes into " << dst.bytes());
  MGS_CUDA_CHECK(
      cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
  return Status::OK();
}

Status scaleAsync(const TensorDesc& t, double factor, void* stream) {
  if (factor == 1.0 || t.numel() == 0) return Status::OK();
  MGS_CUDA_CHECK(static_cast<cudaError_t>(cuda::scaleAsync(t.data, t.dtype, t.numel(), factor, stream)));
  return Status::OK();
}

Status syncStream(void* stream) { return cuda::syncStream(stream); }

}  // namespace mgs::device
