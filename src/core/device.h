// The runtime's device interface: the device's memory and streams
// (core/device_memory.h), plus what needs the runtime's types: the device
// local stage and the NCCL communicator. In a build without CUDA every
// function returns kUnsupported, and enqueue rejects CUDA tensors before they
// get here. With MGS_BACKEND=mpi (or no NCCL) CUDA tensors are staged through
// host memory for MPI; with NCCL (core/device_backend.h) dense collectives run
// on device pointers on the NCCL stream. Implemented by src/device/cuda/device_cuda.cc
// (ran on an H100) or src/core/device_none.cc (MGS_DEVICE_IMPL).
#pragma once

#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "common/status.h"
#include "core/device_memory.h"
#include "core/local_stage.h"
#include "core/routed_local_stage.h"

namespace mgs::device {

bool builtWithNccl();
// NCCL's version code at build time (NCCL_VERSION_CODE, e.g. 21803 for
// 2.18.3), 0 without NCCL.
int ncclVersion();
// The local stage on CUDA device `device` (core/local_stage.h has the
// contract; core/routed_local_stage.h how buckets reach it): slabs and
// residuals in device memory, the GPU selector, only the compact block
// copied to the host. An error (and *out untouched) where none can exist:
// then the pipeline stages CUDA inputs through the host stage.
Status createLocalStage(const LocalStageOptions& options, int device, std::unique_ptr<ResidentLocalStage>* out);

// An NCCL communicator over `bootstrap` (collective over it; every rank gets
// the same verdict). timeoutSeconds <= 0: no deadline.
struct DeviceComm {
  std::unique_ptr<Communicator> comm;
  void* stream = nullptr;  // cudaStream_t of its collectives
  int device = -1;
  // The hierarchical exchange's device communicators, split from `comm` at
  // its first device bucket (exchange_device.cc): this rank's node, and the
  // nodes' leaders (null on the other ranks). split_tried: the split ran
  // (every rank alike); node null afterwards: it failed, and hierarchical
  // buckets go by the local stage's route.
  std::unique_ptr<Communicator> node, leaders;
  bool split_tried = false;
};
Status createNcclComm(Communicator& bootstrap, double timeoutSeconds, DeviceComm* out);
// Makes the device communicator in place of NCCL (collective over
// `bootstrap`; the same verdict on every rank). For tests that run several
// ranks on one GPU (comm/cuda_thread); the runtime uses NCCL otherwise.
using DeviceCommFactory = std::function<Status(Communicator& bootstrap, DeviceComm* out)>;

}  // namespace mgs::device
