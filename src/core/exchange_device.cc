// A device bucket (routed_local_stage.h "Device buckets"): a sparse
// bucket whose members are all CUDA tensors, with a device communicator
// (NCCL), runs as enqueued work only: the local stage, the exchange on the
// device communicator's stream, the verdict and the scatter. Four
// exchanges run this way:
//  - the allgather of the fixed-capacity blocks, the verdict over every
//    rank's header;
//  - the agreed exchange (leader >= 0, as exchange_agreed.cc picks it): the
//    leader's block broadcast, every rank's values at its indices and one
//    verdict slot per rank summed by one allreduce, the verdict over the
//    leader's block and the slots;
//  - the dense fallback (as exchange_dense.cc picks it): no selection, the
//    fused acc and one verdict slot per rank summed by one allreduce, every
//    output entry written from the sum, the residual +0;
//  - the hierarchical exchange (MGS_EXCHANGE=hierarchical, nodes of several
//    ranks, the resident stage taking it): P verdict slots summed on the
//    device communicator, acc summed inside the node, the node leader's
//    selection allgathered among the leaders and broadcast in the node, the
//    verdict over the slots and the node blocks (routed_local_stage.h).
// The pipeline finishes a device bucket once its event has passed; the
// verdict comes from pinned memory the device wrote. The same rules as the
// host exchanges: a failure code from any rank fails the bucket on every
// rank with the same message (naming the rank, and for a staging code the
// tensor and the cause), the outputs are not written, and the residual
// commits exactly when every rank's selection (agreed: every rank's values)
// was applied. The CUDA side of the allgather (src/device/cuda/) ran on an
// H100 at np 1 (gpu/device_bucket, python.cuda_sparse.nccl.np1); its agreed
// and dense sides never ran on a GPU, nor did its hierarchical side (the
// CUDA stage's startHierBucket over split NCCL communicators). This part
// is tested on the CPU with a stand-in resident stage
// (tests/unit/core/device_bucket_test.cc).
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

// The local stage's job, as the host allgather's but with the block on the
// device; for the agreed exchange only its leader selects.
LocalJob deviceJob(ExchangeContext& ctx, const std::vector<Request>& members, const BucketStart& b, size_t* cap,
                   bool select = true) {
  const compress::Selector& sel = ctx.selector(b.density);
  *cap = std::max<size_t>(sel.maxCount(b.n), 1);
  LocalJob job;
  job.members = &members;
  job.n = b.n;
  job.select = select;
  job.selector = &sel;
  job.cap = *cap;
  job.step = ctx.step();
  job.name = b.name.c_str();
  return job;
}

enum class DeviceMode { kAllgather, kAgreed, kDense, kHierarchical };

class DeviceExchange : public BucketExchange {
 public:
  // kAgreed: the agreed exchange's device bucket with `leader`.
  DeviceExchange(ExchangeContext& ctx, BucketStart& b, DeviceMode mode, int leader = -1)
      : BucketExchange(std::move(b.members)), ctx_(ctx), n_(b.n), mode_(mode), leader_(leader),
        dense_(mode == DeviceMode::kDense) {}

  void start(BucketStart& b) {
    device::DeviceComm* dc = ctx_.device_comm();
    const bool hier = mode_ == DeviceMode::kHierarchical;
    node_lead_ = hier && dc->node->rank() == 0;
    const bool select = mode_ == DeviceMode::kAllgather || (agreed() && ctx_.comm.rank() == leader_) || node_lead_;
    LocalJob job = deviceJob(ctx_, members_, b, &cap_, select);
    k_ = dense_ ? 0 : compress::kForDensity(n_, b.density);
    started_ = Clock::now();
    DeviceBucketJob dj;
    dj.job = &job;
    dj.leader = leader_;
    dj.dense = dense_;
    if (hier) {
      dj.hier = true;
      dj.node_comm = dc->node.get();
      dj.leader_comm = dc->leaders.get();
      dj.nodes = ctx_.nodes.nodes;
    }
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
      dev_status_ = Status(st.code(), "rank " + std::to_string(ctx_.comm.rank()) + ": " + what(b.name) +
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
    if (agreed() || mode_ == DeviceMode::kHierarchical)
      ctx_.online.exchangeEnded(now);  // as the host agreed and hierarchical exchanges: the step's span
    else if (dense_)
      ctx_.online.exchanged(OnlineCost::kAllreduce, 4.0 * double(n_ + size_t(ctx_.comm.size())), started_, now);
    else
      ctx_.online.exchanged(OnlineCost::kAllgather, double(block::allgatherBytes(cap_)) * ctx_.comm.size(), started_,
                            now);
    if (ctx_.timeline)
      for (auto& m : members_)
        ctx_.timeline->span(m.name, "DEVICE_BUCKET", started_, now,
                            "{\"cap\":" + std::to_string(cap_) + ",\"path\":\"device\",\"exchange\":\"" +
                                (agreed() ? "agreed\",\"leader\":" + std::to_string(leader_)
                                          : std::string(modeName()) + "\"") +
                                "}");
    if (st.ok()) st = verdict(r);
    if (st.ok() && !local_.ok() && !skipped_) st = local_;
    // A bucket some rank's slot stopped does not rotate its leader (as the host agreed exchange).
    if (agreed() && !flagged_) ctx_.blocks.agreedApplied(bucketName(members_));
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
    const bool hier = mode_ == DeviceMode::kHierarchical;
    MGS_ENSURE(!hier || r.node_headers.size() == static_cast<size_t>(ctx_.nodes.nodes), kInternal,
               "device bucket " << name << ": " << r.node_headers.size() << " node blocks for " << ctx_.nodes.nodes
                                << " nodes");
    if (r.malformed_rank >= 0)
      return Status(Code::kCommunication, what(name) + ": " + (hier ? "the leader of node " : "rank ") +
                                              std::to_string(r.malformed_rank) +
                                              " sent a malformed block (torn, a count above the capacity, an index "
                                              "outside the bucket or a non-finite value); nothing was written");
    bool other_error = false;
    std::string failed = ctx_.failedRanks(r.headers.data(), cap_, members_, &other_error);
    if (hier && failed.empty())
      for (size_t i = 0; i < r.node_headers.size(); ++i) {
        // No rank failed, yet a leader's selection did: its node's sum.
        const block::Header h = block::decodeHeader(r.node_headers[i], cap_, members_.size());
        if (h.kind == block::Header::kCount) continue;
        const bool numeric = h.bad_member >= 0 && h.cause == block::StagingCause::kNone;
        other_error |= !numeric;
        failed += std::string(failed.empty() ? "" : "; ") + "the leader of node " + std::to_string(i) +
                  (numeric ? ": the sum of its node's values is not finite" : ": its selection failed (see its log)");
      }
    if (!failed.empty()) {
      flagged_ = true;
      MGS_ENSURE(!r.written, kInternal,
                 "device bucket " << name << ": the device wrote the outputs although " << failed);
      if (!other_error && ctx_.propagateNonFinite()) {
        MGS_ENSURE(r.nan_written, kInternal,
                   "device bucket " << name << ": non-finite values (" << failed << ") but no NaN outputs");
        MGS_LOG_DEBUG("{}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", what(name), failed);
        skipped_ = true;
        return Status::OK();
      }
      return ExchangeContext::failedVerdict(what(name), failed, other_error, local_);
    }
    MGS_ENSURE(r.written, kInternal,
               "device bucket " << name << ": every header is a count, but the outputs were not written");
    delivered_ = true;
    if (dense_) {
      // Everything was sent: the slab is +0, the residual commits to zero.
      ++ctx_.stats.dense_buckets;
      ctx_.stats.bytes_sent += 4 * n_;
      ctx_.countPath(BucketPath::kDevice, 1, 4 * n_);
      return Status::OK();
    }
    ++ctx_.stats.buckets;
    ctx_.stats.selected += count;
    ctx_.stats.target += k_;
    if (hier) {
      ++ctx_.stats.hierarchical_buckets;
      // As the host hierarchical exchange: a leader sends its node's
      // selection, the others their whole acc (inside the node).
      const uint64_t bytes = node_lead_ ? 8 * count : 4 * n_;
      ctx_.stats.bytes_sent += bytes;
      ctx_.countPath(BucketPath::kDevice, 1, bytes);
      return Status::OK();
    }
    // Payload on the wire: the allgather's pairs; the agreed exchange's
    // values, and the indices on its leader (as the host agreed exchange).
    const uint64_t bytes = !agreed() ? 8 * count : 4 * count + (ctx_.comm.rank() == leader_ ? 4 * count : 0);
    if (agreed()) ++ctx_.stats.agreed_buckets;
    ctx_.stats.bytes_sent += bytes;
    ctx_.countPath(BucketPath::kDevice, 1, bytes);
    return Status::OK();
  }

  bool agreed() const { return mode_ == DeviceMode::kAgreed; }
  const char* modeName() const {
    switch (mode_) {
      case DeviceMode::kAgreed:
        return "agreed";
      case DeviceMode::kDense:
        return "dense";
      case DeviceMode::kHierarchical:
        return "hierarchical";
      default:
        return "allgather";
    }
  }
  std::string what(const std::string& name) const {
    if (dense_) return "dense allreduce of " + name;
    if (mode_ == DeviceMode::kHierarchical) return "sparse allreduce of " + name + " (hierarchical exchange)";
    return "sparse allreduce of " + name + (agreed() ? " (agreed exchange)" : "");
  }

  ExchangeContext& ctx_;
  const size_t n_;
  const DeviceMode mode_;
  const int leader_;     // the agreed exchange's leader, or -1
  const bool dense_;     // the dense fallback
  bool node_lead_ = false;  // the hierarchical exchange: this rank leads its node
  bool flagged_ = false;  // some rank's code failed the bucket
  size_t cap_ = 1, k_ = 0;
  Clock::time_point started_;
  Status local_;
  bool skipped_ = false, delivered_ = false;
  std::unique_ptr<PendingDeviceBucket> dev_;
  bool dev_done_ = false;
  Status dev_status_;  // enqueuing or polling failed (then dev_done_)
};

}  // namespace

// Device buckets exist for the allgather and, where the resident stage
// takes them, the agreed exchange and the dense fallback; the hierarchical
// exchange of CUDA buckets runs on the local stage's route.
bool deviceClaims(ExchangeContext& ctx, const BucketStart& b) {
  size_t cap = 1;
  const LocalJob job = deviceJob(ctx, b.members, b, &cap);
  return ctx.device_bucket(b.members, job);
}

// Every rank has a resident stage once device buckets run (deviceBucket
// agreed on it), and every rank's is the same kind: the same answer everywhere.
bool deviceAgreedClaims(ExchangeContext& ctx, const BucketStart& b) {
  return deviceClaims(ctx, b) && ctx.local->resident() && ctx.local->resident()->runsAgreedDeviceBuckets();
}

bool deviceDenseClaims(ExchangeContext& ctx, const BucketStart& b) {
  return deviceClaims(ctx, b) && ctx.local->resident() && ctx.local->resident()->runsDenseDeviceBuckets();
}

// With nodes of several ranks and a resident stage that takes them; the
// device communicator is split into the nodes (as the job's NodeGroups)
// and their leaders at the first such bucket (collective over it: every
// rank asks at the same bucket).
bool deviceHierarchicalClaims(ExchangeContext& ctx, const BucketStart& b) {
  if (!ctx.nodes.hierarchy || !deviceClaims(ctx, b) || !ctx.local->resident() ||
      !ctx.local->resident()->runsHierarchicalDeviceBuckets())
    return false;
  device::DeviceComm* dc = ctx.device_comm();
  if (!dc->split_tried) {
    dc->split_tried = true;
    const int me = dc->comm->rank();
    Status st = dc->comm->split(ctx.nodes.color, me, &dc->node);
    if (st.ok()) st = dc->comm->split(dc->node && dc->node->rank() == 0 ? 0 : -1, me, &dc->leaders);
    if (st.ok() && (!dc->node || dc->node->size() != ctx.nodes.node->size()))
      st = Status(Code::kInternal, "the device communicator's nodes are not the job's");
    if (!st.ok()) {
      dc->node.reset();
      dc->leaders.reset();
      MGS_LOG_WARN("rank {}: the device communicator could not be split into nodes ({}); hierarchical buckets of CUDA "
                   "tensors are staged through host memory",
                   me, st.message());
    }
  }
  return dc->node != nullptr;
}

std::unique_ptr<BucketExchange> startDeviceExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<DeviceExchange>(ctx, b, DeviceMode::kAllgather);
  ex->start(b);
  return ex;
}

std::unique_ptr<BucketExchange> startDeviceAgreedExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<DeviceExchange>(ctx, b, DeviceMode::kAgreed, ctx.blocks.agreedLeader(b.name));
  ex->start(b);
  return ex;
}

std::unique_ptr<BucketExchange> startDeviceDenseExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<DeviceExchange>(ctx, b, DeviceMode::kDense);
  ex->start(b);
  return ex;
}

std::unique_ptr<BucketExchange> startDeviceHierarchicalExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<DeviceExchange>(ctx, b, DeviceMode::kHierarchical);
  ex->start(b);
  return ex;
}

}  // namespace mgs
