// The device's memory and streams (core/device_memory.h) in a build without
// CUDA: CUDA tensors are refused with a clear message (enqueue checks them
// before they get further).
#include "core/device_memory.h"

namespace mgs::device {

namespace {
Status noCuda() {
  return Status(Code::kUnsupported, "this mgs library was built without CUDA (MGS_WITH_CUDA=OFF or no nvcc)");
}
}  // namespace

bool builtWithCuda() { return false; }
uint64_t hostSyncs() { return 0; }
int visibleDevices() { return 0; }
Status checkUsable(const TensorDesc& t) { return t.onCuda() ? noCuda() : Status::OK(); }
Status waitReady(const TensorDesc& t) { return t.onCuda() ? noCuda() : Status::OK(); }
Status copyToHost(void*, const TensorDesc&, size_t) { return noCuda(); }
Status copyFromHost(const TensorDesc&, const void*, size_t) { return noCuda(); }
Status scale(const TensorDesc&, double) { return noCuda(); }
Status deviceZeros(int, size_t, std::shared_ptr<void>*) { return noCuda(); }
Status streamWaitReady(const TensorDesc&, void*) { return noCuda(); }
Status copyDeviceAsync(const TensorDesc&, const TensorDesc&, void*) { return noCuda(); }
Status scaleAsync(const TensorDesc&, double, void*) { return noCuda(); }
Status syncStream(void*) { return noCuda(); }

}  // namespace mgs::device
