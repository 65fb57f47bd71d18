// The fixed-block allgather (docs/architecture.md "Exchanges"): every rank
// allgathers one block of the same size (core/sparse_block.h); cap is the
// selector's bound (k, or the band's top), so padding costs at most the
// band width and the count exchange round trip disappears. A rank whose
// local part failed sent a failure code instead of a count (the local stage
// packed it), so every rank fails the bucket together instead of waiting.
// The exchange runs while the coordinator goes on (the next bucket's
// selection, negotiation); the pipeline finishes it in order.
#include <algorithm>

#include "common/check.h"
#include "common/logging.h"
#include "core/bucket_exchange.h"

namespace mgs {
namespace {

class AllgatherExchange : public BucketExchange {
 public:
  AllgatherExchange(ExchangeContext& ctx, BucketStart& b) : BucketExchange(std::move(b.members)), ctx_(ctx), n_(b.n) {}

  // Runs the local stage into a pooled block and starts the allgather.
  void start(BucketStart& b) {
    const compress::Selector& sel = ctx_.selector(b.density);
    // cap depends only on n and the density, so every rank sends blocks of
    // the same size, whatever its local verdict.
    ex_.cap = std::max<size_t>(sel.maxCount(n_), 1);
    ex_.send = ctx_.blocks.takeBuffer(block::allgatherBytes(ex_.cap));
    LocalJob job;
    job.members = &members_;
    job.n = n_;
    job.select = true;
    job.selector = &sel;
    job.cap = ex_.cap;
    job.block = ex_.send.data();
    job.step = ctx_.step();
    job.name = b.name.c_str();
    LocalOutcome out;
    ctx_.runLocal(job, b.t0, &out);
    k_ = compress::kForDensity(n_, b.density);
    count_ = out.count;
    local_ = out.status;
    path_ = ExchangeContext::pathOf(members_, out);
    acc_ = std::move(out.slab);
    ctx_.blocks.start(ex_);
  }

  bool ready() override { return ctx_.blocks.ready(ex_); }

  Status finish() override {
    Status st = ctx_.blocks.finish(ex_);
    ctx_.online.exchanged(OnlineCost::kAllgather, double(ex_.blockBytes()) * ctx_.comm.size(), ex_.started,
                          Clock::now());
    if (ctx_.timeline)
      for (auto& m : members_)
        ctx_.timeline->span(m.name, "ALLGATHER", ex_.started, Clock::now(),
                            "{\"cap\":" + std::to_string(ex_.cap) + "}");
    if (st.ok()) st = verdictAndScatter();
    if (st.ok() && !local_.ok() && !skipped_) st = local_;
    // Commit exactly when every rank applied every rank's selection (the
    // same verdict everywhere), even if writing this rank's outputs failed.
    ctx_.local->settle(members_, std::move(acc_), delivered_);
    return st;
  }

  void release() override { ctx_.blocks.release(ex_); }
  void abandon() override { BlockExchange::abandon(ex_); }

 private:
  Status verdictAndScatter() {
    const int P = ctx_.comm.size();
    const std::string name = bucketName(members_);
    ctx_.stats.dense_bytes += 4 * n_;
    // Every rank holds the same received bytes, so every rank takes the same
    // verdict here: a malformed block fails the bucket on all ranks at once,
    // before anything is written.
    MGS_RETURN_IF_ERROR(ctx_.blocks.validate(ex_, n_, members_.size(), name));
    std::vector<uint64_t>& counts = ctx_.counts;
    counts.resize(P);
    for (int i = 0; i < P; ++i) counts[i] = ex_.received(i).header();
    bool other_error = false;  // a failure that is not a non-finite value
    const std::string failed = ctx_.failedRanks(counts.data(), ex_.cap, members_, &other_error);
    if (!failed.empty()) {
      if (!other_error && ctx_.propagateNonFinite()) {
        // Loss scaling: all outputs NaN on every rank, so the framework's
        // overflow check fires everywhere and the step is skipped; nothing
        // commits, so the residuals stay as they were.
        MGS_LOG_DEBUG("sparse allreduce of {}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", name, failed);
        skipped_ = true;
        return ctx_.scatter.writeNaNOutputs(members_);
      }
      return ExchangeContext::failedVerdict("sparse allreduce of " + name, failed, other_error, local_);
    }
    const auto t0 = Clock::now();
    delivered_ = true;  // past every verdict: the scatter below runs on every rank
    Status st;
    ResidentLocalStage* device = ctx_.local->resident();
    if (device && device->acceptsScatter(members_)) {
      // Outputs on the device stage's GPU: the received blocks go there (P
      // blocks, not the bucket) and a kernel writes the outputs.
      st = device->scatterBlocks(members_, ex_.recv.data(), P, ex_.cap, ctx_.factors(members_));
      if (!st.ok()) st = Status(st.code(), "rank " + std::to_string(ctx_.comm.rank()) + ": " + st.message());
    } else {
      st = ctx_.scatter.scatterBlocks(members_, n_, ex_, counts.data());
    }
    if (ctx_.timeline)
      for (auto& m : members_) ctx_.timeline->span(m.name, "SCATTER_ADD", t0, Clock::now());
    ++ctx_.stats.buckets;
    ctx_.stats.selected += count_;
    ctx_.stats.target += k_;
    ctx_.stats.bytes_sent += 8 * count_;
    ctx_.countPath(path_, 1, 8 * count_);
    return st;
  }

  ExchangeContext& ctx_;
  const size_t n_;
  size_t count_ = 0, k_ = 0;
  Status local_;
  BucketPath path_ = BucketPath::kHost;  // where its gradients were fused and selected
  bool skipped_ = false;                 // a non-finite step under MGS_NONFINITE=propagate
  bool delivered_ = false;               // every rank scattered every rank's selection
  std::unique_ptr<LocalSlab> acc_;       // this step's residual, committed on success
  BlockExchange::Allgather ex_;
};

}  // namespace

std::unique_ptr<BucketExchange> startAllgatherExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<AllgatherExchange>(ctx, b);
  ex->start(b);
  return ex;
}

}  // namespace mgs
