// The agreed-index exchange (ScaleCom's CLT-k idea, docs/architecture.md
// "Exchanges").
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
// ranks, so each phase has a communicator of its own (ExchangeContext::
// values_comm, names_comm) on which every rank starts it in bucket order
// (PhaseOrder); the broadcast itself starts at the bucket's negotiated place
// on the pipeline's communicator. The coordinator never waits for a phase on
// its own account: poll() and every blocking wait (the wait hook) move the
// phases on, so buckets' exchanges overlap each other, negotiation and
// backward. Buckets still finish in order.
//
// The accumulator is the local stage's scratch slab (local_stage.h): the
// residual changes only when the flags say every rank contributed. A NaN/Inf
// on any rank raises a flag, so every rank reads the same verdict in the same
// allreduce: under MGS_NONFINITE=propagate all outputs NaN and every residual
// as it was; under 'error' MGS_ERR_NUMERIC naming each bad rank and tensor.
#include <algorithm>

#include "common/check.h"
#include "common/logging.h"
#include "core/bucket_exchange.h"

namespace mgs {
namespace {

// Slots after the values: ranks that failed, and of those, failures other
// than a non-finite value. They give every rank the same verdict inside the
// allreduce the exchange does anyway.
constexpr size_t kAgreedFlags = 2;

class AgreedExchange : public BucketExchange {
 public:
  AgreedExchange(ExchangeContext& ctx, BucketStart& b) : BucketExchange(std::move(b.members)), ctx_(ctx), n_(b.n) {}

  void start(BucketStart& b) {
    const int me = ctx_.comm.rank();
    // The leader (the same on every rank); only it selects.
    leader_ = ctx_.blocks.agreedLeader(b.name);
    const bool select_here = me == leader_;
    const compress::Selector& sel = ctx_.selector(b.density);
    cap_ = std::max<size_t>(sel.maxCount(n_), 1);  // from n and the density: the same on every rank
    block_ = ctx_.blocks.takeBuffer(block::indexBytes(cap_));
    vals_ = ctx_.takeVals(cap_ + kAgreedFlags);
    LocalJob job;
    job.members = &members_;
    job.n = n_;
    job.select = select_here;
    job.selector = &sel;
    job.cap = cap_;
    job.block = select_here ? block_.data() : nullptr;  // non-leaders receive the leader's block
    job.index_block = true;
    job.agreed_values = vals_.data();
    job.zero_inputs = true;  // its scatter writes every output element
    job.step = ctx_.step();
    job.name = b.name.c_str();
    LocalOutcome out;
    ctx_.runLocal(job, b.t0, &out);
    k_ = compress::kForDensity(n_, b.density);
    local_ = out.status;
    path_ = ExchangeContext::pathOf(members_, out);
    acc_ = std::move(out.slab);
    bad_member_ = out.bad_member;
    outputs_zeroed_ = out.inputs_zeroed;
    // The leader's block was packed by the local stage (count or failure
    // code, sealed); the others receive into a buffer whose old seal must go.
    if (me != leader_) block::IndexBlock(block_.data(), cap_).clearSeal();
    phase_ = kIndex;
    phase_start_ = Clock::now();
    status_ = ctx_.blocks.startIndexBroadcast(block_, cap_, leader_, &op_);
    if (!status_.ok()) phase_ = kDone;
    if (!ctx_.phasesInFlight())  // no nonblocking collectives: every phase now, in order
      while (phase_ != kDone) step(/*wait=*/true);
  }

  bool queued() const override { return ctx_.phasesInFlight(); }
  bool phased() const override { return true; }
  bool ready() override { return phase_ == kDone; }

  void progress(PhaseOrder& order) override {
    // Values on values_comm, names on names_comm, each in bucket order.
    const void* values = &ctx_.values_comm;
    const void* names = &ctx_.names_comm;
    if (phase_ == kIndex && order.free(values)) step(false);
    if (phase_ == kIndex) {
      order.block(values);
      order.block(names);
      return;
    }
    if (phase_ == kValues && order.free(names)) step(false);
    if (phase_ == kValues) {
      order.block(names);
      return;
    }
    if (phase_ == kNames) step(false);
  }

  Status finish() override {
    const std::string name = bucketName(members_);
    const std::string what = "sparse allreduce of " + name + " (agreed exchange)";
    SparseStats& stats = ctx_.stats;
    Status st = status_;
    bool commit = false;
    if (reduced_) stats.dense_bytes += 4 * n_;
    if (!st.ok()) {
      if (flagged_)  // naming the failed ranks failed
        st = Status(st.code(), what + " failed and naming the failed ranks failed: " + st.message());
    } else if (!flagged_) {
      // Outputs: every rank holds the same sums, so the same outputs.
      const auto t0 = Clock::now();
      const uint32_t* idx = block::ConstIndexBlock(block_.data(), cap_).indices();
      ResidentLocalStage* device = ctx_.local->resident();
      if (device && device->acceptsScatter(members_)) {
        // Outputs on the device stage's GPU: the count indices and sums go
        // there (not the bucket) and a kernel writes every output element.
        st = device->scatterAgreed(members_, idx, vals_.data(), count_, ctx_.factors(members_));
        if (!st.ok()) st = Status(st.code(), "rank " + std::to_string(ctx_.comm.rank()) + ": " + st.message());
      } else {
        st = ctx_.scatter.scatterAgreed(members_, n_, idx, vals_.data(), count_, outputs_zeroed_);
      }
      if (ctx_.timeline)
        for (auto& m : members_) ctx_.timeline->span(m.name, "SCATTER", t0, Clock::now());
      ++stats.buckets;
      ++stats.agreed_buckets;
      stats.selected += count_;
      stats.target += k_;
      // Payload this rank puts on the wire: its values, and the indices if it leads.
      const bool lead = ctx_.comm.rank() == leader_;
      stats.bytes_sent += 4 * count_ + (lead ? 4 * count_ : 0);
      ctx_.countPath(path_, 1, 4 * count_ + (lead ? 4 * count_ : 0));
      commit = true;  // every rank's values are in the sum, whatever writing this rank's outputs did
    } else if (!other_error_ && ctx_.propagateNonFinite()) {
      // Loss scaling, as the allgather: every output NaN on every rank,
      // nothing commits.
      MGS_LOG_DEBUG("{}: non-finite gradients on {} rank(s){}; outputs set to NaN (MGS_NONFINITE=propagate)", what,
                    static_cast<int>(vals_[cap_]), local_.ok() ? "" : ", here: " + local_.message());
      st = ctx_.scatter.writeNaNOutputs(members_);
    } else {
      bool other_error = false;
      const std::string failed = ctx_.failedRanks(codes_.data(), 0, members_, &other_error);
      st = ExchangeContext::failedVerdict(what, failed, other_error, local_);
    }
    // A bucket some rank's flag stopped does not rotate its leader.
    if (!flagged_) ctx_.blocks.agreedApplied(name);
    ctx_.online.exchangeEnded(Clock::now());                // online re-planning: the step's span
    ctx_.local->settle(members_, std::move(acc_), commit);  // before the handles complete: the next step may start
    return st;
  }

  void release() override {
    ctx_.blocks.giveBuffer(std::move(block_));
    ctx_.giveVals(std::move(vals_));
  }

  // Leaked: a collective may still write into them.
  void abandon() override {
    (void)op_.release();
    new std::vector<char>(std::move(block_));
    new std::vector<float>(std::move(vals_));
    new std::vector<uint64_t>(std::move(codes_));
  }

 private:
  enum Phase { kIndex, kValues, kNames, kDone };

  // One phase, if its collective has completed (wait: wait for it).
  void step(bool wait) {
    if (phase_ == kDone) return;
    if (op_) {
      bool done = true;
      Status st = wait ? op_->wait() : op_->test(&done);
      if (!st.ok()) {
        status_ = st;
        phase_ = kDone;
        return;
      }
      if (!done) return;
      op_.reset();
    }
    const auto now = Clock::now();
    auto span = [&](const char* what, const std::string& args) {
      if (ctx_.timeline)
        for (auto& m : members_) ctx_.timeline->span(m.name, what, phase_start_, now, args);
      phase_start_ = now;
    };
    switch (phase_) {
      case kIndex:
        span("AGREED_BROADCAST", "{\"cap\":" + std::to_string(cap_) + ",\"leader\":" + std::to_string(leader_) + "}");
        indexArrived();
        break;
      case kValues:
        span("AGREED_ALLREDUCE", "{\"cap\":" + std::to_string(cap_) + "}");
        reduced_ = true;
        valuesArrived();
        break;
      case kNames:
        span("AGREED_FAILURE_NAMES", "");
        phase_ = kDone;
        break;
      default:
        break;
    }
  }

  void indexArrived() {
    status_ = ctx_.blocks.checkIndex(block_, cap_, leader_, n_, members_.size(), bucketName(members_));
    if (!status_.ok()) {  // the same bytes, so the same verdict, on every rank
      phase_ = kDone;
      return;
    }
    // A failure code: the leader's local part failed and selected nothing.
    // The allreduce still runs (with no values), because only its flags tell
    // every rank which others failed too.
    const block::Header h =
        block::decodeHeader(block::ConstIndexBlock(block_.data(), cap_).header(), cap_, members_.size());
    count_ = h.kind == block::Header::kCount ? h.count : 0;
    const uint32_t* idx = block::ConstIndexBlock(block_.data(), cap_).indices();
    float* vals = vals_.data();
    // Gather: the other ranks move their acc's values at the agreed indices
    // into the allreduce (their acc keeps the rest: the new residual). A rank
    // whose local part failed contributes zeros and raises its flag; a
    // non-finite value never enters the sum, so the flags alone decide.
    if (ctx_.comm.rank() != leader_ && local_.ok()) {
      const Status got = ctx_.local->extract(*acc_, idx, count_, vals);
      if (!got.ok()) {  // this rank's flag fails the bucket everywhere; nothing commits
        local_ = Status(got.code(), "rank " + std::to_string(ctx_.comm.rank()) + ": taking the agreed entries of " +
                                        bucketName(members_) + " out of its accumulator failed: " + got.message());
        bad_member_ = -1;
      }
    }
    if (!local_.ok()) std::fill(vals, vals + count_, 0.0f);
    std::fill(vals + count_, vals + cap_, 0.0f);  // padding
    // Flags: ranks that failed, and of those, failures that are not a
    // non-finite value (staging). Small integers: exact in float whatever the
    // summation order, so every rank reads the same verdict.
    vals[cap_] = local_.ok() ? 0.0f : 1.0f;
    vals[cap_ + 1] = local_.ok() || bad_member_ >= 0 ? 0.0f : 1.0f;
    Communicator& c = ctx_.values_comm ? *ctx_.values_comm : ctx_.comm;
    phase_ = kValues;
    status_ = c.startAllreduce(vals, cap_ + kAgreedFlags, MGS_FLOAT32, CommOp::kSum, &op_);
    if (!status_.ok()) phase_ = kDone;
  }

  void valuesArrived() {
    phase_ = kDone;
    if (vals_[cap_] == 0.0f) return;  // every rank contributed
    flagged_ = true;
    other_error_ = vals_[cap_ + 1] != 0.0f;
    if (!other_error_ && ctx_.propagateNonFinite()) return;  // NaN outputs, no names needed
    // The flags said how many ranks failed, not which: one allgather of each
    // rank's failure code names them all, the same text on every rank (as the
    // allgather's blocks do). It runs only on this failure path, on every rank
    // alike (all read the same flags); the steady state pays nothing for it.
    code_ = local_.ok() ? 0 : block::failureCode(bad_member_);
    phase_ = kNames;
    status_ = ctx_.startNames(&code_, &codes_, &op_);
    if (!status_.ok()) phase_ = kDone;
  }

  ExchangeContext& ctx_;
  const size_t n_;
  size_t k_ = 0, cap_ = 1, count_ = 0;
  int leader_ = 0;
  Status local_;
  BucketPath path_ = BucketPath::kHost;
  std::unique_ptr<LocalSlab> acc_;  // this step's residual, committed if every rank contributed
  Phase phase_ = kIndex;
  int bad_member_ = -1;
  bool reduced_ = false;         // the values' allreduce completed
  bool flagged_ = false;         // some rank's flag was raised
  bool other_error_ = false;     // ... for a failure that is not a non-finite value
  bool outputs_zeroed_ = false;  // the local stage zeroed the (in-place) outputs
  std::vector<char> block_;      // the leader's index block
  std::vector<float> vals_;      // [cap values | kAgreedFlags slots]
  uint64_t code_ = 0;            // this rank's failure code, and every rank's (kNames)
  std::vector<uint64_t> codes_;
  std::unique_ptr<PendingCollective> op_;  // the phase's collective
  Status status_;                          // a collective or the index check failed
  Clock::time_point phase_start_;
};

}  // namespace

std::unique_ptr<BucketExchange> startAgreedExchange(ExchangeContext& ctx, BucketStart& b) {
  auto ex = std::make_unique<AgreedExchange>(ctx, b);
  ex->start(b);
  return ex;
}

}  // namespace mgs
