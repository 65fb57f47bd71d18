// A device bucket (routed_local_stage.h "Device buckets"): a sparse
// allgather bucket whose members are all CUDA tensors, with a device
// communicator (NCCL), runs as enqueued work only: the local stage, the
// allgather of the fixed-capacity blocks, the verdict over every rank's
// header and the scatter. The pipeline finishes it once its event has
// passed; the verdict comes from pinned memory the device wrote. The same
// rules as the host allgather (exchange_allgather.cc): a failure code from
// any rank fails the bucket on every rank with the same message (naming the
// rank, and for a staging code the tensor and the cause), the outputs are
// not written, and the residual commits exactly when every rank's selection
// was applied. The CUDA side (src/device/cuda/cuda_local_stage.cc) ran on an H100 at np 1
// (gpu/device_bucket, python.cuda_sparse.nccl.np1); this part is tested on
// the CPU with a stand-in resident stage (tests/unit/core/device_bucket_test.cc).
#include <algorithm>

#include "common/check.h"
#include "common/logging.h"
#include "core/bucket_exchange.h"

namespace mgs {
namespace {

// Device buckets in flight at most before the oldest is waited for (a host
// sync): high enough that a step's buckets never wait in steady state;
// each holds its acc slab in device memory until it finishes.
constexpr size_t kMaxDeviceInFlight = 64;

// The local stage's job, as the host allgather's but with the block on the device.
LocalJob deviceJob(ExchangeContext& ctx, const std::vector<Request>& members, const BucketStart& b, size_t* cap) {
  const compress::Selector& sel = ctx.selector(b.density);
  *cap = std::max<size_t>(sel.maxCount(b.n), 1);
  LocalJob job;
  job.members = &members;
  job.n = b.n;
  job.select = true;
  job.selector = &sel;
  job.cap = *cap;
  job.step = ctx.step();
  job.name = b.name.c_str();
  return job;
}

class DeviceExchange : public BucketExchange {
 public:
  DeviceExchange(ExchangeContext& ctx, BucketStart& b) : BucketExchange(std::move(b.members)), ctx_(ctx), n_(b.n) {}

  void start(BucketStart& b) {
    device::DeviceComm* dc = ctx_.device_comm();
    LocalJob job = deviceJob(ctx_, members_, b, &cap_);
    k_ = compress::kForDensity(n_, b.density);
    started_ = Clock::now();
    DeviceBucketJob dj;
    dj.job = &job;
    dj.comm = dc->comm.get();
    dj.comm_stream = dc->stream;
    dj.comm_device = dc->device;
    dj.factors = ctx_.factors(members_);
    dj.propagate = ctx_.propagateNonFinite();
    const Status st = ctx_.local->startBucket(dj, &dev_);
    if (!st.ok()) {
      // This rank could not enqueue its part of the exchange: it fails here;
      // the peers' device communicator fails them at its deadline.
      dev_.reset();
      dev_done_ = true;
      dev_status_ = Status(st.code(), "rank " + std::to_string(ctx_.comm.rank()) + ": sparse allreduce of " + b.name +
                                          " on the device: " + st.message());
    }
  }

  size_t maxInFlight() const override { return kMaxDeviceInFlight; }

  bool ready() override {
    if (dev_done_) return true;
    bool done = false;
    const Status st = dev_->test(&done);
    if (!st.ok()) {
      dev_status_ = st;
      done = true;
    }
    dev_done_ = done;
    return done;
  }

  Status finish() override {
    Status st = dev_status_;
    // Not done yet (drain, or too many in flight): the one wait of this path.
    if (st.ok() && !dev_done_) st = dev_->wait();
    DeviceBucketResult r;
    if (st.ok()) st = dev_->result(&r);
    std::unique_ptr<LocalSlab> slab = dev_ ? dev_->takeSlab() : nullptr;
    const auto now = Clock::now();
    ctx_.online.exchanged(OnlineCost::kAllgather, double(block::allgatherBytes(cap_)) * ctx_.comm.size(), started_,
                          now);
    if (ctx_.timeline)
      for (auto& m : members_)
        ctx_.timeline->span(m.name, "DEVICE_BUCKET", started_, now,
                            "{\"cap\":" + std::to_string(cap_) + ",\"path\":\"device\"}");
    if (st.ok()) st = verdict(r);
    if (st.ok() && !local_.ok() && !skipped_) st = local_;
    // Commit exactly when every rank's selection was applied (the device's
    // verdict, the same everywhere).
    ctx_.local->settle(members_, std::move(slab), delivered_);
    return st;
  }

  // The work may still be running on the GPU: its buffers (slab, blocks)
  // are leaked, never given back to the pool.
  void abandon() override { (void)dev_.release(); }

 private:
  Status verdict(const DeviceBucketResult& r) {
    const int P = ctx_.comm.size();
    const std::string name = bucketName(members_);
    ctx_.stats.dense_bytes += 4 * n_;
    local_ = r.local;
    const size_t count = r.count;
    MGS_ENSURE(r.headers.size() == static_cast<size_t>(P), kInternal,
               "device bucket " << name << ": " << r.headers.size() << " headers for " << P << " ranks");
    if (r.malformed_rank >= 0)
      return Status(Code::kCommunication, "sparse allreduce of " + name + ": rank " + std::to_string(r.malformed_rank) +
                                              " sent a malformed block (torn, a count above the capacity, an index "
                                              "outside the bucket or a non-finite value); nothing was written");
    bool other_error = false;
    const std::string failed = ctx_.failedRanks(r.headers.data(), cap_, members_, &other_error);
    if (!failed.empty()) {
      MGS_ENSURE(!r.written, kInternal,
                 "device bucket " << name << ": the device wrote the outputs although " << failed);
      if (!other_error && ctx_.propagateNonFinite()) {
        MGS_ENSURE(r.nan_written, kInternal,
                   "device bucket " << name << ": non-finite values (" << failed << ") but no NaN outputs");
        MGS_LOG_DEBUG("sparse allreduce of {}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", name, failed);
        skipped_ = true;
        return Status::OK();
      }
      return ExchangeContext::failedVerdict("sparse allreduce of " + name, failed, other_error, local_);
    }
    MGS_ENSURE(r.written, kInternal,
               "device bucket " << name << ": every header is a count, but the outputs were not written");
    delivered_ = true;
    ++ctx_.stats.buckets;
    ctx_.stats.selected += count;
    ctx_.stats.target += k_;
    ctx_.stats.bytes_sent += 8 * count;
    ctx_.countPath(BucketPath::kDevice, 1, 8 * count);
    return Status::OK();
  }

  ExchangeContext& ctx_;
  const size_t n_;
  size_t cap_ = 1, k_ = 0;
  Clock::time_point started_;
  Status local_;
  bool skipped_ = false, delivered_ = false;
  std::unique_ptr<PendingDeviceBucket> dev_;
  bool dev_done_ = false;
  Status dev_status_;  // enqueuing or polling failed (then dev_done_)
};

}  // namespace

// Device buckets exist for the allgather only; the agreed and hierarchical
// exchanges of CUDA buckets run on the local stage's route.
bool deviceClaims(ExchangeContext& ctx, const BucketStart& b) {
  size_t cap = 1;
  const LocalJob job = deviceJob(ctx, b.members, b, &cap);
  return ctx.device_bucket(b.members, job);
}

std::unique_ptr<BucketExchange> startDeviceExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<DeviceExchange>(ctx, b);
  ex->start(b);
  return ex;
}

}  // namespace mgs
