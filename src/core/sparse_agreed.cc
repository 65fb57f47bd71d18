// The agreed-index exchange of the sparse pipeline (ScaleCom's CLT-k idea,
// docs/architecture.md "Exchanges"), and the per-bucket choice between it,
// the fixed-block allgather (sparse_exchange.cc) and a dense allreduce
// (pickExchange, block_exchange.cc).
//
// Per bucket, one leader rank ((hash of the bucket's name + the times that
// bucket was applied) mod P: the same on every rank whatever order buckets
// are negotiated in, and a skipped step does not move it) selects from
// its accumulator with the configured selector. It broadcasts a fixed-size
// index block [header | indices[cap] | seal]; every rank gathers its own
// accumulator's values at those indices and zeroes exactly those entries,
// and the cap values (zero padded) plus two flag slots are summed by one
// allreduce. Per-rank traffic is about 4*cap (broadcast) + 2*4*cap (ring
// allreduce) bytes whatever P is, against 8*cap*P for the allgather; and
// only the leader runs the selector.
//
// The accumulator is the local stage's scratch slab, shared with the
// allgather (runBucket, local_stage.h): the residual changes only when the
// flags say every rank contributed. A NaN/Inf on any rank raises a flag, so
// every rank reads the same verdict in the same allreduce: under
// MGS_NONFINITE=propagate all outputs NaN and every residual as it was; under
// 'error' MGS_ERR_NUMERIC naming each bad rank and tensor.
#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/logging.h"
#include "core/sparse_pipeline.h"

namespace mgs {

void SparsePipeline::runAgreed(std::vector<Request>& members, size_t n, size_t cap, int leader, size_t k,
                               LocalOutcome& local_out, std::vector<char>&& block) {
  const int me = comm_.rank();
  const bool lead = me == leader;
  const std::string name = bucketName(members);
  const Status local = local_out.status;
  const int bad_member = local_out.bad_member;
  std::unique_ptr<LocalSlab> acc = std::move(local_out.slab);
  auto span = [&](const char* what, Clock::time_point t0, const std::string& args = "") {
    if (timeline_)
      for (auto& m : members) timeline_->span(m.name, what, t0, Clock::now(), args);
  };
  // The leader's block was packed by the local stage (count or failure
  // code, sealed); the others receive into a buffer whose old seal must go.
  if (!lead) block::IndexBlock(block.data(), cap).clearSeal();
  // `acc` is this rank's scratch slab (gradient + residual; on the leader
  // with its selection already zeroed): the residual itself is untouched
  // until every rank holds the same verdict. `commit` then makes acc the
  // residual (LocalStage::settle), exactly when every rank's values went into
  // the sum; any other end drops it, so the residual is bitwise as before.
  bool flagged = false;  // some rank's flag was raised: the bucket's leader does not rotate
  auto finish = [&](const Status& st, bool commit) {
    if (!flagged) exchange_.agreedApplied(name);
    online_.exchangeEnded(Clock::now());              // online re-planning: the step's span
    local_->settle(members, std::move(acc), commit);  // before the handles complete: the next step may start
    publishStats();
    for (auto& m : members) complete_(m, st);
    exchange_.giveBuffer(std::move(block));
  };
  const uint32_t* idx = block::ConstIndexBlock(block.data(), cap).indices();
  float* vals = agreed_vals_.data();  // [cap values | kAgreedFlags slots]

  auto t0 = Clock::now();
  Status st = exchange_.broadcastIndex(block, cap, leader, n, members.size(), name);
  span("AGREED_BROADCAST", t0, "{\"cap\":" + std::to_string(cap) + ",\"leader\":" + std::to_string(leader) + "}");
  if (!st.ok()) return finish(st, false);
  // A failure code: the leader's local part failed and selected nothing. The
  // allreduce still runs (with no values), because only its flags tell every
  // rank which others failed too.
  const block::Header h = block::decodeHeader(block::ConstIndexBlock(block.data(), cap).header(), cap, members.size());
  const size_t count = h.kind == block::Header::kCount ? h.count : 0;

  // Gather: the other ranks move their acc's values at the agreed indices
  // into the allreduce (their acc keeps the rest: the new residual). A rank
  // whose local part failed contributes zeros and raises its flag; a
  // non-finite value never enters the sum, so the flags alone decide.
  if (!lead && local.ok()) local_->extract(*acc, idx, count, vals);
  if (!local.ok()) std::fill(vals, vals + count, 0.0f);
  std::fill(vals + count, vals + cap, 0.0f);  // padding
  // Flags: ranks that failed, and of those, failures that are not a
  // non-finite value (staging). Small integers: exact in float whatever the
  // summation order, so every rank reads the same verdict.
  vals[cap] = local.ok() ? 0.0f : 1.0f;
  vals[cap + 1] = local.ok() || bad_member >= 0 ? 0.0f : 1.0f;

  t0 = Clock::now();
  st = comm_.allreduce(vals, cap + kAgreedFlags, MGS_FLOAT32, CommOp::kSum);
  span("AGREED_ALLREDUCE", t0, "{\"cap\":" + std::to_string(cap) + "}");
  stats_.dense_bytes += 4 * n;
  if (!st.ok()) return finish(st, false);
  if (vals[cap] != 0.0f) {
    flagged = true;
    const bool other_error = vals[cap + 1] != 0.0f;
    if (!other_error && propagateNonFinite()) {
      // Loss scaling, as the allgather's finishSparse: every output NaN on
      // every rank, nothing commits.
      MGS_LOG_DEBUG(
          "sparse allreduce of {} (agreed exchange): non-finite gradients on {} rank(s){}; outputs set "
          "to NaN (MGS_NONFINITE=propagate)",
          name, static_cast<int>(vals[cap]), local.ok() ? "" : ", here: " + local.message());
      return finish(scatter_.writeNaNOutputs(members), false);
    }
    return finish(agreedFailure(members, local, bad_member), false);
  }

  // Outputs: every rank holds the same sums, so the same outputs.
  t0 = Clock::now();
  st = scatter_.scatterAgreed(members, n, idx, vals, count);
  span("SCATTER", t0);
  ++stats_.buckets;
  ++stats_.agreed_buckets;
  stats_.selected += count;
  stats_.target += k;
  // Payload this rank puts on the wire: its values, and the indices if it leads.
  stats_.bytes_sent += 4 * count + (lead ? 4 * count : 0);
  finish(st, true);  // every rank's values are in the sum, whatever writing this rank's outputs did
}

Status SparsePipeline::agreedFailure(const std::vector<Request>& members, const Status& local, int bad_member) {
  // The flags said how many ranks failed, not which: one allgather of each
  // rank's failure code names them all, the same text on every rank (as the
  // allgather's blocks do). It runs only on this failure path, on every rank
  // alike (all read the same flags); the steady state pays nothing for it.
  const int P = comm_.size();
  const uint64_t mine = local.ok() ? 0 : block::failureCode(bad_member);
  counts_.resize(P);
  const std::string what = "sparse allreduce of " + bucketName(members) + " (agreed exchange)";
  Status st = comm_.allgather(&mine, sizeof mine, counts_.data());
  if (!st.ok()) return Status(st.code(), what + " failed and naming the failed ranks failed: " + st.message());
  bool other_error = false;
  const std::string failed = failedRanks(counts_.data(), 0, members, &other_error);
  return failedVerdict(what, failed, other_error, local);
}

}  // namespace mgs
