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
// agreed exchange (sparse_agreed.cc) where the backend has nonblocking
// collectives: each phase starts when the one before has completed on this
// rank, on a communicator of its own (the node sum on node_comm_, the
// leaders' allgather on leader_comm_, the node broadcast on node_bcast_comm_,
// the failure names on names_comm_), in bucket order.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/logging.h"
#include "core/sparse_pipeline.h"

namespace mgs {
namespace {

// Median of 3 timed calls after one warm-up (as calibration.cc times).
template <typename F>
Status timed(double* out, F&& fn) {
  MGS_RETURN_IF_ERROR(fn());
  double t[3];
  for (double& s : t) {
    const auto t0 = Clock::now();
    MGS_RETURN_IF_ERROR(fn());
    s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  std::sort(t, t + 3);
  *out = t[1];
  return Status::OK();
}

}  // namespace

Status SparsePipeline::measureNodes(plan::CostModel* cost) {
  // The node's sum (and broadcast) and the leaders' allgather, timed where
  // they run and max-reduced over every rank, so that every rank ends with
  // the same model. Collective on every rank; only with a hierarchy.
  const std::vector<size_t> node_bytes = {4 << 10, 256 << 10, 4 << 20, 16 << 20};
  const std::vector<size_t> leader_bytes = {4 << 10, 64 << 10, 1 << 20};  // per leader
  std::vector<double> t(node_bytes.size() + leader_bytes.size(), 0.0);
  std::vector<float> buf(node_bytes.back() / 4, 0.0f);
  for (size_t i = 0; i < node_bytes.size(); ++i)
    MGS_RETURN_IF_ERROR(
        timed(&t[i], [&] { return node_comm_->allreduce(buf.data(), node_bytes[i] / 4, MGS_FLOAT32, CommOp::kSum); }));
  if (leader_comm_) {
    std::vector<char> gathered(leader_bytes.back() * nodes_);
    for (size_t i = 0; i < leader_bytes.size(); ++i)
      MGS_RETURN_IF_ERROR(timed(&t[node_bytes.size() + i],
                                [&] { return leader_comm_->allgather(buf.data(), leader_bytes[i], gathered.data()); }));
  }
  MGS_RETURN_IF_ERROR(comm_.allreduce(t.data(), t.size(), MGS_FLOAT64, CommOp::kMax));
  std::vector<plan::Sample> node, leaders;
  for (size_t i = 0; i < node_bytes.size(); ++i) node.emplace_back(double(node_bytes[i]), t[i]);
  for (size_t i = 0; i < leader_bytes.size(); ++i)
    leaders.emplace_back(double(leader_bytes[i]) * nodes_, t[node_bytes.size() + i]);  // total bytes
  MGS_RETURN_IF_ERROR(plan::CommModel::table(node, &cost->node));
  return plan::CommModel::table(leaders, &cost->leader_allgather);
}

Status SparsePipeline::setupNodes() {
  const int P = comm_.size(), me = comm_.rank();
  const bool forced = config_.exchange == "hierarchical";
  if (P == 1 || !(allowedExchanges(config_, P) & plan::kExchangeHierarchical)) {
    MGS_ENSURE(!forced || P > 1, kConfig,
               "MGS_EXCHANGE=hierarchical needs at least 2 nodes of 2 or more ranks; this job has 1 rank");
    return Status::OK();
  }
  int color = 0;
  if (config_.node_size > 0) {
    // Checked before any collective, with the same numbers on every rank.
    MGS_ENSURE(P % config_.node_size == 0, kConfig,
               "rank " << me << ": MGS_NODE_SIZE=" << config_.node_size << " does not divide the " << P
                       << " ranks of this job (ranks r with the same r / MGS_NODE_SIZE form a node)");
    color = static_cast<int>(me / config_.node_size);
  } else {
    // By host name: the first rank with this rank's name numbers the node.
    constexpr size_t kName = 256;
    std::vector<char> mine(kName, 0), all(kName * P);
    MGS_ENSURE(gethostname(mine.data(), kName - 1) == 0, kInternal, "rank " << me << ": gethostname failed");
    MGS_RETURN_IF_ERROR(comm_.allgather(mine.data(), kName, all.data()));
    for (int r = 0; r < P; ++r)
      if (std::memcmp(all.data() + size_t(r) * kName, mine.data(), kName) == 0) {
        color = r;
        break;
      }
  }
  Status st = comm_.split(color, me, &node_comm_);
  if (st.ok()) st = comm_.split(node_comm_ && node_comm_->rank() == 0 ? 0 : -1, me, &leader_comm_);
  if (!st.ok()) {
    // Every rank's backend answers alike (ranks as threads cannot split).
    node_comm_.reset();
    leader_comm_.reset();
    if (forced) return Status(st.code(), "rank " + std::to_string(me) + ": MGS_EXCHANGE=hierarchical: " + st.message());
    MGS_LOG_DEBUG("no hierarchical exchange: {}", st.message());
    return Status::OK();
  }
  // Nodes and the largest node, the same on every rank.
  int32_t counts[2] = {node_comm_->rank() == 0 ? 1 : 0, 0};
  int32_t largest = node_comm_->size();
  MGS_RETURN_IF_ERROR(comm_.allreduce(counts, 1, MGS_INT32, CommOp::kSum));
  MGS_RETURN_IF_ERROR(comm_.allreduce(&largest, 1, MGS_INT32, CommOp::kMax));
  nodes_ = counts[0];
  ranks_per_node_ = largest;
  hierarchy_ = nodes_ >= 2 && ranks_per_node_ >= 2;
  MGS_ENSURE(hierarchy_ || !forced, kConfig,
             "rank " << me << ": MGS_EXCHANGE=hierarchical needs at least 2 nodes of 2 or more ranks; this job's " << P
                     << " ranks form " << nodes_ << " node(s) of at most " << ranks_per_node_
                     << " (MGS_NODE_SIZE groups ranks into nodes)");
  // The node broadcast in flight starts at a different moment on every rank
  // (after the leaders' allgather on the leader): a communicator of its own.
  if (hierarchy_ && comm_.asyncCollectives()) MGS_RETURN_IF_ERROR(node_comm_->duplicate(&node_bcast_comm_));
  if (hierarchy_)
    MGS_LOG_DEBUG("hierarchical exchange: {} nodes of at most {} ranks; this rank is {} of its node", nodes_,
                  ranks_per_node_, node_comm_->rank());
  return Status::OK();
}

void SparsePipeline::startHierarchical(std::vector<Request>& members, size_t n, double density,
                                       LocalOutcome& local_out, std::vector<float>&& acc_buf) {
  InFlight f;
  f.members = std::move(members);
  f.n = n;
  f.local = local_out.status;
  f.path = pathOf(f.members, local_out);
  Hier& h = f.hr;
  h.lead = node_comm_->rank() == 0;
  h.bad_member = local_out.bad_member;
  h.acc = std::move(acc_buf);
  const compress::Selector& sel = selectorFor(density);
  f.ex.cap = std::max<size_t>(sel.maxCount(n), 1);  // from n and the density: the same on every rank
  f.ex.blocks = nodes_;
  f.k = compress::kForDensity(n, density);
  h.density = density;
  h.step = schedule_.step();
  // 1. The node's sum. A failed rank sends zeros and its flags.
  float* acc = h.acc.data();
  if (!f.local.ok()) std::fill(acc, acc + n, 0.0f);
  acc[n] = f.local.ok() ? 0.0f : 1.0f;
  acc[n + 1] = f.local.ok() || h.bad_member >= 0 ? 0.0f : 1.0f;
  h.phase = Hier::kNodeSum;
  h.phase_start = Clock::now();
  h.status = node_comm_->startAllreduce(acc, n + kHierFlags, MGS_FLOAT32, CommOp::kSum, &h.op);
  if (!h.status.ok()) h.phase = Hier::kDone;
  if (!phasesInFlight()) {  // no nonblocking collectives: every phase now, in order
    while (f.hr.phase != Hier::kDone) stepHier(f, /*wait=*/true);
    finishHier(f);
    return;
  }
  pushInFlight(std::move(f));
}

void SparsePipeline::stepHier(InFlight& f, bool wait) {
  Hier& h = f.hr;
  if (h.phase == Hier::kDone) return;
  if (h.op) {
    bool done = true;
    Status st = wait ? h.op->wait() : h.op->test(&done);
    if (!st.ok()) {
      if (h.phase == Hier::kLeaders) {
        // The node broadcast below still runs (the node waits for it); its
        // torn blocks fail the bucket there on every rank of the node.
        MGS_LOG_ERROR("rank {}: {}: the leaders' allgather failed: {}", comm_.rank(), bucketName(f.members),
                      st.message());
        h.status = st;
        h.op.reset();
        done = true;
      } else {
        h.status = st;
        h.phase = Hier::kDone;
        return;
      }
    }
    if (!done) return;
    h.op.reset();
  }
  const auto now = Clock::now();
  auto span = [&](const char* what) {
    if (timeline_)
      for (auto& m : f.members) timeline_->span(m.name, what, h.phase_start, now);
    h.phase_start = now;
  };
  Communicator& bcast = node_bcast_comm_ ? *node_bcast_comm_ : *node_comm_;
  const size_t bb = f.ex.blockBytes();
  switch (h.phase) {
    case Hier::kNodeSum:
      span("HIER_NODE_SUM");
      hierSumArrived(f);
      break;
    case Hier::kLeaders:
      span("HIER_LEADER_ALLGATHER");
      // 3. The leaders' blocks to every rank of the node.
      h.phase = Hier::kNodeBcast;
      if (Status st = bcast.startBroadcast(f.ex.recv.data(), bb * nodes_, 0, &h.op); !st.ok()) {
        h.status = st;
        h.phase = Hier::kDone;
      }
      break;
    case Hier::kNodeBcast:
      span("HIER_NODE_BROADCAST");
      hierBlocksArrived(f);
      break;
    case Hier::kNames:
      span("HIER_FAILURE_NAMES");
      h.named = true;
      h.phase = Hier::kDone;
      break;
    default:
      break;
  }
}

void SparsePipeline::hierSumArrived(InFlight& f) {
  Hier& h = f.hr;
  const size_t n = f.n;
  const std::string name = bucketName(f.members);
  float* acc = h.acc.data();
  const bool node_failed = acc[n] != 0.0f;
  const size_t bb = f.ex.blockBytes();
  // 2. The leaders: select from the sum, allgather one block per node.
  f.ex.recv = exchange_.takeBuffer(bb * nodes_);
  if (!h.lead) {
    stats_.bytes_sent += 4 * n;
    countPath(f.path, 0, 4 * n);
    Communicator& bcast = node_bcast_comm_ ? *node_bcast_comm_ : *node_comm_;
    h.phase = Hier::kNodeBcast;
    h.status = bcast.startBroadcast(f.ex.recv.data(), bb * nodes_, 0, &h.op);
    if (!h.status.ok()) h.phase = Hier::kDone;
    return;
  }
  f.ex.send = exchange_.takeBuffer(bb);
  if (!node_failed) {
    LocalJob job;
    job.members = &f.members;
    job.n = n;
    job.select = true;
    job.selector = &selectorFor(h.density);
    job.cap = f.ex.cap;
    job.block = f.ex.send.data();
    job.acc_in = acc;
    job.step = h.step;
    job.name = name.c_str();
    LocalOutcome o;
    local_->run(job, &o);  // packs the block's header: the count, or a failure code
    h.slab = std::move(o.slab);
    h.lead_st = o.status;
    h.lead_bad = o.bad_member;
    if (o.selected)
      online_.selected(static_cast<int64_t>(n), std::chrono::duration<double>(o.select_end - o.select_begin).count());
    if (timeline_ && o.selected)
      for (auto& m : f.members) timeline_->span(m.name, "SELECT", o.select_begin, o.select_end);
    stats_.selected += o.count;
    stats_.bytes_sent += 8 * o.count;
    countPath(f.path, 0, 8 * o.count);
  } else {
    // Some rank of this node failed: a failure code instead of a block.
    block::AllgatherBlock(f.ex.send.data(), f.ex.cap).finish(block::failureCode(acc[n + 1] != 0.0f ? -1 : 0));
  }
  for (int r = 0; r < nodes_; ++r) block::AllgatherBlock(f.ex.recv.data() + size_t(r) * bb, f.ex.cap).clearSeal();
  h.phase = Hier::kLeaders;
  h.phase_start = Clock::now();
  h.status = leader_comm_->startAllgather(f.ex.send.data(), bb, f.ex.recv.data(), &h.op);
  if (!h.status.ok()) {
    // As a failed allgather: the node still waits for the broadcast.
    MGS_LOG_ERROR("rank {}: {}: the leaders' allgather failed: {}", comm_.rank(), name, h.status.message());
    h.op.reset();
  }
}

void SparsePipeline::hierBlocksArrived(InFlight& f) {
  Hier& h = f.hr;
  h.phase = Hier::kDone;
  if (!h.status.ok()) return;  // the leaders' allgather failed
  const std::string name = bucketName(f.members);
  h.status = exchange_.validate(f.ex, f.n, f.members.size(), name + " (hierarchical exchange)");
  if (!h.status.ok()) return;
  bool any_failed = false;
  for (int r = 0; r < nodes_; ++r)
    any_failed |= block::decodeHeader(f.ex.received(r).header(), f.ex.cap, f.members.size()).kind !=
                  block::Header::kCount;
  if (!any_failed) {
    h.delivered = true;
    return;
  }
  // The same blocks on every rank: every rank is here. One allgather of
  // every rank's failure code names the failed ranks (failure path only).
  const Status mine_st = !f.local.ok() ? f.local : h.lead_st;
  const int mine_bad = !f.local.ok() ? h.bad_member : h.lead_bad;
  h.code = mine_st.ok() ? 0 : block::failureCode(mine_bad);
  h.phase = Hier::kNames;
  h.status = startNames(&h.code, &h.codes, &h.op);
  if (!h.status.ok()) h.phase = Hier::kDone;
}

void SparsePipeline::finishHier(InFlight& f) {
  Hier& h = f.hr;
  std::vector<Request>& members = f.members;
  const std::string name = bucketName(members);
  const std::string what = "sparse allreduce of " + name + " (hierarchical exchange)";
  stats_.dense_bytes += 4 * f.n;
  Status st = h.status;
  bool commit = false;
  if (!st.ok()) {
    if (h.phase == Hier::kDone && !h.codes.empty() && !h.named)
      st = Status(st.code(), what + " failed and naming the failed ranks failed: " + st.message());
  } else if (h.delivered) {
    const auto t0 = Clock::now();
    counts_.resize(nodes_);
    for (int r = 0; r < nodes_; ++r) counts_[r] = f.ex.received(r).header();
    st = scatter_.scatterBlocks(members, f.n, f.ex, counts_.data());
    if (timeline_)
      for (auto& m : members) timeline_->span(m.name, "SCATTER_ADD", t0, Clock::now());
    ++stats_.buckets;
    countPath(f.path, 1, 0);
    stats_.target += f.k;
    // Every rank's contribution was delivered, whatever writing this rank's
    // outputs did: the residuals commit on every rank.
    commit = true;
  } else {
    bool other_error = false;
    std::string failed = failedRanks(h.codes.data(), 0, members, &other_error);
    // A node's sum went non-finite although no rank's own values did.
    if (failed.empty()) failed = "the sum of some node's values is not finite";
    const Status mine_st = !f.local.ok() ? f.local : h.lead_st;
    if (!other_error && propagateNonFinite()) {
      MGS_LOG_DEBUG("{}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", what, failed);
      st = scatter_.writeNaNOutputs(members);
    } else {
      st = failedVerdict(what, failed, other_error, mine_st);
    }
  }
  online_.exchangeEnded(Clock::now());
  if (h.lead) {
    local_->settle(members, std::move(h.slab), commit);
  } else if (commit) {
    local_->zeroResidual(members);  // everything this rank had went into the node's sum
  }
  publishStats();
  for (auto& m : members) complete_(m, st);
  exchange_.release(f.ex);
  vals_pool_.push_back(std::move(h.acc));
}

}  // namespace mgs
