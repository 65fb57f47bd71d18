// The re-planner of the sparse pipeline (docs/architecture.md "Sparse
// pipeline stages"): which merge plan the schedule (bucket_schedule.h) runs,
// and when it changes. The schedule owns it and calls down into it; it
// calls nothing back: the schedule passes in what it saw (names, enqueue
// times, step boundaries) and gets back what to do (a plan to apply, the
// plan to drop).
//
// Everything here runs on the coordinator thread at step boundaries the
// schedule found in the negotiated order, which is identical on every rank;
// so the moment of (re)planning is the same everywhere without extra
// messages. Only the plan itself (computed on rank 0 from rank 0's recorded
// gradient timings) and the trials' verdict are broadcast.
//
// Profile and plan: the first MGS_PROFILE_STEPS steps run layer-wise while
// rank 0 records when each gradient was enqueued; then the planner runs on
// rank 0 with the job's cost model (job_cost_model.h) and the plan is
// broadcast. A tensor name the plan does not know drops the plan and starts
// a new profile. With MGS_REPLAN_TOLERANCE > 0, every step boundary checks
// the plan's predicted step against the measured one (online_cost.h); a
// re-plan uses the layer-wise profile's timings (see record()), rescaled to
// the backward the running plan measured, and the refitted cost model, with
// no new profile.
//
// Trials (MGS_PLAN_TRIAL_STEPS, 'mgs' planner): the first plan after a
// profile is chosen by measurement, because the cost model can misjudge
// plans that it prices alike (bench/NOTES.md: a 3-bucket DP plan 6 %
// slower than a 6-bucket uniform cut the model priced 9 % dearer). Rank 0
// sends the DP plan and uniform cuts at 1, 2, 4 and 8 buckets' worth of bytes
// (duplicates dropped); every rank runs each for MGS_PLAN_TRIAL_STEPS steps,
// switching at the same step boundaries; rank 0 times each step between
// boundaries (the first under each candidate left out) and broadcasts which
// was fastest (plan_trials.h), which every rank then keeps. An online
// re-plan whose plan differs from the running one goes on trial the same
// way against it (the running plan first, so it stays unless beaten).
//
// MGS_PLAN_FILE (plan/plan_file.h, replanner_plan_file.cc): a job that finds
// the file runs its plan from the first step, with the file's exchange per
// bucket, and never profiles, tries or re-plans (nothing timed decides
// anything); a job that does not find it plans as above and rank 0 writes
// every plan it settles on there. Rank 0 reads the file and broadcasts it,
// so every rank takes the same branch and the same plan.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/host_load.h"
#include "core/job_cost_model.h"
#include "core/plan_trials.h"
#include "core/request.h"
#include "core/sparse_stats.h"
#include "core/timeline.h"
#include "plan/cost_model.h"
#include "plan/plan.h"

namespace mgs {

// A re-plan's backward scale (Replanner::checkPlan). The running plan was
// priced with `backward_s` of backward (the profile's, times `scale`) and
// predicted `predicted_s`, whose tail after backward is predicted_s -
// backward_s (at least 0); it measured `measured_s`. The new scale makes
// that backward, with the same tail, add up to the measured span: backward
// times new/old = measured - tail, at least a tenth of backward_s, and the
// scale stays within [0.05, 20]. Unchanged when backward_s or predicted_s is
// not positive.
double rescaleBackward(double scale, double backward_s, double predicted_s, double measured_s);

// A gradient the runtime keeps dense (sparse-eligible, below
// MGS_MIN_SPARSE_ELEMENTS) as rank 0 saw it while profiling.
struct ProfiledDense {
  std::string name;
  int64_t elements = 0;
  Clock::time_point enqueued;
};
using ProfiledStep = std::vector<std::pair<std::string, Clock::time_point>>;

// The profile's dense gradients on a plan's backward clock, for the
// coordinator model (plan/coordinator.h). A dense gradient enqueued in
// profiled step s (s >= max(first, 1): after step s-1's last sparse
// gradient, at or before step s's last) lies between the two sparse
// gradients enqueued around it; its ready time is the same fraction of the
// way between their ready times on `layers`' clock (the cumulative
// backward_s after the plan's own adjustments: busy cores, a re-plan's
// rescale). Before step s's first sparse gradient: that one's ready time
// less the measured lead, at least 0. Averaged over the steps, sorted by
// ready time. Names that are not in `layers` are skipped.
std::vector<plan::DenseTensor> denseOnPlanClock(const std::vector<ProfiledStep>& profile, size_t first,
                                                const std::vector<ProfiledDense>& dense,
                                                const std::vector<plan::LayerInfo>& layers);

class Replanner {
 public:
  // A plan as rank 0 broadcasts it.
  struct PlanChoice {
    std::vector<std::vector<std::string>> groups;  // members in plan order
    double predicted_span = 0;                     // first gradient -> last exchange end
    // Each group's predicted exchange end and ready time (the round that
    // declares its last gradient ready on every rank) on the same clock (the
    // plan's timeline, plan/plan.h planTimeline); empty: not known (a plan file).
    std::vector<double> predicted_ends, predicted_ready;
    std::string label;  // for rank 0's log
  };
  // What the schedule knows at a step boundary (identical on every rank).
  struct Boundary {
    uint64_t step = 0;        // the step that begins
    bool have_plan = false;   // a plan is in force
    bool plan_stale = false;  // a sparse tensor the plan does not know was submitted
    // Every sparse tensor's elements, by name.
    const std::unordered_map<std::string, int64_t>* elements = nullptr;
  };
  // What the schedule does at that boundary, in this order.
  struct Verdict {
    bool drop = false;                // drop the plan in force (run layer-wise)
    std::optional<PlanChoice> apply;  // then run this plan
  };
  // A plan loaded from MGS_PLAN_FILE, with each bucket's exchange and each
  // tensor's elements (the schedule refuses tensors the plan does not have).
  struct Pinned {
    PlanChoice plan;
    std::vector<plan::Exchange> exchange;
    std::unordered_map<std::string, int64_t> elements;
  };

  // `config`, `cost` and `stats` outlive the re-planner.
  Replanner(Communicator& comm, const Config& config, JobCostModel& cost, SparseStats& stats)
      : comm_(comm),
        config_(config),
        cost_(cost),
        stats_(stats),
        coordinator_model_(config.plan_model == "coordinator") {
    cost_.online().setRanks(comm.size(), comm.rank());
  }
  // Rank 0's timeline, or null: each step the online check compares gets a
  // PLAN_SPAN box (predicted against measured) on the "mgs.plan" track, and
  // a PLAN_BUCKET box per bucket on "mgs.plan.buckets".
  void setTimeline(Timeline* timeline) { timeline_ = timeline; }
  // A negotiation round with work pending, as long as it took on this rank's
  // coordinator. Rank 0 prices a plan's rounds at their mean (the model's
  // negotiation_s) once kMinTimedRounds were timed: since the profile's
  // second step for the first plan, since the running plan took effect for
  // a re-plan. The calibration's negotiation_s is a small allreduce timed
  // on idle cores; during backward the rounds take what the cores leave
  // them (the transformer on 4 emulated hosts sharing 2 cores: 11-13 ms
  // against 0.55 ms calibrated; docs/benchmarks.md, real training).
  void roundTimed(double seconds) {
    rounds_s_ += seconds;
    ++rounds_;
  }
  static constexpr uint64_t kMinTimedRounds = 4;

  // MGS_PLAN_FILE at init (collective; after the cost model is ready). A
  // file that fits the job pins the cost model to the file's and sets
  // *pinned; no file: rank 0 saves each plan the job settles on; a file
  // that does not fit fails on every rank, naming the cause. Unset: nothing.
  Status loadPlanFile(std::optional<Pinned>* pinned);
  bool pinned() const { return pinned_; }

  // The first request of a step, and each request as the schedule takes
  // it (rank 0 records its profile; `have_plan`: a plan is in force).
  // `declared`: when negotiation declared that first gradient ready on every rank.
  void stepStarted(Clock::time_point first_enqueue, uint64_t step, Clock::time_point declared) {
    cost_.online().stepStarted(first_enqueue, step, declared);
  }
  void record(const std::string& name, Clock::time_point enqueued, uint64_t step, bool have_plan);
  // A gradient the runtime keeps dense, as the coordinator takes it (rank 0
  // records it while profiling, for MGS_PLAN_MODEL=coordinator); `step`:
  // the schedule's step (the last sparse gradient's).
  void recordDense(const std::string& name, int64_t elements, Clock::time_point enqueued, uint64_t step, bool have_plan,
                   bool on_cuda);
  // A restored step counter (a resumed checkpoint): the profile starts
  // again from `step`.
  void restartProfile(uint64_t step);
  // At each step boundary, on every rank (collective when it checks the
  // plan online, runs the planner or ends the trials).
  Verdict stepBoundary(const Boundary& b);

 private:
  // Online re-planning (online_cost.h): the per-step check, collective; a
  // re-plan's choice into *out.
  void checkPlan(const Boundary& b, std::optional<PlanChoice>* out);
  // Rank 0: the candidates (the planner's plan, then the trials' uniform
  // cuts) as broadcast text; empty if the planner failed. `steal`: the
  // coordinator's CPU share taken from backward; `dilation`: the wall time
  // a second of its CPU takes on shared cores (host_load.h).
  std::string planOnRankZero(const Boundary& b, bool with_trials, double steal, double dilation);
  // Collective: plan (with trials: the first plan after a profile); the
  // plan to run now into *out (untouched on failure).
  // `new_plan` false: the first plan's trials deferred past the density
  // warm-up, which the `plans` counter does not count again.
  Status replan(const Boundary& b, bool with_trials, std::optional<PlanChoice>* out, bool new_plan = true);
  // At a step boundary while candidates are on trial: time the step, move
  // to the next candidate, or pick the fastest (collective at the end).
  void trialBoundary(const Boundary& b, std::optional<PlanChoice>* out);
  // Rank 0, MGS_PLAN_FILE without a file at init: write the plan the job
  // settled on (write a temporary file, then rename it over the old one).
  void savePlan(const PlanChoice& p, const Boundary& b);
  // A plan took effect: the online check compares against its prediction.
  void planned(const PlanChoice& p, std::optional<PlanChoice>* out);
  // After a compared step: the per-bucket figures into the statistics, and
  // rank 0's PLAN_BUCKET boxes.
  void reportBuckets(uint64_t step);

  Communicator& comm_;
  const Config& config_;
  JobCostModel& cost_;
  SparseStats& stats_;
  Timeline* timeline_ = nullptr;

  uint64_t profile_start_ = 0;  // step at which the current profile began
  // Rank 0: enqueue time of each name, per profiled step.
  std::vector<ProfiledStep> profile_;
  // Rank 0: the dense gradients enqueued while profiling.
  std::vector<ProfiledDense> dense_profile_;
  // Candidate plans on trial (identical on every rank), the one running, and
  // how many step boundaries it has seen; rank 0: each one's timed steps.
  std::vector<PlanChoice> trials_;
  TrialVisits visits_;  // their visits; rank 0 times them (plan_trials.h)
  // A run-off (plan_trials.h, kRunOffRounds): the candidate on trial against
  // the first (0: none), the visits' 1 standing for it; rank 0: the timed
  // steps of the visits before it.
  size_t run_off_ = 0;
  std::vector<std::vector<double>> trial_samples_;
  size_t visitCandidate(size_t v) const { return run_off_ != 0 && v != 0 ? run_off_ : v; }
  void clearTrials() {
    trials_.clear();
    visits_.clear();
    run_off_ = 0;
    trial_samples_.clear();
  }
  // MGS_PLAN_FILE: write mode (rank 0 saves each settled plan), or a loaded
  // plan runs (nothing is profiled, tried or re-planned).
  bool save_plan_ = false, pinned_ = false;
  // MGS_PLAN_MODEL=coordinator: dense gradients are profiled and priced.
  const bool coordinator_model_;
  // A dense gradient seen was a CUDA tensor: its allreduce runs to its end
  // on the coordinator (CostModel::dense_in_flight false).
  bool dense_on_cuda_ = false;
  // The plan that runs (identical on every rank): an online re-plan's plan
  // goes on trial against it (replan()).
  std::optional<PlanChoice> running_;
  // The candidates on trial are an online re-plan's (the running plan first).
  bool replan_trial_ = false;
  // The first plan was made inside the density warm-up: its trials run once
  // the warm-up ends (stepBoundary).
  bool trials_after_warmup_ = false;
  // Rank 0: the coordinator thread's scheduler totals after the first
  // profiled step (host_load.h): the plan's host_steal and host_dilation are
  // measured from there.
  ThreadSchedule sched_mark_;
  double rounds_s_ = 0;  // roundTimed since the profile's mark or the last plan
  uint64_t rounds_ = 0;
  // Rank 0: the profile's backward times scaled to what the running plan
  // measured (1 until a re-plan; checkPlan), and the backward the last plan
  // was priced with (seconds, first gradient to last).
  double backward_scale_ = 1.0, last_backward_s_ = 0.0;
};

}  // namespace mgs
