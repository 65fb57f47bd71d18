// The hierarchical exchange of the sparse pipeline (docs/architecture.md
// "Exchanges"), for jobs with several ranks per node:
//
//   1. every rank's acc (gradient + residual, fused by the local stage as a
//      dense job) is summed inside its node (an allreduce on the node's
//      communicator, shared memory in practice: Communicator has no reduce);
//   2. the node's leader (its first rank) selects from that sum with the
//      configured selector and packs the fixed-block allgather's block; only
//      the leaders allgather, one block per node;
//   3. the leader broadcasts the received blocks inside its node, and every
//      rank validates them and scatters them into its outputs (the same
//      bytes everywhere, so the same verdict and the same output bits).
//
// Error feedback stays exact per rank: a non-leader contributed its whole acc,
// so its residual becomes +0; the leader's residual becomes the node sum
// minus what it selected (entries selected are +0, the others the sum
// bitwise). So what a rank keeps plus what it contributed is what came in:
// its own acc, and for the leader also the others' contributions. Both
// commit exactly when every node's block was a count (every rank of every
// node contributed); otherwise every residual stays bitwise as it was.
//
// A rank whose local part failed (a NaN, staging) contributes zeros and
// raises a flag in the node sum (two slots, as in the agreed exchange); its
// leader then sends a failure code instead of a block, so every rank sees
// the failure in the same blocks, and one allgather of every rank's code
// names the failed ranks on every rank (failure path only).
//
// Per-rank traffic between nodes is that of an allgather among P / R
// leaders; the price is the dense sum inside the node. In flight like the
// agreed exchange (exchange_agreed.cc) where the backend has nonblocking
// collectives: each phase starts when the one before has completed on this
// rank, on a communicator of its own (the node sum on NodeGroups::node, the
// leaders' allgather on NodeGroups::leaders, the node broadcast on
// NodeGroups::node_bcast, the failure names on ExchangeContext::names_comm),
// in bucket order (PhaseOrder).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/logging.h"
#include "core/bucket_exchange.h"
#include "core/collective_timing.h"

namespace mgs {
namespace {

constexpr size_t kHierFlags = 2;  // as the agreed exchange's flags, after the node sum

class HierarchicalExchange : public BucketExchange {
 public:
  HierarchicalExchange(ExchangeContext& ctx, BucketStart& b)
      : BucketExchange(std::move(b.members)), ctx_(ctx), g_(ctx.nodes), n_(b.n) {}

  void start(BucketStart& b) {
    // Every rank's acc goes whole into its node's sum; the leader selects
    // from that sum afterwards.
    acc_ = ctx_.takeVals(n_ + kHierFlags);
    LocalJob job;
    job.members = &members_;
    job.n = n_;
    job.dense_acc = acc_.data();
    LocalOutcome out;
    ctx_.runLocal(job, b.t0, &out);
    local_ = out.status;
    path_ = ExchangeContext::pathOf(members_, out);
    if (path_ == BucketPath::kStaged && !ctx_.hierarchical_staged_warned) {
      ctx_.hierarchical_staged_warned = true;
      MGS_LOG_WARN(
          "rank {}: MGS_EXCHANGE=hierarchical stages sparse buckets of CUDA tensors through host memory and selects "
          "them on the CPU here (its device path needs NCCL and a device stage that takes it; MGS_EXCHANGE=auto, "
          "allgather or agreed keeps the selection on the GPU)",
          ctx_.comm.rank());
    }
    lead_ = g_.node->rank() == 0;
    bad_member_ = out.bad_member;
    const compress::Selector& sel = ctx_.selector(b.density);
    ex_.cap = std::max<size_t>(sel.maxCount(n_), 1);  // from n and the density: the same on every rank
    ex_.blocks = g_.nodes;
    k_ = compress::kForDensity(n_, b.density);
    density_ = b.density;
    step_ = ctx_.step();
    // 1. The node's sum. A failed rank sends zeros and its flags.
    float* acc = acc_.data();
    if (!local_.ok()) std::fill(acc, acc + n_, 0.0f);
    acc[n_] = local_.ok() ? 0.0f : 1.0f;
    acc[n_ + 1] = local_.ok() || bad_member_ >= 0 ? 0.0f : 1.0f;
    phase_ = kNodeSum;
    phase_start_ = Clock::now();
    status_ = g_.node->startAllreduce(acc, n_ + kHierFlags, MGS_FLOAT32, CommOp::kSum, &op_);
    if (!status_.ok()) phase_ = kDone;
    if (!ctx_.phasesInFlight())  // no nonblocking collectives: every phase now, in order
      while (phase_ != kDone) step(/*wait=*/true);
  }

  bool queued() const override { return ctx_.phasesInFlight(); }
  bool phased() const override { return true; }
  bool ready() override { return phase_ == kDone; }

  void progress(PhaseOrder& order) override {
    // Leaving the node sum starts the leaders' allgather (leaders) or the
    // broadcast (the others); leaving the allgather starts the broadcast.
    const void* leaders = &g_.leaders;
    const void* bcast = &g_.node_bcast;
    const void* names = &ctx_.names_comm;
    if (phase_ == kNodeSum && order.free(leaders) && order.free(bcast)) step(false);
    if (phase_ == kNodeSum) {
      order.block(leaders);
      order.block(bcast);
      order.block(names);
      return;
    }
    if (phase_ == kLeaders && order.free(bcast)) step(false);
    if (phase_ == kLeaders) {
      order.block(bcast);
      order.block(names);
      return;
    }
    if (phase_ == kNodeBcast && order.free(names)) step(false);
    if (phase_ == kNodeBcast) {
      order.block(names);
      return;
    }
    if (phase_ == kNames) step(false);
  }

  Status finish() override {
    const std::string name = bucketName(members_);
    const std::string what = "sparse allreduce of " + name + " (hierarchical exchange)";
    ctx_.stats.dense_bytes += 4 * n_;
    Status st = status_;
    bool commit = false;
    if (!st.ok()) {
      if (phase_ == kDone && !codes_.empty() && !named_)
        st = Status(st.code(), what + " failed and naming the failed ranks failed: " + st.message());
    } else if (delivered_) {
      const auto t0 = Clock::now();
      std::vector<uint64_t>& counts = ctx_.counts;
      counts.resize(g_.nodes);
      for (int r = 0; r < g_.nodes; ++r) counts[r] = ex_.received(r).header();
      st = ctx_.scatter.scatterBlocks(members_, n_, ex_, counts.data());
      if (ctx_.timeline)
        for (auto& m : members_) ctx_.timeline->span(m.name, "SCATTER_ADD", t0, Clock::now());
      ++ctx_.stats.buckets;
      ++ctx_.stats.hierarchical_buckets;
      ctx_.countPath(path_, 1, 0);
      ctx_.stats.target += k_;
      // Every rank's contribution was delivered, whatever writing this rank's
      // outputs did: the residuals commit on every rank.
      commit = true;
    } else {
      bool other_error = false;
      std::string failed = ctx_.failedRanks(codes_.data(), 0, members_, &other_error);
      // A node's sum went non-finite although no rank's own values did.
      if (failed.empty()) failed = "the sum of some node's values is not finite";
      const Status mine_st = !local_.ok() ? local_ : lead_st_;
      if (!other_error && ctx_.propagateNonFinite()) {
        MGS_LOG_DEBUG("{}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", what, failed);
        st = ctx_.scatter.writeNaNOutputs(members_);
      } else {
        st = ExchangeContext::failedVerdict(what, failed, other_error, mine_st);
      }
    }
    ctx_.online.exchangeEnded(Clock::now());
    if (lead_) {
      ctx_.local->settle(members_, std::move(slab_), commit);
    } else if (commit) {
      ctx_.local->zeroResidual(members_);  // everything this rank had went into the node's sum
    }
    return st;
  }

  void release() override {
    ctx_.blocks.release(ex_);
    ctx_.giveVals(std::move(acc_));
  }

  // Leaked: a collective may still write into them.
  void abandon() override {
    BlockExchange::abandon(ex_);
    (void)op_.release();
    new std::vector<float>(std::move(acc_));
    new std::vector<uint64_t>(std::move(codes_));
  }

 private:
  enum Phase { kNodeSum, kLeaders, kNodeBcast, kNames, kDone };

  Communicator& bcastComm() { return g_.node_bcast ? *g_.node_bcast : *g_.node; }

  // One phase, if its collective has completed (wait: wait for it).
  void step(bool wait) {
    if (phase_ == kDone) return;
    if (op_) {
      bool done = true;
      Status st = wait ? op_->wait() : op_->test(&done);
      if (!st.ok()) {
        if (phase_ == kLeaders) {
          // The node broadcast below still runs (the node waits for it); its
          // torn blocks fail the bucket there on every rank of the node.
          MGS_LOG_ERROR("rank {}: {}: the leaders' allgather failed: {}", ctx_.comm.rank(), bucketName(members_),
                        st.message());
          status_ = st;
          op_.reset();
          done = true;
        } else {
          status_ = st;
          phase_ = kDone;
          return;
        }
      }
      if (!done) return;
      op_.reset();
    }
    const auto now = Clock::now();
    auto span = [&](const char* what) {
      if (ctx_.timeline)
        for (auto& m : members_) ctx_.timeline->span(m.name, what, phase_start_, now);
      phase_start_ = now;
    };
    const size_t bb = ex_.blockBytes();
    switch (phase_) {
      case kNodeSum:
        span("HIER_NODE_SUM");
        sumArrived();
        break;
      case kLeaders:
        span("HIER_LEADER_ALLGATHER");
        // 3. The leaders' blocks to every rank of the node.
        phase_ = kNodeBcast;
        if (Status st = bcastComm().startBroadcast(ex_.recv.data(), bb * g_.nodes, 0, &op_); !st.ok()) {
          status_ = st;
          phase_ = kDone;
        }
        break;
      case kNodeBcast:
        span("HIER_NODE_BROADCAST");
        blocksArrived();
        break;
      case kNames:
        span("HIER_FAILURE_NAMES");
        named_ = true;
        phase_ = kDone;
        break;
      default:
        break;
    }
  }

  void sumArrived() {
    const std::string name = bucketName(members_);
    float* acc = acc_.data();
    const bool node_failed = acc[n_] != 0.0f;
    const size_t bb = ex_.blockBytes();
    // 2. The leaders: select from the sum, allgather one block per node.
    ex_.recv = ctx_.blocks.takeBuffer(bb * g_.nodes);
    if (!lead_) {
      ctx_.stats.bytes_sent += 4 * n_;
      ctx_.countPath(path_, 0, 4 * n_);
      phase_ = kNodeBcast;
      status_ = bcastComm().startBroadcast(ex_.recv.data(), bb * g_.nodes, 0, &op_);
      if (!status_.ok()) phase_ = kDone;
      return;
    }
    ex_.send = ctx_.blocks.takeBuffer(bb);
    if (!node_failed) {
      LocalJob job;
      job.members = &members_;
      job.n = n_;
      job.select = true;
      job.selector = &ctx_.selector(density_);
      job.cap = ex_.cap;
      job.block = ex_.send.data();
      job.acc_in = acc;
      job.step = step_;
      job.name = name.c_str();
      LocalOutcome o;
      ctx_.local->run(job, &o);  // packs the block's header: the count, or a failure code
      slab_ = std::move(o.slab);
      lead_st_ = o.status;
      lead_bad_ = o.bad_member;
      if (o.selected)
        ctx_.online.selected(static_cast<int64_t>(n_),
                             std::chrono::duration<double>(o.select_end - o.select_begin).count());
      if (ctx_.timeline && o.selected)
        for (auto& m : members_) ctx_.timeline->span(m.name, "SELECT", o.select_begin, o.select_end);
      ctx_.stats.selected += o.count;
      ctx_.stats.bytes_sent += 8 * o.count;
      ctx_.countPath(path_, 0, 8 * o.count);
    } else {
      // Some rank of this node failed: a failure code instead of a block.
      block::AllgatherBlock(ex_.send.data(), ex_.cap).finish(block::failureCode(acc[n_ + 1] != 0.0f ? -1 : 0));
    }
    for (int r = 0; r < g_.nodes; ++r) block::AllgatherBlock(ex_.recv.data() + size_t(r) * bb, ex_.cap).clearSeal();
    phase_ = kLeaders;
    phase_start_ = Clock::now();
    status_ = g_.leaders->startAllgather(ex_.send.data(), bb, ex_.recv.data(), &op_);
    if (!status_.ok()) {
      // As a failed allgather: the node still waits for the broadcast.
      MGS_LOG_ERROR("rank {}: {}: the leaders' allgather failed: {}", ctx_.comm.rank(), name, status_.message());
      op_.reset();
    }
  }

  void blocksArrived() {
    phase_ = kDone;
    if (!status_.ok()) return;  // the leaders' allgather failed
    const std::string name = bucketName(members_);
    status_ = ctx_.blocks.validate(ex_, n_, members_.size(), name + " (hierarchical exchange)");
    if (!status_.ok()) return;
    bool any_failed = false;
    for (int r = 0; r < g_.nodes; ++r)
      any_failed |=
          block::decodeHeader(ex_.received(r).header(), ex_.cap, members_.size()).kind != block::Header::kCount;
    if (!any_failed) {
      delivered_ = true;
      return;
    }
    // The same blocks on every rank: every rank is here. One allgather of
    // every rank's failure code names the failed ranks (failure path only).
    const Status mine_st = !local_.ok() ? local_ : lead_st_;
    const int mine_bad = !local_.ok() ? bad_member_ : lead_bad_;
    code_ = mine_st.ok() ? 0 : block::failureCode(mine_bad);
    phase_ = kNames;
    status_ = ctx_.startNames(&code_, &codes_, &op_);
    if (!status_.ok()) phase_ = kDone;
  }

  ExchangeContext& ctx_;
  NodeGroups& g_;
  const size_t n_;
  size_t k_ = 0;
  Status local_;
  BucketPath path_ = BucketPath::kHost;
  BlockExchange::Allgather ex_;  // the leaders' allgather: one block per node
  Phase phase_ = kNodeSum;
  bool lead_ = false;
  std::vector<float> acc_;           // [n | kHierFlags]: this rank's acc, then the node's sum
  std::unique_ptr<LocalSlab> slab_;  // the leader's new residual, committed on success
  Status lead_st_;                   // the leader's selection
  int lead_bad_ = -1, bad_member_ = -1;
  double density_ = 0;      // the bucket's, at its negotiated place
  uint64_t step_ = 0;       // the schedule's step then (the selector's seed)
  bool delivered_ = false;  // every node's block was a count: the residuals commit
  bool named_ = false;      // the failure names were gathered (codes_)
  uint64_t code_ = 0;
  std::vector<uint64_t> codes_;
  std::unique_ptr<PendingCollective> op_;
  Status status_;
  Clock::time_point phase_start_;
};

}  // namespace

std::unique_ptr<BucketExchange> startHierarchicalExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<HierarchicalExchange>(ctx, b);
  ex->start(b);
  return ex;
}

Status measureNodes(Communicator& comm, const NodeGroups& g, plan::CostModel* cost) {
  // The node's sum (and broadcast) and the leaders' allgather, timed where
  // they run and max-reduced over every rank, so that every rank ends with
  // the same model. Collective on every rank; only with a hierarchy.
  const std::vector<size_t> node_bytes = {4 << 10, 256 << 10, 4 << 20, 16 << 20};
  const std::vector<size_t> leader_bytes = {4 << 10, 64 << 10, 1 << 20};  // per leader
  std::vector<double> t(node_bytes.size() + leader_bytes.size(), 0.0);
  std::vector<float> buf(node_bytes.back() / 4, 0.0f);
  for (size_t i = 0; i < node_bytes.size(); ++i)
    MGS_RETURN_IF_ERROR(
        timeMedian(3, &t[i], [&] { return g.node->allreduce(buf.data(), node_bytes[i] / 4, MGS_FLOAT32, CommOp::kSum); }));
  if (g.leaders) {
    std::vector<char> gathered(leader_bytes.back() * g.nodes);
    for (size_t i = 0; i < leader_bytes.size(); ++i)
      MGS_RETURN_IF_ERROR(timeMedian(3, &t[node_bytes.size() + i],
                                [&] { return g.leaders->allgather(buf.data(), leader_bytes[i], gathered.data()); }));
  }
  MGS_RETURN_IF_ERROR(comm.allreduce(t.data(), t.size(), MGS_FLOAT64, CommOp::kMax));
  std::vector<plan::Sample> node, leaders;
  for (size_t i = 0; i < node_bytes.size(); ++i) node.emplace_back(double(node_bytes[i]), t[i]);
  for (size_t i = 0; i < leader_bytes.size(); ++i)
    leaders.emplace_back(double(leader_bytes[i]) * g.nodes, t[node_bytes.size() + i]);  // total bytes
  MGS_RETURN_IF_ERROR(plan::CommModel::table(node, &cost->node));
  return plan::CommModel::table(leaders, &cost->leader_allgather);
}

Status setupNodes(Communicator& comm, const Config& config, NodeGroups* g) {
  const int P = comm.size(), me = comm.rank();
  const bool forced = config.exchange == "hierarchical";
  if (P == 1 || !(allowedExchanges(config, P) & plan::kExchangeHierarchical)) {
    MGS_ENSURE(!forced || P > 1, kConfig,
               "MGS_EXCHANGE=hierarchical needs at least 2 nodes of 2 or more ranks; this job has 1 rank");
    return Status::OK();
  }
  int color = 0;
  if (config.node_size > 0) {
    // Checked before any collective, with the same numbers on every rank.
    MGS_ENSURE(P % config.node_size == 0, kConfig,
               "rank " << me << ": MGS_NODE_SIZE=" << config.node_size << " does not divide the " << P
                       << " ranks of this job (ranks r with the same r / MGS_NODE_SIZE form a node)");
    color = static_cast<int>(me / config.node_size);
  } else {
    // By host name: the first rank with this rank's name numbers the node.
    constexpr size_t kName = 256;
    std::vector<char> mine(kName, 0), all(kName * P);
    MGS_ENSURE(gethostname(mine.data(), kName - 1) == 0, kInternal, "rank " << me << ": gethostname failed");
    MGS_RETURN_IF_ERROR(comm.allgather(mine.data(), kName, all.data()));
    for (int r = 0; r < P; ++r)
      if (std::memcmp(all.data() + size_t(r) * kName, mine.data(), kName) == 0) {
        color = r;
        break;
      }
  }
  g->color = color;
  Status st = comm.split(color, me, &g->node);
  if (st.ok()) st = comm.split(g->node && g->node->rank() == 0 ? 0 : -1, me, &g->leaders);
  if (!st.ok()) {
    // Every rank's backend answers alike (ranks as threads cannot split).
    g->node.reset();
    g->leaders.reset();
    if (forced) return Status(st.code(), "rank " + std::to_string(me) + ": MGS_EXCHANGE=hierarchical: " + st.message());
    MGS_LOG_DEBUG("no hierarchical exchange: {}", st.message());
    return Status::OK();
  }
  // Nodes and the largest node, the same on every rank.
  int32_t counts[2] = {g->node->rank() == 0 ? 1 : 0, 0};
  int32_t largest = g->node->size();
  MGS_RETURN_IF_ERROR(comm.allreduce(counts, 1, MGS_INT32, CommOp::kSum));
  MGS_RETURN_IF_ERROR(comm.allreduce(&largest, 1, MGS_INT32, CommOp::kMax));
  g->nodes = counts[0];
  g->ranks_per_node = largest;
  g->hierarchy = g->nodes >= 2 && g->ranks_per_node >= 2;
  MGS_ENSURE(g->hierarchy || !forced, kConfig,
             "rank " << me << ": MGS_EXCHANGE=hierarchical needs at least 2 nodes of 2 or more ranks; this job's " << P
                     << " ranks form " << g->nodes << " node(s) of at most " << g->ranks_per_node
                     << " (MGS_NODE_SIZE groups ranks into nodes)");
  // The node broadcast in flight starts at a different moment on every rank
  // (after the leaders' allgather on the leader): a communicator of its own.
  if (g->hierarchy && comm.asyncCollectives()) MGS_RETURN_IF_ERROR(g->node->duplicate(&g->node_bcast));
  if (g->hierarchy)
    MGS_LOG_DEBUG("hierarchical exchange: {} nodes of at most {} ranks; this rank is {} of its node", g->nodes,
                  g->ranks_per_node, g->node->rank());
  return Status::OK();
}

}  // namespace mgs
