// The runtime's device interface (core/device.h) with CUDA: the device local
// stage and the NCCL communicator (the memory and stream helpers are in
// device_memory_cuda.cc, one layer down). src/core includes nothing from
// cuda/; the top-level CMakeLists.txt links this file's library into the core
// when CUDA is on (MGS_DEVICE_IMPL), src/core/device_none.cc otherwise.
#include "core/device.h"
#include "common/check.h"
#include "cuda_local_stage.h"
#ifdef MGS_WITH_NCCL
#include <nccl.h>

#include "comm/nccl/nccl_communicator.h"
#endif

namespace mgs::device {

#ifdef MGS_WITH_NCCL
bool builtWithNccl() { return true; }
int ncclVersion() { return NCCL_VERSION_CODE; }
#else
bool builtWithNccl() { return false; }
int ncclVersion() { return 0; }
#endif

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

}  // namespace mgs::device
