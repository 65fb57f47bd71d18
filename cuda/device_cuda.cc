// The device interface that src/core names (core/device.h), implemented with
// the CUDA runtime: CUDA tensors are waited for, staged through host memory
// and scaled on the GPU (runtime_kernels.cu). src/core includes nothing from
// cuda/; the top-level CMakeLists.txt links this file's library into the core
// when CUDA is on (MGS_DEVICE_IMPL), src/core/device_none.cc otherwise.
#include <cuda_runtime.h>

#include "core/device.h"
#include "common/cuda_check.h"
#include "cuda_local_stage.h"
#include "host_sync.h"
#include "runtime_kernels.h"
#ifdef MGS_WITH_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace mgs::device {

bool builtWithCuda() { return true; }
uint64_t hostSyncs() { return cuda::hostSyncs(); }
int visibleDevices() { return cuda::deviceCount(); }
#ifdef MGS_WITH_NCCL
bool builtWithNccl() { return true; }
#else
bool builtWithNccl() { return false; }
#endif

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

// Ran on an H100 through mgs.torch (python.cuda_sparse.*, python.backend_nccl.np1).
Status createLocalStage(const LocalStageOptions& options, int device, std::unique_ptr<ResidentLocalStage>* out) {
  std::unique_ptr<cuda::CudaLocalStage> s;
  MGS_RETURN_IF_ERROR(cuda::CudaLocalStage::create(options, device, &s));
  *out = std::move(s);
  return Status::OK();
}

// ---- The NCCL path: enqueue on the NCCL stream, no host staging ------------

Status createNcclComm(Communicator& bootstrap, double timeoutSeconds, DeviceComm* out) {
#ifdef MGS_WITH_NCCL
  NcclOptions o;
  o.timeoutSeconds = timeoutSeconds;  // device: local rank % visible devices
  std::unique_ptr<NcclCommunicator> c;
  MGS_RETURN_IF_ERROR(NcclCommunicator::create(&bootstrap, o, &c));
  out->stream = c->stream();
  out->device = c->device();
  out->comm = std::move(c);
  return Status::OK();
#else
  (void)bootstrap;
  (void)timeoutSeconds;
  (void)out;
  return Status(Code::kUnsupported,
                "this mgs library was built with CUDA but without NCCL (nccl.h or libnccl "
                "not found at build time, or -DMGS_WITH_NCCL=OFF)");
#endif
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
