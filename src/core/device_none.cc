// The runtime's device interface (core/device.h) in a build without CUDA:
// no device local stage, no NCCL. With CUDA, src/device/cuda/device_cuda.cc implements
// the same functions and the top-level CMakeLists.txt links that one instead
// (MGS_DEVICE_IMPL).
#include "core/device.h"

namespace mgs::device {

namespace {
Status noCuda() {
  return Status(Code::kUnsupported, "this mgs library was built without CUDA (MGS_WITH_CUDA=OFF or no nvcc)");
}
}  // namespace

bool builtWithNccl() { return false; }
int ncclVersion() { return 0; }
Status createLocalStage(const LocalStageOptions&, int, std::unique_ptr<ResidentLocalStage>*) { return noCuda(); }
Status createNcclComm(Communicator&, double, DeviceComm*) { return noCuda(); }

}  // namespace mgs::device
