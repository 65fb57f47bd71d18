// Host-side helpers for CUDA tensors. In a build without CUDA every function
// returns kUnsupported, and enqueue rejects CUDA tensors before they get here.
// With MGS_BACKEND=mpi (or no NCCL) CUDA tensors are staged through host
// memory for MPI; with NCCL (core/device_backend.h) dense collectives run on
// device pointers on the NCCL stream. Implemented by cuda/device_cuda.cc
// (ran on an H100) or src/core/device_none.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "common/status.h"
#include "core/local_stage.h"
#include "core/routed_local_stage.h"
#include "core/request.h"

namespace mgs::device {

bool builtWithCuda();
bool builtWithNccl();
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
// The local stage on CUDA device `device` (core/local_stage.h has the
// contract; core/routed_local_stage.h how buckets reach it): slabs and
// residuals in device memory, the GPU selector, only the compact block
// copied to the host. An error (and *out untouched) where none can exist:
// then the pipeline stages CUDA inputs through the host stage.
Status createLocalStage(const LocalStageOptions& options, int device, std::unique_ptr<ResidentLocalStage>* out);

// ---- Device-stream steps (NCCL path): enqueue only, no host sync ------------
// An NCCL communicator over `bootstrap` (collective over it; every rank gets
// the same verdict). timeoutSeconds <= 0: no deadline.
struct DeviceComm {
  std::unique_ptr<Communicator> comm;
  void* stream = nullptr;  // cudaStream_t of its collectives
  int device = -1;
};
Status createNcclComm(Communicator& bootstrap, double timeoutSeconds, DeviceComm* out);
// `stream` waits for the framework's ready event (cudaStreamWaitEvent; without
// an event, for what t.stream has enqueued so far).
Status streamWaitReady(const TensorDesc& t, void* stream);
Status copyDeviceAsync(const TensorDesc& dst, const TensorDesc& src, void* stream);
Status scaleAsync(const TensorDesc& t, double factor, void* stream);
// The one host wait of the NCCL path: the outputs are final when an op
// completes (counted in cuda::hostSyncs).
Status syncStream(void* stream);

}  // namespace mgs::device
