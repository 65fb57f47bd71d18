// The device's memory and streams, for CUDA tensors: what every layer above
// the kernels may use to wait for, copy and scale a tensor, without any of
// the runtime's own types. Below the host local stage (core/cpu_local_stage.h
// stages CUDA inputs with it) and the device local stage (src/device/cuda/); the
// runtime's device interface (core/device.h) adds what needs the runtime.
// Implemented by src/device/cuda/device_memory_cuda.cc (the CUDA runtime; ran on an
// H100) or src/core/device_memory_none.cc (every function refuses CUDA
// tensors); the top-level CMakeLists.txt picks one (MGS_DEVICE_MEMORY_IMPL).
// deviceZeros has never run on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "core/request.h"

namespace mgs::device {

bool builtWithCuda();
// Times runtime code blocked the host on a GPU (stream or event syncs,
// blocking copies), process-wide; 0 without CUDA.
uint64_t hostSyncs();
// CUDA devices visible to this process (0 without CUDA, a driver or a device).
int visibleDevices();
// kUnsupported / kCuda with a clear message if `t` cannot be served here.
Status checkUsable(const TensorDesc& t);
// Block until the framework's ready event (or its stream) has passed.
Status waitReady(const TensorDesc& t);
Status copyToHost(void* dst, const TensorDesc& src, size_t bytes);
Status copyFromHost(const TensorDesc& dst, const void* src, size_t bytes);
// Scale `t` in place on the GPU and wait for it.
Status scale(const TensorDesc& t, double factor);
// `bytes` of zeros in memory of CUDA device `device`, freed when *out's
// last copy goes (a joined rank's part of a CUDA allreduce it serves).
Status deviceZeros(int device, size_t bytes, std::shared_ptr<void>* out);

// ---- Device-stream steps (NCCL path): enqueue only, no host sync ------------
// `stream` waits for the framework's ready event (cudaStreamWaitEvent; without
// an event, for what t.stream has enqueued so far).
Status streamWaitReady(const TensorDesc& t, void* stream);
Status copyDeviceAsync(const TensorDesc& dst, const TensorDesc& src, void* stream);
Status scaleAsync(const TensorDesc& t, double factor, void* stream);
// The one host wait of the NCCL path: the outputs are final when an op
// completes (counted in hostSyncs).
Status syncStream(void* stream);

}  // namespace mgs::device
