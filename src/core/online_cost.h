// Online re-planning (issue 14, item 5): in steady state, re-measure the cost
// model's terms from the exchanges the job already does, and decide, the same
// way on every rank, when the merge plan no longer predicts the step.
//
// Per rank, between two step boundaries, the sparse pipeline reports
//   - every sparse allgather and dense allreduce it finished: bytes, start, end;
//     the time charged is the call's *service* time, end - max(start, end of
//     the previous exchange), because exchanges in flight are served one after
//     the other and a plain end - start would charge bucket i the wait for i-1;
//   - every selection: elements and seconds;
//   - the step's span: first gradient enqueued -> last exchange finished,
//     which the plan predicts as predicted_s minus the first gradient's gap;
//   - when each of the plan's buckets was declared ready (the negotiation
//     round that found its last gradient enqueued on every rank) and when it
//     finished (outputs written), from the same first gradient, against the
//     plan's predicted round and end of its exchange.
// Whose first gradient: the ranks do not start backward together (on shared
// cores one rank started 180 ms before the last), and the first to start
// waits at the first round for the others, which the model, whose clock
// runs at the pace of the slowest rank (the profile's), does not predict.
// So every time is measured from the step's first declaration (the round
// that declared its first sparse gradient: one event on every rank), and
// the smallest lead of any rank's first gradient over it is added back: the
// span of the rank that started last. With more than kMaxLeadRanks ranks
// the mean lead is added (each rank's own first gradient).
// At a step boundary each rank packs these into a fixed vector of int64
// (sufficient statistics of a least-squares fit of measured against
// predicted time, in fixed units, then each plan bucket's end, declared time
// and whether it finished, then its lead: as a sum and in its own slot;
// every rank runs the same plan, so the same length) and
// the pipeline SUM-allreduces it: integer
// sums are exact and independent of the reduction order, so every rank holds
// the same bits and takes the same decision without a second message.
//
// Decision (onReduced): the ranks' mean span against the plan's prediction;
// more than `tolerance` off for `strikes` consecutive steps, and at least
// `cooldown` steps since the last plan -> re-plan. A re-plan that does not
// bring the step back within tolerance doubles the cool-down (up to 16x), so a
// model that cannot describe this job (the planner's pipeline model is not
// the runtime's) costs a re-plan now and then, not every few steps; `strikes`
// steps in a row within tolerance reset the cool-down.
//
// Refit (refit): the calibrated model plus a correction line a + b*bytes per
// communication term, least squares over the window's calls (an intercept
// only when the sizes hardly vary), and a factor on the selection time. The
// result depends only on the reduced sums, so it is identical on every rank
// (runBucket's dense-or-sparse choice reads it on every rank). An allgather
// that started while the exchange before it was still running is compared
// with what the plan charges it there: its time less the in-flight overlap.
//
// Threading: owned by the sparse pipeline, used on the coordinator thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "plan/cost_model.h"

namespace mgs {

class OnlineCost {
 public:
  using Clock = std::chrono::steady_clock;
  enum Term { kAllgather = 0, kAllreduce = 1, kSelection = 2, kTerms = 3 };
  // Per term: calls, sum x, sum x^2, sum y, sum x*y, sum yhat, sum x*yhat.
  static constexpr size_t kTermFields = 7;
  // Span sum (us), spans counted, then the terms.
  static constexpr size_t kWireLength = 2 + kTermFields * kTerms;
  // Then per plan bucket: end sum, ready sum, ranks that finished it.
  static constexpr size_t kBucketFields = 3;
  // Then the sum of the ranks' leads, and one slot per rank (its lead + 1
  // unit, 0: it did not start the step) up to this many ranks.
  static constexpr int kMaxLeadRanks = 256;

  struct Options {
    double tolerance = 0.15;  // MGS_REPLAN_TOLERANCE; 0 disables
    int strikes = 3;          // consecutive steps off before re-planning
    int cooldown = 10;        // steps after a plan before the next (doubles on failure)
    int window = 8;           // steps of measurements the refit uses
    double cycle_s = 0.001;   // MGS_CYCLE_TIME_MS: an allreduce started within it of the last end ran back to back
  };

  struct Decision {
    bool checked = false;  // a step was compared (a plan and a prediction exist)
    bool replan = false;
    double measured_s = 0, predicted_s = 0;  // mean span over ranks; the plan's span
    int steps_off = 0;                       // consecutive steps beyond tolerance
  };

  OnlineCost() = default;
  explicit OnlineCost(Options o) : opt_(o) {}
  bool enabled() const { return opt_.tolerance > 0; }
  const Options& options() const { return opt_; }

  // The calibrated model: predictions and refits are relative to it.
  void setBase(const plan::CostModel& base) {
    base_ = base;
    have_base_ = true;
  }
  bool haveBase() const { return have_base_; }
  // This rank and the job's size: the wire's lead slots (1 and 0 until set).
  void setRanks(int size, int rank) {
    ranks_ = std::max(1, size);
    rank_ = rank;
  }
  // What pack() writes, and onReduced() takes, with the plan in force.
  size_t wireLength() const {
    return kWireLength + kBucketFields * buckets_.size() + 1 + (ranks_ <= kMaxLeadRanks ? ranks_ : 0);
  }
  const plan::CostModel& base() const { return base_; }
  // A plan took effect at this step boundary; its predicted span (first
  // gradient -> last exchange end) and each bucket's predicted exchange end
  // and ready time (the round that declares it) on the same clock (plan order;
  // negative: not known; `predicted_ready_s` may be empty). Clears the
  // window, the strikes and the per-bucket figures.
  void planned(double predicted_span_s, const std::vector<double>& predicted_ends_s = {},
               const std::vector<double>& predicted_ready_s = {});
  bool havePrediction() const { return predicted_span_s_ > 0; }

  // Per bucket of the plan that runs, over its compared steps: the predicted
  // end and ready time and the measured ones (mean over ranks; the last step
  // and the sum). Ready: declared ready on every rank by a negotiation round;
  // end: its outputs written.
  struct BucketFigures {
    double predicted_end_s = -1, predicted_ready_s = -1;  // negative: the plan did not say
    double last_measured_end_s = 0, last_measured_ready_s = 0;
    double measured_end_sum_s = 0, measured_ready_sum_s = 0;
    uint64_t checks = 0;  // compared steps in which every rank finished it
  };
  const std::vector<BucketFigures>& buckets() const { return buckets_; }
  // Where this rank's buckets of the last packed step ended (empty entries:
  // not finished in that step), for the timeline.
  const std::vector<Clock::time_point>& lastBucketEnds() const { return packed_bucket_end_; }

  // Per-rank measurements (coordinator thread).
  // The first gradient of the schedule's step `step`, declared ready on
  // every rank at `declared` (default: at once).
  void stepStarted(Clock::time_point first_enqueue, uint64_t step = 0, Clock::time_point declared = {});
  void exchanged(Term term, double bytes, Clock::time_point start, Clock::time_point end);
  void selected(int64_t elements, double seconds);
  // Bucket `index` of the plan (plan order) finished, its outputs written at
  // `end`; its last gradient was declared ready at `ready`. `step` is the
  // schedule's step it ran in: a bucket of an earlier step than the one
  // being measured is not counted.
  void bucketFinished(int index, uint64_t step, Clock::time_point ready, Clock::time_point end);
  // An exchange without a term of its own (the agreed-index exchange): it
  // only ends the step's span; its cost is not refitted.
  void exchangeEnded(Clock::time_point end) {
    if (enabled() && end > step_end_) step_end_ = end;
  }

  // This rank's measurements since the last boundary, as int64 sums
  // (kWireLength, then per plan bucket its end and ready time in kTimeUnit
  // and 1, or 0, 0 and 0 when it did not finish in the step, then the lead
  // fields; wireLength() in all); resets them.
  void pack(std::vector<int64_t>* wire);
  // The span the last check compared, on this rank's clock (from where the
  // rank that started last had its first gradient, after onReduced: see
  // above; before it, this rank's own), to its last exchange end; false if
  // that step had none.
  bool lastSpan(Clock::time_point* start, Clock::time_point* end) const {
    *start = packed_first_;
    *end = packed_end_;
    return packed_span_;
  }
  // A boundary without a check (no plan yet, warm-up): forget the step.
  void discardStep();
  // After the SUM-allreduce of every rank's pack(): add to the window and decide.
  Decision onReduced(const std::vector<int64_t>& sums);
  // The base model corrected by the window's measurements.
  plan::CostModel refit() const;
  // Mean seconds of the per-step check's allreduce (reported when re-planning).
  void reduceCost(double seconds) {
    reduce_s_ += seconds;
    ++reduces_;
  }
  double meanReduceSeconds() const { return reduces_ ? reduce_s_ / reduces_ : 0; }

  // Units of the wire (public for tests): comm bytes / kByteUnit, elements /
  // kElementUnit, seconds / kTimeUnit, rounded to nearest.
  static constexpr double kByteUnit = 256, kElementUnit = 1024, kTimeUnit = 1e-6;
  // Correction of one communication model by the line a + b*bytes fitted to
  // (bytes, measured - predicted); falls back to an intercept only, then to a
  // factor, so that the result is never negative. Exposed for tests.
  static plan::CommModel correct(const plan::CommModel& m, const int64_t* term_sums);

 private:
  void add(Term t, double x, double y, double yhat);

  Options opt_;
  plan::CostModel base_;
  bool have_base_ = false;
  double predicted_span_s_ = 0;
  std::vector<BucketFigures> buckets_;
  // This rank, since the last boundary.
  std::vector<double> local_ = std::vector<double>(kWireLength, 0.0);
  bool started_ = false;
  uint64_t step_ = 0;
  Clock::time_point first_{}, declared_{}, last_end_{}, step_end_{};
  int ranks_ = 1, rank_ = 0;
  std::vector<Clock::time_point> bucket_end_;    // per plan bucket; {}: not finished this step
  std::vector<Clock::time_point> bucket_ready_;  // per plan bucket: when it was declared ready
  bool packed_span_ = false;
  Clock::time_point packed_first_{}, packed_declared_{}, packed_end_{};
  std::vector<Clock::time_point> packed_bucket_end_;
  // Reduced, identical on every rank.
  std::vector<std::vector<int64_t>> window_;
  int steps_since_plan_ = 0, strikes_ = 0, good_ = 0, failures_ = 0;
  bool fixed_since_plan_ = false;
  double reduce_s_ = 0;
  int64_t reduces_ = 0;
};

}  // namespace mgs
