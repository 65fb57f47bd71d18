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
// In flight (a backend with nonblocking collectives, i.e. MPI): the three
// collectives of a bucket -- index broadcast, values' allreduce, and on a
// failure only the allgather naming the failed ranks -- are each started when
// the one before has completed on this rank. Those moments differ between
// ranks, so each phase has a communicator of its own (SparsePipeline::
// setupAsync) on which every rank starts it in bucket order; the broadcast
// itself starts at the bucket's negotiated place on comm_. The coordinator
// never waits for a phase on its own account: poll() and every blocking wait
// (the wait hook) move the phases on, so buckets' exchanges overlap each
// other, negotiation and backward. Buckets still finish in order.
//
// The accumulator is the local stage's scratch slab, shared with the
// allgather (runBucket, local_stage.h): the residual changes only when the
// flags say every rank contributed. A NaN/Inf on any rank raises a flag, so
// every rank reads the same verdict in the same allreduce: under
// MGS_NONFINITE=propagate all outputs NaN and every residual as it was; under
// 'error' MGS_ERR_NUMERIC naming each bad rank and tensor.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/check.h"
#include "common/logging.h"
#include "core/sparse_pipeline.h"

namespace mgs {

std::vector<float> SparsePipeline::takeVals(size_t n) {
  std::vector<float> v;
  if (!vals_pool_.empty()) {
    v = std::move(vals_pool_.back());
    vals_pool_.pop_back();
  }
  v.resize(n);
  return v;
}

void SparsePipeline::startAgreed(std::vector<Request>& members, size_t n, size_t cap, int leader, size_t k,
                                 LocalOutcome& local_out, std::vector<char>&& block, std::vector<float>&& vals) {
  InFlight f;
  f.members = std::move(members);
  f.n = n;
  f.k = k;
  f.local = local_out.status;
  f.path = pathOf(f.members, local_out);
  f.acc = std::move(local_out.slab);
  Agreed& a = f.ag;
  a.leader = leader;
  a.cap = cap;
  a.bad_member = local_out.bad_member;
  a.outputs_zeroed = local_out.inputs_zeroed;
  a.block = std::move(block);
  a.vals = std::move(vals);
  // The leader's block was packed by the local stage (count or failure
  // code, sealed); the others receive into a buffer whose old seal must go.
  if (comm_.rank() != leader) block::IndexBlock(a.block.data(), cap).clearSeal();
  a.phase = Agreed::kIndex;
  a.phase_start = Clock::now();
  a.status = exchange_.startIndexBroadcast(a.block, cap, leader, &a.op);
  if (!a.status.ok()) a.phase = Agreed::kDone;
  if (!phasesInFlight()) {  // no nonblocking collectives: every phase now, in order
    while (f.ag.phase != Agreed::kDone) stepAgreed(f, /*wait=*/true);
    finishAgreed(f);
    return;
  }
  pushInFlight(std::move(f));
}

void SparsePipeline::pumpInFlight() {
  if (in_pump_ || !phasesInFlight()) return;
  in_pump_ = true;
  // A bucket's next phase starts only if it started for every earlier
  // bucket that needs it: the same order on every rank, per communicator.
  // Agreed: values (values_comm_), names (names_comm_); hierarchical:
  // leaders (leader_comm_), node broadcast (node_bcast_comm_), names.
  bool values_in_order = true, names_in_order = true, leaders_in_order = true, bcast_in_order = true;
  for (InFlight& f : inflight_) {
    if (f.hier()) {
      Hier& h = f.hr;
      // Leaving the node sum starts the leaders' allgather (leaders) or the
      // broadcast (the others); leaving the allgather starts the broadcast.
      if (h.phase == Hier::kNodeSum && leaders_in_order && bcast_in_order) stepHier(f, false);
      if (h.phase == Hier::kNodeSum) {
        leaders_in_order = bcast_in_order = names_in_order = false;
        continue;
      }
      if (h.phase == Hier::kLeaders && bcast_in_order) stepHier(f, false);
      if (h.phase == Hier::kLeaders) {
        bcast_in_order = names_in_order = false;
        continue;
      }
      if (h.phase == Hier::kNodeBcast && names_in_order) stepHier(f, false);
      if (h.phase == Hier::kNodeBcast) {
        names_in_order = false;
        continue;
      }
      if (h.phase == Hier::kNames) stepHier(f, false);
      continue;
    }
    if (!f.agreed()) continue;
    Agreed& a = f.ag;
    if (a.phase == Agreed::kIndex && values_in_order) stepAgreed(f, false);
    if (a.phase == Agreed::kIndex) {
      values_in_order = names_in_order = false;
      continue;
    }
    if (a.phase == Agreed::kValues && names_in_order) stepAgreed(f, false);
    if (a.phase == Agreed::kValues) {
      names_in_order = false;
      continue;
    }
    if (a.phase == Agreed::kNames) stepAgreed(f, false);
  }
  in_pump_ = false;
}

void SparsePipeline::waitPhasedFront() {
  auto pause = std::chrono::microseconds(5);
  while (true) {
    pumpInFlight();  // tests every phase's collective: MPI progresses them all
    if (inflight_.front().phasesDone()) return;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(100));
  }
}

void SparsePipeline::stepAgreed(InFlight& f, bool wait) {
  Agreed& a = f.ag;
  if (a.phase == Agreed::kDone) return;
  if (a.op) {
    bool done = true;
    Status st = wait ? a.op->wait() : a.op->test(&done);
    if (!st.ok()) {
      a.status = st;
      a.phase = Agreed::kDone;
      return;
    }
    if (!done) return;
    a.op.reset();
  }
  const auto now = Clock::now();
  auto span = [&](const char* what, const std::string& args) {
    if (timeline_)
      for (auto& m : f.members) timeline_->span(m.name, what, a.phase_start, now, args);
    a.phase_start = now;
  };
  switch (a.phase) {
    case Agreed::kIndex:
      span("AGREED_BROADCAST",
           "{\"cap\":" + std::to_string(a.cap) + ",\"leader\":" + std::to_string(a.leader) + "}");
      agreedIndexArrived(f);
      break;
    case Agreed::kValues:
      span("AGREED_ALLREDUCE", "{\"cap\":" + std::to_string(a.cap) + "}");
      a.reduced = true;
      agreedValuesArrived(f);
      break;
    case Agreed::kNames:
      span("AGREED_FAILURE_NAMES", "");
      a.phase = Agreed::kDone;
      break;
    default:
      break;
  }
}

void SparsePipeline::agreedIndexArrived(InFlight& f) {
  Agreed& a = f.ag;
  const size_t cap = a.cap;
  a.status = exchange_.checkIndex(a.block, cap, a.leader, f.n, f.members.size(), bucketName(f.members));
  if (!a.status.ok()) {  // the same bytes, so the same verdict, on every rank
    a.phase = Agreed::kDone;
    return;
  }
  // A failure code: the leader's local part failed and selected nothing. The
  // allreduce still runs (with no values), because only its flags tell every
  // rank which others failed too.
  const block::Header h = block::decodeHeader(block::ConstIndexBlock(a.block.data(), cap).header(), cap, f.members.size());
  a.count = h.kind == block::Header::kCount ? h.count : 0;
  const uint32_t* idx = block::ConstIndexBlock(a.block.data(), cap).indices();
  float* vals = a.vals.data();
  // Gather: the other ranks move their acc's values at the agreed indices
  // into the allreduce (their acc keeps the rest: the new residual). A rank
  // whose local part failed contributes zeros and raises its flag; a
  // non-finite value never enters the sum, so the flags alone decide.
  if (comm_.rank() != a.leader && f.local.ok()) local_->extract(*f.acc, idx, a.count, vals);
  if (!f.local.ok()) std::fill(vals, vals + a.count, 0.0f);
  std::fill(vals + a.count, vals + cap, 0.0f);  // padding
  // Flags: ranks that failed, and of those, failures that are not a
  // non-finite value (staging). Small integers: exact in float whatever the
  // summation order, so every rank reads the same verdict.
  vals[cap] = f.local.ok() ? 0.0f : 1.0f;
  vals[cap + 1] = f.local.ok() || a.bad_member >= 0 ? 0.0f : 1.0f;
  Communicator& c = values_comm_ ? *values_comm_ : comm_;
  a.phase = Agreed::kValues;
  a.status = c.startAllreduce(vals, cap + kAgreedFlags, MGS_FLOAT32, CommOp::kSum, &a.op);
  if (!a.status.ok()) a.phase = Agreed::kDone;
}

void SparsePipeline::agreedValuesArrived(InFlight& f) {
  Agreed& a = f.ag;
  a.phase = Agreed::kDone;
  if (a.vals[a.cap] == 0.0f) return;  // every rank contributed
  a.flagged = true;
  a.other_error = a.vals[a.cap + 1] != 0.0f;
  if (!a.other_error && propagateNonFinite()) return;  // NaN outputs, no names needed
  // The flags said how many ranks failed, not which: one allgather of each
  // rank's failure code names them all, the same text on every rank (as the
  // allgather's blocks do). It runs only on this failure path, on every rank
  // alike (all read the same flags); the steady state pays nothing for it.
  a.code = f.local.ok() ? 0 : block::failureCode(a.bad_member);
  a.phase = Agreed::kNames;
  a.status = startNames(&a.code, &a.codes, &a.op);
  if (!a.status.ok()) a.phase = Agreed::kDone;
}

Status SparsePipeline::startNames(const uint64_t* code, std::vector<uint64_t>* codes,
                                  std::unique_ptr<PendingCollective>* op) {
  codes->resize(static_cast<size_t>(comm_.size()));
  Communicator& c = names_comm_ ? *names_comm_ : comm_;
  return c.startAllgather(code, sizeof *code, codes->data(), op);
}

void SparsePipeline::finishAgreed(InFlight& f) {
  Agreed& a = f.ag;
  std::vector<Request>& members = f.members;
  const std::string name = bucketName(members);
  const std::string what = "sparse allreduce of " + name + " (agreed exchange)";
  Status st = a.status;
  bool commit = false;
  if (a.reduced) stats_.dense_bytes += 4 * f.n;
  if (!st.ok()) {
    if (a.flagged)  // naming the failed ranks failed
      st = Status(st.code(), what + " failed and naming the failed ranks failed: " + st.message());
  } else if (!a.flagged) {
    // Outputs: every rank holds the same sums, so the same outputs.
    const auto t0 = Clock::now();
    st = scatter_.scatterAgreed(members, f.n, block::ConstIndexBlock(a.block.data(), a.cap).indices(), a.vals.data(),
                                a.count, a.outputs_zeroed);
    if (timeline_)
      for (auto& m : members) timeline_->span(m.name, "SCATTER", t0, Clock::now());
    ++stats_.buckets;
    ++stats_.agreed_buckets;
    stats_.selected += a.count;
    stats_.target += f.k;
    // Payload this rank puts on the wire: its values, and the indices if it leads.
    stats_.bytes_sent += 4 * a.count + (comm_.rank() == a.leader ? 4 * a.count : 0);
    countPath(f.path, 1, 4 * a.count + (comm_.rank() == a.leader ? 4 * a.count : 0));
    commit = true;  // every rank's values are in the sum, whatever writing this rank's outputs did
  } else if (!a.other_error && propagateNonFinite()) {
    // Loss scaling, as the allgather's finishSparse: every output NaN on
    // every rank, nothing commits.
    MGS_LOG_DEBUG("{}: non-finite gradients on {} rank(s){}; outputs set to NaN (MGS_NONFINITE=propagate)", what,
                  static_cast<int>(a.vals[a.cap]), f.local.ok() ? "" : ", here: " + f.local.message());
    st = scatter_.writeNaNOutputs(members);
  } else {
    bool other_error = false;
    const std::string failed = failedRanks(a.codes.data(), 0, members, &other_error);
    st = failedVerdict(what, failed, other_error, f.local);
  }
  // A bucket some rank's flag stopped does not rotate its leader.
  if (!a.flagged) exchange_.agreedApplied(name);
  online_.exchangeEnded(Clock::now());              // online re-planning: the step's span
  local_->settle(members, std::move(f.acc), commit);  // before the handles complete: the next step may start
  publishStats();
  for (auto& m : members) complete_(m, st);
  exchange_.giveBuffer(std::move(a.block));
  vals_pool_.push_back(std::move(a.vals));
}

}  // namespace mgs
