// The sparse pipeline's fixed-block allgather and dense fallback: starting
// the exchange (BlockExchange), the verdict every rank takes from the
// received headers, and the hand-over to the scatter stage. Also the failure
// messages shared with the agreed exchange (sparse_agreed.cc).
#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/logging.h"
#include "core/sparse_pipeline.h"

namespace mgs {

void SparsePipeline::startSparse(std::vector<Request>& members, size_t n, size_t cap, size_t k, LocalOutcome& local,
                                 std::vector<char>&& block) {
  // One allgather of fixed-size blocks (core/sparse_block.h): cap is the
  // selector's bound (k, or the band's top), so padding costs at most the
  // band width and the count exchange round trip disappears. A rank whose
  // local part failed sent a failure code instead of a count (the local stage
  // packed it), so every rank fails the bucket together instead of waiting.
  // The exchange runs while the coordinator goes on (the next bucket's
  // selection, negotiation); it is finished in order by poll(), or when too
  // many are in flight.
  InFlight f;
  f.members = std::move(members);
  f.n = n;
  f.count = local.count;
  f.k = k;
  f.local = local.status;
  f.path = pathOf(f.members, local);
  f.acc = std::move(local.slab);
  f.ex.cap = cap;
  f.ex.send = std::move(block);
  exchange_.start(f.ex);
  pushInFlight(std::move(f));
}

void SparsePipeline::pushInFlight(InFlight&& f) {
  inflight_.push_back(std::move(f));
  stats_.in_flight_max = std::max<uint64_t>(stats_.in_flight_max, inflight_.size());
  while (inflight_.size() > BlockExchange::kMaxInFlight) finishOldest();
  poll();
}

void SparsePipeline::finishOldest() {
  if (inflight_.front().agreed() || inflight_.front().hier()) {  // sparse_agreed.cc, sparse_hierarchical.cc
    waitPhasedFront();
    InFlight f = std::move(inflight_.front());
    inflight_.pop_front();
    if (f.agreed())
      finishAgreed(f);
    else
      finishHier(f);
    return;
  }
  InFlight f = std::move(inflight_.front());
  inflight_.pop_front();
  if (f.device) {  // sparse_device.cc
    finishDevice(f);
    return;
  }
  Status st = exchange_.finish(f.ex);
  online_.exchanged(OnlineCost::kAllgather, double(f.ex.blockBytes()) * comm_.size(), f.ex.started, Clock::now());
  if (timeline_)
    for (auto& m : f.members)
      timeline_->span(m.name, "ALLGATHER", f.ex.started, Clock::now(), "{\"cap\":" + std::to_string(f.ex.cap) + "}");
  if (st.ok()) st = finishSparse(f);
  if (st.ok() && !f.local.ok() && !f.skipped) st = f.local;
  // Before the handles complete: the next step may enqueue these names.
  // Commit exactly when every rank applied every rank's selection (the same
  // verdict everywhere), even if writing this rank's outputs failed.
  local_->settle(f.members, std::move(f.acc), f.delivered);
  publishStats();
  for (auto& m : f.members) complete_(m, st);
  exchange_.release(f.ex);
}

Status SparsePipeline::finishSparse(InFlight& f) {
  const int P = comm_.size();
  std::vector<Request>& members = f.members;
  const size_t n = f.n;
  const std::string name = bucketName(members);
  stats_.dense_bytes += 4 * n;
  // Every rank holds the same received bytes, so every rank takes the same
  // verdict here: a malformed block fails the bucket on all ranks at once,
  // before anything is written.
  MGS_RETURN_IF_ERROR(exchange_.validate(f.ex, n, members.size(), name));
  counts_.resize(P);
  for (int i = 0; i < P; ++i) counts_[i] = f.ex.received(i).header();
  bool other_error = false;  // a failure that is not a non-finite value
  const std::string failed = failedRanks(counts_.data(), f.ex.cap, members, &other_error);
  if (!failed.empty()) {
    if (!other_error && propagateNonFinite()) {
      // Loss scaling: all outputs NaN on every rank, so the framework's
      // overflow check fires everywhere and the step is skipped; nothing
      // commits, so the residuals stay as they were.
      MGS_LOG_DEBUG("sparse allreduce of {}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", name, failed);
      f.skipped = true;
      return scatter_.writeNaNOutputs(members);
    }
    return failedVerdict("sparse allreduce of " + name, failed, other_error, f.local);
  }
  const auto t0 = Clock::now();
  f.delivered = true;  // past every verdict: the scatter below runs on every rank
  Status st;
  ResidentLocalStage* device = local_->resident();
  if (device && device->acceptsScatter(members)) {
    // Outputs on the device stage's GPU: the received blocks go there (P
    // blocks, not the bucket) and a kernel writes the outputs.
    std::vector<double> factors(members.size());
    for (size_t i = 0; i < members.size(); ++i) factors[i] = scatter_.outputFactor(members[i]);
    st = device->scatterBlocks(members, f.ex.recv.data(), P, f.ex.cap, factors);
    if (!st.ok()) st = Status(st.code(), "rank " + std::to_string(comm_.rank()) + ": " + st.message());
  } else {
    st = scatter_.scatterBlocks(members, n, f.ex, counts_.data());
  }
  if (timeline_)
    for (auto& m : members) timeline_->span(m.name, "SCATTER_ADD", t0, Clock::now());
  ++stats_.buckets;
  stats_.selected += f.count;
  stats_.target += f.k;
  stats_.bytes_sent += 8 * f.count;
  countPath(f.path, 1, 8 * f.count);
  return st;
}

Status SparsePipeline::exchangeDense(std::vector<Request>& members, size_t n, float* acc, const Status& local,
                                     int bad_member, bool* sent) {
  // acc = [gradient + residual (n) | one verdict slot per rank]: each rank
  // writes its own slot (0: fine, m + 1: non-finite values in member m, -1:
  // another local error) and zeros in the others, so the one allreduce that
  // sums the gradients also tells every rank every rank's verdict (small
  // integers: exact in float). A rank whose staging failed must still take part.
  const int P = comm_.size();
  float* verdict = acc + n;
  std::fill(verdict, verdict + P, 0.0f);
  if (!local.ok()) verdict[comm_.rank()] = bad_member >= 0 ? static_cast<float>(bad_member + 1) : -1.0f;
  auto t0 = Clock::now();
  stats_.dense_bytes += 4 * n;
  MGS_RETURN_IF_ERROR(comm_.allreduce(acc, n + P, MGS_FLOAT32, CommOp::kSum));
  online_.exchanged(OnlineCost::kAllreduce, 4.0 * (n + P), t0, Clock::now());
  if (timeline_)
    for (auto& m : members) timeline_->span(m.name, "ALLREDUCE_DENSE_BUCKET", t0, Clock::now());
  ++stats_.dense_buckets;
  stats_.bytes_sent += 4 * n;
  countPath(pathOf(members, LocalOutcome()), 1, 4 * n);  // the dense bucket's acc is host memory
  std::string failed;
  bool other_error = false;
  for (int r = 0; r < P; ++r) {
    const float v = verdict[r];
    if (v == 0.0f) continue;
    const size_t m = v > 0 ? static_cast<size_t>(v) - 1 : members.size();
    other_error |= m >= members.size();
    failed += std::string(failed.empty() ? "" : "; ") + "rank " + std::to_string(r) +
              (m < members.size() ? ": non-finite gradient in tensor '" + members[m].name + "'"
                                  : ": local error (see that rank's log)");
  }
  if (!failed.empty()) {
    if (!other_error && propagateNonFinite()) {
      MGS_LOG_DEBUG("dense bucket {}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", bucketName(members), failed);
      return scatter_.writeNaNOutputs(members);
    }
    return failedVerdict("dense allreduce of " + bucketName(members), failed, other_error, local);
  }
  *sent = true;  // on every rank: even if writing this rank's outputs fails below
  t0 = Clock::now();
  Status st = scatter_.unfuseDense(members, acc);
  if (timeline_)
    for (auto& m : members) timeline_->span(m.name, "UNFUSE", t0, Clock::now());
  return st;
}

std::string SparsePipeline::failedRanks(const uint64_t* codes, size_t cap, const std::vector<Request>& members,
                                        bool* other_error) const {
  std::string failed;
  for (int i = 0; i < comm_.size(); ++i) {
    const block::Header h = block::decodeHeader(codes[i], cap, members.size());
    if (h.kind == block::Header::kCount) continue;
    const bool numeric = h.bad_member >= 0 && h.cause == block::StagingCause::kNone;
    *other_error |= !numeric;
    std::string what;
    if (numeric)
      what = ": non-finite gradient in tensor '" + members[h.bad_member].name + "'";
    else if (h.bad_member >= 0)  // a staging code: the tensor and the cause, on every rank
      what = ": tensor '" + members[h.bad_member].name + "': " + block::stagingCauseText(h.cause);
    else
      what = ": local error (see that rank's log)";
    failed += std::string(failed.empty() ? "" : "; ") + "rank " + std::to_string(i) + what;
  }
  return failed;
}

Status SparsePipeline::failedVerdict(const std::string& what, const std::string& failed, bool other_error,
                                     const Status& local) {
  std::string msg = what + " failed: " + failed;
  if (!other_error) msg += " (MGS_NONFINITE=error: the step was not applied, residuals are unchanged)";
  if (!local.ok()) msg += "; on this rank: " + local.message();
  const Code code = !local.ok() ? local.code() : (other_error ? Code::kInternal : Code::kNumeric);
  return Status(code, msg);
}

}  // namespace mgs
