// The schedule stage of the sparse pipeline (docs/architecture.md "Sparse
// pipeline stages"): which tensors form a bucket, and when a step ends. It
// hands complete buckets (member lists, plan order) to the rest of the
// pipeline and does nothing to their data.
//
// Everything here runs on the coordinator thread and sees the negotiated
// ready lists, which are identical on every rank; so step boundaries, the
// moment of (re)planning and bucket completion are decided identically
// everywhere without extra messages. Only the plan itself (computed on rank
// 0 from rank 0's recorded gradient timings) is broadcast.
//
// Steps: a step ends when a sparse tensor name is seen again. The first
// MGS_PROFILE_STEPS steps run layer-wise (one bucket per tensor) while rank 0
// records when each gradient was enqueued; then the cost model is resolved
// (calibration), the planner runs on rank 0 and the plan is broadcast. A
// tensor name the plan does not know drops the plan and starts a new
// profile. Residuals live per tensor (ResidualStore), so they survive this.
// With MGS_REPLAN_TOLERANCE > 0, rank 0 keeps recording the last
// MGS_PROFILE_STEPS steps, and every step boundary checks the plan's predicted
// step against the measured one (online_cost.h); a re-plan uses the recent
// steps' timings and the refitted cost model, with no layer-wise profile.
//
// Trials (MGS_PLAN_TRIAL_STEPS, 'mgs' planner): the first plan after a
// profile is chosen by measurement, because the cost model can misjudge
// plans that it prices alike (bench/NOTES.md: a 3-bucket DP plan 6 %
// slower than a 6-bucket uniform cut the model priced 9 % dearer). Rank 0
// sends the DP plan and uniform cuts at 1, 2, 4 and 8 buckets' worth of bytes
// (duplicates dropped); every rank runs each for MGS_PLAN_TRIAL_STEPS steps,
// switching at the same step boundaries; rank 0 times each step between
// boundaries (the first under each candidate left out) and broadcasts which
// was fastest (least of its steps; the DP plan unless beaten by 3 %), which
// every rank then keeps.
//
// MGS_PLAN_FILE (plan/plan_file.h): a job that finds the file runs its plan
// from the first step, with the file's exchange per bucket, and never
// profiles, tries or re-plans (nothing timed decides anything); a job that
// does not find it plans as above and rank 0 writes every plan it settles
// on there. Rank 0 reads the file and broadcasts it, so every rank takes the
// same branch and the same plan.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "compress/selector.h"
#include "core/host_load.h"
#include "core/online_cost.h"
#include "core/request.h"
#include "core/sparse_progress.h"
#include "core/sparse_stats.h"
#include "plan/cost_model.h"
#include "core/plan_trials.h"
#include "plan/plan_file.h"

namespace mgs {

class BucketSchedule {
 public:
  // Receives each complete bucket (and each partial one at a flush).
  using RunBucket = std::function<void(std::vector<Request>& members)>;
  // The selector at the configured density (calibration times it).
  using BaseSelector = std::function<const compress::Selector&()>;

  BucketSchedule(Communicator& comm, const Config& config, OnlineCost& online, SparseStats& stats,
                 BaseSelector base_selector, RunBucket run);

  // The cost model measured at init (MGS_CALIBRATION), identical on all ranks.
  void setCostModel(const plan::CostModel& cost) {
    cost_ = cost;
    have_cost_ = true;
  }
  bool haveCost() const { return have_cost_; }
  const plan::CostModel& cost() const { return cost_; }
  // The selection term measured where the buckets are selected (the GPU),
  // replacing calibration's CPU figure in the model and in the online
  // refit's base. Identical on every rank (max-reduced by the caller).
  void setSelectionModel(const plan::SparsifyModel& m);

  // MGS_PLAN_FILE (collective; after setCostModel, before any submit). Set:
  // rank 0 reads the file and broadcasts it; a file that does not fit the
  // job (ranks, settings, library) fails on every rank, naming the cause.
  // `fail` completes a request the loaded plan refuses (a tensor it does
  // not have, or of another size); unset: nothing happens.
  Status usePlanFile(std::function<void(Request&, Status)> fail);
  // Allgather, agreed, dense or hierarchical for a bucket of `members` (n
  // elements) at `density`: the plan file's exchange for a whole bucket at
  // MGS_DENSITY, else the cost model's choice (pickExchange). The same on
  // every rank.
  plan::Exchange exchangeFor(const std::vector<Request>& members, size_t n, double density) const;
  // Running a plan loaded from MGS_PLAN_FILE.
  bool pinned() const { return pinned_; }

  // Ready sparse requests, in negotiated order.
  void submit(std::vector<Request> reqs);
  // Called once per coordinator cycle with whether the negotiated ready list
  // was empty (identical on every rank). After about a second of empty cycles
  // in a row (idleFlushCycles), partially filled buckets run with what they
  // have: a tensor the framework never submits this step cannot hold the
  // others forever. A second, because a rank that merely lags behind must not
  // split buckets (seen with 100 ms on an oversubscribed host).
  void endCycle(bool nothing_ready);
  int idleFlushCycles() const;
  // Some bucket holds requests that wait for the rest of their members.
  bool holding() const;
  // Complete every held request with `st` (shutdown).
  void failHeld(const Status& st, const std::function<void(Request&, Status)>& complete);

  uint64_t step() const { return step_; }
  // Where the step counter is published for checkpoints, and a restored one
  // taken over from at the start of the next step (null: neither).
  void setProgress(SparseProgress* progress) { progress_ = progress; }
  // The density of this step (DGC warm-up, algorithms.md 8.3).
  double currentDensity() const;

 private:
  struct Bucket {
    std::vector<std::string> members;  // plan order
    std::map<std::string, Request> ready;
  };
  void onStepBoundary();
  // Online re-planning (online_cost.h): the per-step check, collective.
  void checkPlan();
  void flushPartialBuckets();
  // `with_trials`: the first plan after a profile (not an online re-plan).
  Status replan(bool with_trials);
  // A plan as rank 0 broadcasts it.
  struct PlanChoice {
    std::vector<std::vector<std::string>> groups;  // members in plan order
    double predicted_span = 0;                     // first gradient -> last exchange end
    std::string label;                             // for rank 0's log
  };
  void applyPlan(const PlanChoice& p);
  // Rank 0, MGS_PLAN_FILE without a file at init: write the plan the job
  // settled on (write a temporary file, then rename it over the old one).
  void savePlan(const PlanChoice& p);
  // A loaded plan refuses `req` (unknown name or size): fail it, and from
  // now on every sparse request, on every rank alike (the check sees the
  // negotiated order and sizes, identical everywhere).
  void refuse(Request& req, const std::string& why);
  // At a step boundary while candidates are on trial: time the step, move
  // to the next candidate, or pick the fastest (collective at the end).
  void trialBoundary();

  Communicator& comm_;
  const Config& config_;
  OnlineCost& online_;
  SparseStats& stats_;
  BaseSelector base_selector_;
  RunBucket run_;

  uint64_t step_ = 0;
  SparseProgress* progress_ = nullptr;
  int idle_cycles_ = 0;
  std::unordered_set<std::string> seen_;  // names seen in the current step
  uint64_t profile_start_ = 0;            // step at which the current profile began
  // Rank 0: enqueue time of each name, per profiled step.
  std::vector<std::vector<std::pair<std::string, Clock::time_point>>> profile_;
  std::unordered_map<std::string, int64_t> elements_;
  bool have_plan_ = false, plan_stale_ = false;
  std::unordered_map<std::string, size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  bool have_cost_ = false;
  plan::CostModel cost_;
  // Candidate plans on trial (identical on every rank), the one running, and
  // how many step boundaries it has seen; rank 0: each one's shortest timed
  // step (0: none timed yet).
  std::vector<PlanChoice> trials_;
  size_t trial_ = 0;
  int64_t trial_steps_ = 0;                         // boundaries in the current visit
  std::vector<size_t> trial_order_;                 // the candidate of each visit (plan_trials.h)
  size_t trial_visit_ = 0;
  std::vector<std::vector<double>> trial_samples_;  // rank 0: each candidate's timed steps
  std::vector<char> trial_started_;                 // candidates that have run (stats_.plan_trials)
  Clock::time_point last_boundary_{};
  // MGS_PLAN_FILE: write mode (rank 0 saves each settled plan), or the
  // loaded plan (pinned_), each bucket's exchange, the first step's names.
  bool save_plan_ = false, pinned_ = false;
  std::vector<plan::Exchange> pinned_exchange_;
  std::unordered_map<std::string, int64_t> pinned_elements_;
  std::function<void(Request&, Status)> fail_;
  Status refused_;
  bool idle_flush_warned_ = false, pinned_checked_ = false;
  // Rank 0: the coordinator thread's scheduler totals after the first profiled step
  // (host_load.h): the plan's host_steal is measured from there.
  ThreadSchedule sched_mark_;
};

}  // namespace mgs
