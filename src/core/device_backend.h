// Which communicator CUDA tensors use (MGS_BACKEND=auto|mpi|nccl), decided
// once at init and the same on every rank:
//   mpi   MPI with host staging (core/device.h copies), as before NCCL;
//   nccl  an NcclCommunicator over the MPI communicator, created at init:
//         dense allreduce and broadcast of CUDA tensors run on device
//         pointers on its stream. A build without NCCL, or a rank without a
//         CUDA device, fails init on every rank naming the ranks and causes;
//   auto  NCCL when every rank has it built in and a device visible, created
//         at the first CUDA collective (all ranks reach it at the same
//         negotiated op); if that creation fails, MPI staging from then on.
// The decision is pure (chooseBackend, agreeBackend) and tested on the CPU;
// the NCCL path ran on an H100 at np 1 only (one GPU).
// Coordinator thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/device.h"

namespace mgs {

enum class BackendMode { kMpi, kNcclAtInit, kNcclLazy };

// This rank's facts, one word per rank in the init agreement.
constexpr int32_t kBackendBuiltCuda = 1, kBackendBuiltNccl = 2, kBackendHasDevice = 4;
int32_t localBackendWord(bool builtWithCuda, bool builtWithNccl, int visibleDevices);
// Whether init needs the agreement (one 4-byte allgather): not for 'mpi', not
// for 'auto' in a build without NCCL.
bool backendNeedsAgreement(const std::string& requested, bool builtWithNccl);
// From every rank's word (rank order): the mode, or kUnsupported for
// 'nccl' naming every rank that cannot run it and why; kConfig for an
// unknown setting. `me` is this rank (its message says "this rank").
Status agreeBackend(const std::string& requested, const std::vector<int32_t>& words, int me, BackendMode* out);

class DeviceBackend {
 public:
  // Collective over `comm` when backendNeedsAgreement(); creates the NCCL
  // communicator for 'nccl'. `comm` must outlive the backend. With `make`
  // (tests: several ranks on one GPU), MGS_BACKEND=nccl or auto takes the
  // device communicator it makes, at init, instead of NCCL.
  static Status init(Communicator& comm, const Config& config, std::unique_ptr<DeviceBackend>* out,
                     const device::DeviceCommFactory& make = nullptr);
  BackendMode mode() const { return mode_; }
  // The NCCL communicator for CUDA tensors, or nullptr (MPI host staging).
  // Under auto the first call creates it: call it at the same negotiated op
  // on every rank (the executor does, for each CUDA collective).
  device::DeviceComm* forCuda();

 private:
  DeviceBackend(Communicator& comm, double timeout) : bootstrap_(comm), timeout_(timeout) {}
  Communicator& bootstrap_;
  double timeout_;
  BackendMode mode_ = BackendMode::kMpi;
  device::DeviceComm dc_;
};

}  // namespace mgs
