// MGS_BACKEND at init (core/device_backend.h). The NCCL path it enables has
// Ran on an H100 (python.backend_nccl.np1/np2); the decision logic below is tested on the CPU
// (tests/unit/core/device_backend_test.cc).
#include "core/device_backend.h"

#include "common/check.h"
#include "common/logging.h"

namespace mgs {

int32_t localBackendWord(bool builtWithCuda, bool builtWithNccl, int visibleDevices) {
  return (builtWithCuda ? kBackendBuiltCuda : 0) | (builtWithNccl ? kBackendBuiltNccl : 0) |
         (visibleDevices > 0 ? kBackendHasDevice : 0);
}

bool backendNeedsAgreement(const std::string& requested, bool builtWithNccl) {
  return requested == "nccl" || (requested == "auto" && builtWithNccl);
}

Status agreeBackend(const std::string& requested, const std::vector<int32_t>& words, int me, BackendMode* out) {
  if (requested == "mpi") {
    *out = BackendMode::kMpi;
    return Status::OK();
  }
  MGS_ENSURE(requested == "auto" || requested == "nccl", kConfig,
             "MGS_BACKEND='" << requested << "' is not one of auto, mpi, nccl");
  bool all = !words.empty();
  std::string why;
  for (size_t r = 0; r < words.size(); ++r) {
    const int32_t w = words[r];
    std::string cause;
    if (!(w & kBackendBuiltCuda))
      cause = "its mgs library was built without CUDA, so without NCCL";
    else if (!(w & kBackendBuiltNccl))
      cause = "its mgs library was built without NCCL (nccl.h/libnccl not found at build time, or MGS_WITH_NCCL=OFF)";
    else if (!(w & kBackendHasDevice))
      cause = "no CUDA device is visible there (CUDA_VISIBLE_DEVICES, driver, or a host without a GPU)";
    if (cause.empty()) continue;
    all = false;
    why += std::string(why.empty() ? "" : "; ") + "rank " + std::to_string(r) +
           (static_cast<int>(r) == me ? " (this rank)" : "") + ": " + cause;
  }
  if (requested == "auto") {
    *out = all ? BackendMode::kNcclLazy : BackendMode::kMpi;
    return Status::OK();
  }
  MGS_ENSURE(all, kUnsupported,
             "MGS_BACKEND=nccl cannot run: " << why
                                             << ". Use MGS_BACKEND=mpi (CUDA tensors staged through host "
                                                "memory) or auto");
  *out = BackendMode::kNcclAtInit;
  return Status::OK();
}

Status DeviceBackend::init(Communicator& comm, const Config& config, std::unique_ptr<DeviceBackend>* out,
                           const device::DeviceCommFactory& make) {
  // A stalled NCCL collective aborts with the stall limit; without one, after 10 minutes.
  std::unique_ptr<DeviceBackend> b(new DeviceBackend(comm, config.stall_abort_s > 0 ? config.stall_abort_s : 600));
  if (make && config.backend != "mpi") {
    // A test's device communicator stands for NCCL (every rank is given one).
    b->mode_ = BackendMode::kNcclAtInit;
    Status st = make(comm, &b->dc_);
    if (!st.ok()) return Status(st.code(), "creating the device communicator failed: " + st.message());
    *out = std::move(b);
    return Status::OK();
  }
  const bool nccl = device::builtWithNccl();
  if (!backendNeedsAgreement(config.backend, nccl)) {
    b->mode_ = BackendMode::kMpi;
    MGS_RETURN_IF_ERROR(agreeBackend(config.backend, {}, comm.rank(), &b->mode_));  // validates the name
    *out = std::move(b);
    return Status::OK();
  }
  // Every rank's facts, so that every rank takes the same decision (and
  // none enters NCCL's set-up while another has already failed).
  const int32_t mine = localBackendWord(device::builtWithCuda(), nccl, device::visibleDevices());
  std::vector<int32_t> words(static_cast<size_t>(comm.size()));
  MGS_RETURN_IF_ERROR(comm.allgather(&mine, sizeof mine, words.data()));
  MGS_RETURN_IF_ERROR(agreeBackend(config.backend, words, comm.rank(), &b->mode_));
  if (b->mode_ == BackendMode::kNcclAtInit) {
    Status st = device::createNcclComm(comm, b->timeout_, &b->dc_);
    if (!st.ok()) return Status(st.code(), "MGS_BACKEND=nccl: creating the NCCL communicator failed: " + st.message());
  }
  *out = std::move(b);
  return Status::OK();
}

device::DeviceComm* DeviceBackend::forCuda() {
  if (mode_ == BackendMode::kNcclLazy && !dc_.comm) {
    // Collective: every rank reaches its first CUDA collective at the same op.
    Status st = device::createNcclComm(bootstrap_, timeout_, &dc_);
    if (!st.ok()) {
      // NcclCommunicator::create gives every rank the same verdict, so all fall back together.
      MGS_LOG_WARN("MGS_BACKEND=auto: NCCL could not be set up ({}); CUDA tensors go through MPI with host staging",
                   st.message());
      dc_ = device::DeviceComm();
      mode_ = BackendMode::kMpi;
    }
  }
  return mode_ == BackendMode::kMpi ? nullptr : &dc_;
}

}  // namespace mgs
