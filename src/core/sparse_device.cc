// The sparse pipeline's device buckets (routed_local_stage.h "Device
// buckets"): a sparse allgather bucket whose members are all CUDA tensors,
// with a device communicator (NCCL), runs as enqueued work only: the local
// stage, the allgather of the fixed-capacity blocks, the verdict over every
// rank's header and the scatter. poll() finishes it once its event has
// passed; the verdict comes from pinned memory the device wrote. The same
// rules as the host allgather (sparse_exchange.cc): a failure code from any
// rank fails the bucket on every rank with the same message (naming the
// rank, and for a staging code the tensor and the cause), the outputs are
// not written, and the residual commits exactly when every rank's selection
// was applied. The CUDA side (cuda/cuda_local_stage.cc) ran on an H100 at np 1
// (gpu/device_bucket, python.cuda_sparse.nccl.np1); this part is tested on the CPU with a stand-in resident stage
// (tests/unit/core/device_bucket_pipeline_test.cc).
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

void SparsePipeline::startDevice(std::vector<Request>& members, size_t n, size_t cap, size_t k, LocalJob& job) {
  device::DeviceComm* dc = device_comm_();
  InFlight f;
  f.device = true;
  f.path = BucketPath::kDevice;
  f.n = n;
  f.k = k;
  f.ex.cap = cap;
  f.ex.started = Clock::now();
  job.block = nullptr;  // the block lives on the device
  DeviceBucketJob dj;
  dj.job = &job;
  dj.comm = dc->comm.get();
  dj.comm_stream = dc->stream;
  dj.comm_device = dc->device;
  dj.factors.resize(members.size());
  for (size_t i = 0; i < members.size(); ++i) dj.factors[i] = scatter_.outputFactor(members[i]);
  dj.propagate = propagateNonFinite();
  const Status st = local_->startBucket(dj, &f.dev);
  if (!st.ok()) {
    // This rank could not enqueue its part of the exchange: it fails here;
    // the peers' device communicator fails them at its deadline.
    f.dev.reset();
    f.dev_done = true;
    f.dev_status = Status(st.code(), "rank " + std::to_string(comm_.rank()) + ": sparse allreduce of " +
                                         bucketName(members) + " on the device: " + st.message());
  }
  f.members = std::move(members);  // after startBucket: job.members pointed here
  inflight_.push_back(std::move(f));
  while (inflight_.size() > kMaxDeviceInFlight) finishOldest();
  poll();
}

bool SparsePipeline::deviceReady(InFlight& f) {
  if (f.dev_done) return true;
  bool done = false;
  const Status st = f.dev->test(&done);
  if (!st.ok()) {
    f.dev_status = st;
    done = true;
  }
  f.dev_done = done;
  return done;
}

void SparsePipeline::finishDevice(InFlight& f) {
  Status st = f.dev_status;
  // Not done yet (drain, or too many in flight): the one wait of this path.
  if (st.ok() && !f.dev_done) st = f.dev->wait();
  DeviceBucketResult r;
  if (st.ok()) st = f.dev->result(&r);
  std::unique_ptr<LocalSlab> slab = f.dev ? f.dev->takeSlab() : nullptr;
  const auto now = Clock::now();
  online_.exchanged(OnlineCost::kAllgather, double(f.ex.blockBytes()) * comm_.size(), f.ex.started, now);
  if (timeline_)
    for (auto& m : f.members)
      timeline_->span(m.name, "DEVICE_BUCKET", f.ex.started, now, "{\"cap\":" + std::to_string(f.ex.cap) + ",\"path\":\"device\"}");
  if (st.ok()) st = deviceVerdict(f, r);
  if (st.ok() && !f.local.ok() && !f.skipped) st = f.local;
  // Before the handles complete, as finishOldest: commit exactly when every
  // rank's selection was applied (the device's verdict, the same everywhere).
  local_->settle(f.members, std::move(slab), f.delivered);
  publishStats();
  for (auto& m : f.members) complete_(m, st);
}

Status SparsePipeline::deviceVerdict(InFlight& f, const DeviceBucketResult& r) {
  const int P = comm_.size();
  const std::vector<Request>& members = f.members;
  const std::string name = bucketName(members);
  stats_.dense_bytes += 4 * f.n;
  f.local = r.local;
  f.count = r.count;
  MGS_ENSURE(r.headers.size() == static_cast<size_t>(P), kInternal,
             "device bucket " << name << ": " << r.headers.size() << " headers for " << P << " ranks");
  if (r.malformed_rank >= 0)
    return Status(Code::kCommunication, "sparse allreduce of " + name + ": rank " + std::to_string(r.malformed_rank) +
                                            " sent a malformed block (torn, a count above the capacity, an index "
                                            "outside the bucket or a non-finite value); nothing was written");
  bool other_error = false;
  const std::string failed = failedRanks(r.headers.data(), f.ex.cap, members, &other_error);
  if (!failed.empty()) {
    MGS_ENSURE(!r.written, kInternal, "device bucket " << name << ": the device wrote the outputs although " << failed);
    if (!other_error && propagateNonFinite()) {
      MGS_ENSURE(r.nan_written, kInternal,
                 "device bucket " << name << ": non-finite values (" << failed << ") but no NaN outputs");
      MGS_LOG_DEBUG("sparse allreduce of {}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", name, failed);
      f.skipped = true;
      return Status::OK();
    }
    return failedVerdict("sparse allreduce of " + name, failed, other_error, f.local);
  }
  MGS_ENSURE(r.written, kInternal,
             "device bucket " << name << ": every header is a count, but the outputs were not written");
  f.delivered = true;
  ++stats_.buckets;
  stats_.selected += f.count;
  stats_.target += f.k;
  stats_.bytes_sent += 8 * f.count;
  countPath(BucketPath::kDevice, 1, 8 * f.count);
  return Status::OK();
}

}  // namespace mgs
