// The dense fallback (docs/architecture.md "Exchanges"): where sparse cannot
// pay (density * P >= 1 under MGS_DENSE_FALLBACK, or the plan says so) the
// bucket's gradient + residual is summed by one allreduce. On a backend with
// nonblocking collectives (MPI) the allreduce starts at the bucket's
// negotiated place and stays in flight like the allgather's blocks: it is
// moved on by every poll and blocking wait of the coordinator, so dense
// buckets overlap each other, negotiation and backward, and finish in order.
// Elsewhere it runs at once. The residual becomes zero exactly when every
// rank's acc went into the sum.
#include <algorithm>

#include "common/check.h"
#include "common/logging.h"
#include "core/bucket_exchange.h"

namespace mgs {
namespace {

class DenseExchange : public BucketExchange {
 public:
  DenseExchange(ExchangeContext& ctx, BucketStart& b) : BucketExchange(std::move(b.members)), ctx_(ctx), n_(b.n) {}

  // acc = [gradient + residual (n) | one verdict slot per rank]: each rank
  // writes its own slot (0: fine, m + 1: non-finite values in member m, -1:
  // another local error) and zeros in the others, so the one allreduce that
  // sums the gradients also tells every rank every rank's verdict (small
  // integers: exact in float). A rank whose staging failed must still take part.
  void start(BucketStart& b) {
    const int P = ctx_.comm.size();
    acc_ = ctx_.takeVals(n_ + P);
    LocalJob job;
    job.members = &members_;
    job.n = n_;
    job.dense_acc = acc_.data();
    LocalOutcome out;
    ctx_.runLocal(job, b.t0, &out);
    local_ = out.status;
    float* verdict = acc_.data() + n_;
    std::fill(verdict, verdict + P, 0.0f);
    if (!local_.ok()) verdict[ctx_.comm.rank()] = out.bad_member >= 0 ? static_cast<float>(out.bad_member + 1) : -1.0f;
    ctx_.stats.dense_bytes += 4 * n_;
    started_ = Clock::now();
    status_ = ctx_.comm.startAllreduce(acc_.data(), n_ + P, MGS_FLOAT32, CommOp::kSum, &op_);
    if (!status_.ok() || !ctx_.phasesInFlight()) step(/*wait=*/true);
  }

  bool queued() const override { return ctx_.phasesInFlight(); }
  bool phased() const override { return true; }
  void progress(PhaseOrder&) override { step(false); }  // one collective, started in bucket order at its place
  bool ready() override {
    step(false);
    return done_;
  }

  Status finish() override {
    step(/*wait=*/true);
    Status st = status_.ok() ? verdictAndUnfuse() : status_;
    if (sent_) ctx_.local->zeroResidual(members_);  // everything was delivered, on every rank
    return st;
  }

  void release() override { ctx_.giveVals(std::move(acc_)); }

  // Leaked: the allreduce may still write into it.
  void abandon() override {
    (void)op_.release();
    new std::vector<float>(std::move(acc_));
  }

 private:
  // Tests (or waits for) the allreduce; once it completed, its time goes to
  // the online cost model and the timeline.
  void step(bool wait) {
    if (done_) return;
    if (op_) {
      bool done = true;
      Status st = wait ? op_->wait() : op_->test(&done);
      if (st.ok() && !done) return;
      if (!st.ok()) status_ = st;
      op_.reset();
    }
    done_ = true;
    if (!status_.ok()) return;
    const auto end = Clock::now();
    const int P = ctx_.comm.size();
    ctx_.online.exchanged(OnlineCost::kAllreduce, 4.0 * double(n_ + size_t(P)), started_, end);
    if (ctx_.timeline)
      for (auto& m : members_) ctx_.timeline->span(m.name, "ALLREDUCE_DENSE_BUCKET", started_, end);
  }

  Status verdictAndUnfuse() {
    const int P = ctx_.comm.size();
    std::vector<Request>& members = members_;
    const float* verdict = acc_.data() + n_;
    ++ctx_.stats.dense_buckets;
    ctx_.stats.bytes_sent += 4 * n_;
    ctx_.countPath(ExchangeContext::pathOf(members, LocalOutcome()), 1, 4 * n_);  // the dense acc is host memory
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
      if (!other_error && ctx_.propagateNonFinite()) {
        MGS_LOG_DEBUG("dense bucket {}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", bucketName(members), failed);
        return ctx_.scatter.writeNaNOutputs(members);
      }
      return ExchangeContext::failedVerdict("dense allreduce of " + bucketName(members), failed, other_error, local_);
    }
    sent_ = true;  // on every rank: even if writing this rank's outputs fails below
    const auto t0 = Clock::now();
    Status st = ctx_.scatter.unfuseDense(members, acc_.data());
    if (ctx_.timeline)
      for (auto& m : members) ctx_.timeline->span(m.name, "UNFUSE", t0, Clock::now());
    return st;
  }

  ExchangeContext& ctx_;
  const size_t n_;
  std::vector<float> acc_;  // [gradient + residual | verdict slots], summed in place
  std::unique_ptr<PendingCollective> op_;
  Clock::time_point started_;
  Status local_;   // this rank's local stage
  Status status_;  // the allreduce
  bool done_ = false;
  bool sent_ = false;  // every rank's acc went into the sum: the residual is zero
};

}  // namespace

std::unique_ptr<BucketExchange> startDenseExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<DenseExchange>(ctx, b);
  ex->start(b);
  return ex;
}

}  // namespace mgs
