// Which CUDA buckets stay on the device (routed_local_stage.h "Device
// buckets"): agreed once per job on every rank, in one small allreduce each.
// The device bucket's exchange itself is exchange_device.cc.
#include "common/check.h"
#include "common/logging.h"
#include "core/sparse_pipeline.h"

namespace mgs {

bool SparsePipeline::residentEverywhere(const std::vector<Request>& members, size_t n) {
  if (resident_everywhere_ < 0) {
    // Once, at the first CUDA bucket (negotiated: every rank is here).
    LocalJob probe;
    probe.members = &members;
    probe.n = n;
    int32_t mine = local_->prepareResident(probe) ? 1 : 0;
    const Status st = comm_.allreduce(&mine, 1, MGS_INT32, CommOp::kMin);
    resident_everywhere_ = st.ok() && mine == 1 ? 1 : 0;
    if (!st.ok())
      MGS_LOG_WARN("rank {}: agreeing on GPU selection failed ({}); the cost model picks the exchange of CUDA buckets",
                   comm_.rank(), st.message());
  }
  return resident_everywhere_ == 1;
}

bool SparsePipeline::deviceBucket(const std::vector<Request>& members, const LocalJob& job) {
  if (!device_comm_ || device_buckets_ == 0) return false;
  // on_cuda is negotiated: every rank takes the same branch here.
  for (const auto& m : members)
    if (!m.sig.on_cuda) return false;
  // Under auto this creates the NCCL communicator (collective, the same
  // verdict on every rank).
  device::DeviceComm* dc = device_comm_();
  if (dc == nullptr || !dc->comm) return false;
  if (device_buckets_ < 0) {
    // Once: every rank must be able to run device buckets, or none does
    // (a rank without a device stage could not take part in the device
    // exchange). The same verdict everywhere, from one allreduce.
    device_hint_ = dc->device;
    int32_t mine = local_->prepareDevice(job) ? 1 : 0;
    const Status st = comm_.allreduce(&mine, 1, MGS_INT32, CommOp::kMin);
    device_buckets_ = st.ok() && mine == 1 ? 1 : 0;
    if (!st.ok())
      MGS_LOG_WARN("rank {}: agreeing on device buckets failed ({}); sparse buckets of CUDA tensors go through MPI",
                   comm_.rank(), st.message());
    else if (device_buckets_ == 0)
      MGS_LOG_WARN(
          "rank {}: some rank has no device local stage for the NCCL exchange; sparse buckets of CUDA tensors are "
          "exchanged through MPI with host copies of their blocks",
          comm_.rank());
    else
      MGS_LOG_DEBUG("rank {}: sparse buckets of CUDA tensors run as device buckets (NCCL allgather, no host sync)",
                    comm_.rank());
  }
  return device_buckets_ == 1;
}

}  // namespace mgs
