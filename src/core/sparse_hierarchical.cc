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
// leaders; the price is the dense sum inside the node. Blocking, like the
// agreed exchange: the bucket is done when this returns.
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
  if (hierarchy_)
    MGS_LOG_DEBUG("hierarchical exchange: {} nodes of at most {} ranks; this rank is {} of its node", nodes_,
                  ranks_per_node_, node_comm_->rank());
  return Status::OK();
}

void SparsePipeline::runHierarchical(std::vector<Request>& members, size_t n, double density, LocalOutcome& local_out) {
  const std::string name = bucketName(members);
  const bool lead = node_comm_->rank() == 0;
  const Status local = local_out.status;
  const int bad_member = local_out.bad_member;
  float* acc = hier_acc_.data();  // [n | kHierFlags]
  const compress::Selector& sel = selectorFor(density);
  BlockExchange::Allgather ex;
  ex.cap = std::max<size_t>(sel.maxCount(n), 1);  // from n and the density: the same on every rank
  ex.blocks = nodes_;
  const size_t bb = ex.blockBytes(), k = compress::kForDensity(n, density);
  std::unique_ptr<LocalSlab> slab;  // the leader's new residual, committed on success
  Status lead_st;
  int lead_bad = -1;
  auto span = [&](const char* what, Clock::time_point t0) {
    if (timeline_)
      for (auto& m : members) timeline_->span(m.name, what, t0, Clock::now());
  };
  auto finish = [&](const Status& st, bool commit) {
    online_.exchangeEnded(Clock::now());
    if (lead) {
      local_->settle(members, std::move(slab), commit);
    } else if (commit) {
      local_->zeroResidual(members);  // everything this rank had went into the node's sum
    }
    publishStats();
    for (auto& m : members) complete_(m, st);
    exchange_.release(ex);
  };

  // 1. The node's sum. A failed rank sends zeros and its flags.
  if (!local.ok()) std::fill(acc, acc + n, 0.0f);
  acc[n] = local.ok() ? 0.0f : 1.0f;
  acc[n + 1] = local.ok() || bad_member >= 0 ? 0.0f : 1.0f;
  auto t0 = Clock::now();
  Status st = node_comm_->allreduce(acc, n + kHierFlags, MGS_FLOAT32, CommOp::kSum);
  span("HIER_NODE_SUM", t0);
  stats_.dense_bytes += 4 * n;
  if (!st.ok()) return finish(st, false);
  const bool node_failed = acc[n] != 0.0f;

  // 2. The leaders: select from the sum, allgather one block per node.
  ex.recv = exchange_.takeBuffer(bb * nodes_);
  if (lead) {
    ex.send = exchange_.takeBuffer(bb);
    if (!node_failed) {
      LocalJob job;
      job.members = &members;
      job.n = n;
      job.select = true;
      job.selector = &sel;
      job.cap = ex.cap;
      job.block = ex.send.data();
      job.acc_in = acc;
      job.step = schedule_.step();
      job.name = name.c_str();
      LocalOutcome o;
      local_->run(job, &o);  // packs the block's header: the count, or a failure code
      slab = std::move(o.slab);
      lead_st = o.status;
      lead_bad = o.bad_member;
      if (o.selected)
        online_.selected(static_cast<int64_t>(n), std::chrono::duration<double>(o.select_end - o.select_begin).count());
      if (timeline_ && o.selected)
        for (auto& m : members) timeline_->span(m.name, "SELECT", o.select_begin, o.select_end);
      stats_.selected += o.count;
      stats_.bytes_sent += 8 * o.count;
    } else {
      // Some rank of this node failed: a failure code instead of a block.
      block::AllgatherBlock(ex.send.data(), ex.cap).finish(block::failureCode(acc[n + 1] != 0.0f ? -1 : 0));
    }
    for (int r = 0; r < nodes_; ++r) block::AllgatherBlock(ex.recv.data() + size_t(r) * bb, ex.cap).clearSeal();
    t0 = Clock::now();
    st = leader_comm_->allgather(ex.send.data(), bb, ex.recv.data());
    span("HIER_LEADER_ALLGATHER", t0);
    // On failure the broadcast below still runs (the node waits for it); its
    // torn blocks fail the bucket there on every rank of the node.
    if (!st.ok()) MGS_LOG_ERROR("rank {}: {}: the leaders' allgather failed: {}", comm_.rank(), name, st.message());
  } else {
    stats_.bytes_sent += 4 * n;
  }
  // 3. The leaders' blocks to every rank of the node.
  t0 = Clock::now();
  Status bst = node_comm_->broadcast(ex.recv.data(), bb * nodes_, 0);
  span("HIER_NODE_BROADCAST", t0);
  if (!st.ok()) return finish(st, false);
  if (!bst.ok()) return finish(bst, false);
  st = exchange_.validate(ex, n, members.size(), name + " (hierarchical exchange)");
  if (!st.ok()) return finish(st, false);
  counts_.resize(nodes_);
  bool any_failed = false;
  for (int r = 0; r < nodes_; ++r) {
    counts_[r] = ex.received(r).header();
    any_failed |= block::decodeHeader(counts_[r], ex.cap, members.size()).kind != block::Header::kCount;
  }
  if (any_failed) {
    // The same blocks on every rank: every rank is here. Name the ranks.
    const Status mine_st = !local.ok() ? local : lead_st;
    const int mine_bad = !local.ok() ? bad_member : lead_bad;
    bool other_error = false;
    std::string failed;
    const std::string what = "sparse allreduce of " + name + " (hierarchical exchange)";
    st = namedFailure(what, members, mine_st, mine_bad, &other_error, &failed);
    if (!st.ok()) return finish(st, false);
    if (!other_error && propagateNonFinite()) {
      MGS_LOG_DEBUG("{}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", what, failed);
      return finish(scatter_.writeNaNOutputs(members), false);
    }
    return finish(failedVerdict(what, failed, other_error, mine_st), false);
  }
  t0 = Clock::now();
  st = scatter_.scatterBlocks(members, n, ex, counts_.data());
  span("SCATTER_ADD", t0);
  ++stats_.buckets;
  stats_.target += k;
  // Every rank's contribution was delivered, whatever writing this rank's
  // outputs did: the residuals commit on every rank.
  finish(st, true);
}

Status SparsePipeline::namedFailure(const std::string& what, const std::vector<Request>& members, const Status& local,
                                    int bad_member, bool* other_error, std::string* failed) {
  const int P = comm_.size();
  const uint64_t mine = local.ok() ? 0 : block::failureCode(bad_member);
  counts_.resize(P);
  Status st = comm_.allgather(&mine, sizeof mine, counts_.data());
  if (!st.ok()) return Status(st.code(), what + " failed and naming the failed ranks failed: " + st.message());
  *failed = failedRanks(counts_.data(), 0, members, other_error);
  if (failed->empty()) {
    // A node's sum went non-finite although no rank's own values did.
    *failed = "the sum of some node's values is not finite";
  }
  return Status::OK();
}

}  // namespace mgs
