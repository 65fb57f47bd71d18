// The dense fallback (docs/architecture.md "Exchanges"): where sparse cannot
// pay (density * P >= 1 under MGS_DENSE_FALLBACK, or the plan says so) the
// bucket's gradient + residual is summed by one allreduce, at once (not
// queued). The residual becomes zero exactly when every rank's acc went
// into the sum.
#include <algorithm>

#include "common/check.h"
#include "common/logging.h"
#include "core/bucket_exchange.h"

namespace mgs {
namespace {

class DenseExchange : public BucketExchange {
 public:
  DenseExchange(ExchangeContext& ctx, BucketStart& b) : BucketExchange(std::move(b.members)), ctx_(ctx), n_(b.n) {}

  void start(BucketStart& b) {
    const int P = ctx_.comm.size();
    LocalJob job;
    job.members = &members_;
    job.n = n_;
    job.dense_acc = ctx_.scatter.denseBuffer(n_ + P);  // + one verdict slot per rank
    LocalOutcome out;
    ctx_.runLocal(job, b.t0, &out);
    status_ = exchange(job.dense_acc, out.status, out.bad_member);
  }

  bool queued() const override { return false; }
  bool ready() override { return true; }

  Status finish() override {
    if (sent_) ctx_.local->zeroResidual(members_);  // everything was delivered, on every rank
    return status_;
  }

 private:
  // acc = [gradient + residual (n) | one verdict slot per rank]: each rank
  // writes its own slot (0: fine, m + 1: non-finite values in member m, -1:
  // another local error) and zeros in the others, so the one allreduce that
  // sums the gradients also tells every rank every rank's verdict (small
  // integers: exact in float). A rank whose staging failed must still take part.
  Status exchange(float* acc, const Status& local, int bad_member) {
    const int P = ctx_.comm.size();
    const size_t n = n_;
    std::vector<Request>& members = members_;
    float* verdict = acc + n;
    std::fill(verdict, verdict + P, 0.0f);
    if (!local.ok()) verdict[ctx_.comm.rank()] = bad_member >= 0 ? static_cast<float>(bad_member + 1) : -1.0f;
    auto t0 = Clock::now();
    ctx_.stats.dense_bytes += 4 * n;
    MGS_RETURN_IF_ERROR(ctx_.comm.allreduce(acc, n + P, MGS_FLOAT32, CommOp::kSum));
    ctx_.online.exchanged(OnlineCost::kAllreduce, 4.0 * (n + P), t0, Clock::now());
    if (ctx_.timeline)
      for (auto& m : members) ctx_.timeline->span(m.name, "ALLREDUCE_DENSE_BUCKET", t0, Clock::now());
    ++ctx_.stats.dense_buckets;
    ctx_.stats.bytes_sent += 4 * n;
    ctx_.countPath(ExchangeContext::pathOf(members, LocalOutcome()), 1, 4 * n);  // the dense acc is host memory
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
      return ExchangeContext::failedVerdict("dense allreduce of " + bucketName(members), failed, other_error, local);
    }
    sent_ = true;  // on every rank: even if writing this rank's outputs fails below
    t0 = Clock::now();
    Status st = ctx_.scatter.unfuseDense(members, acc);
    if (ctx_.timeline)
      for (auto& m : members) ctx_.timeline->span(m.name, "UNFUSE", t0, Clock::now());
    return st;
  }

  ExchangeContext& ctx_;
  const size_t n_;
  bool sent_ = false;  // every rank's acc went into the sum: the residual is zero
  Status status_;
};

}  // namespace

std::unique_ptr<BucketExchange> startDenseExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<DenseExchange>(ctx, b);
  ex->start(b);
  return ex;
}

}  // namespace mgs
