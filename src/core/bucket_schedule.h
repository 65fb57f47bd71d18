// The schedule stage of the sparse pipeline (docs/architecture.md "Sparse
// pipeline stages"): which tensors form a bucket, and when a step ends. It
// hands complete buckets (member lists, plan order) to the rest of the
// pipeline and does nothing to their data.
//
// Everything here runs on the coordinator thread and sees the negotiated
// ready lists, which are identical on every rank; so step boundaries and
// bucket completion are decided identically everywhere without extra
// messages.
//
// Steps: a step ends when a sparse tensor name is seen again. At each
// boundary the schedule asks its re-planner (replanner.h: profile, plan on
// rank 0, broadcast, trials, MGS_PLAN_FILE, the online check) what to run
// next, and applies the answer: until a plan exists, and for a tensor the
// plan does not know, one bucket per tensor (layer-wise); then the plan's
// buckets. Residuals live per tensor (ResidualStore), so they survive a
// change of plan.
//
// MGS_PLAN_FILE: a loaded plan runs only the job it was made for. A tensor
// it does not have, or of another size, fails, and from then on every sparse
// request, on every rank alike; a bucket's exchange is the file's.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/job_cost_model.h"
#include "core/replanner.h"
#include "core/request.h"
#include "core/sparse_progress.h"
#include "core/sparse_stats.h"
#include "plan/cost_model.h"

namespace mgs {

class BucketSchedule {
 public:
  // Receives each complete bucket (and each partial one at a flush), with
  // its index in the plan that runs (-1: a bucket of one tensor outside a plan).
  using RunBucket = std::function<void(std::vector<Request>& members, int plan_bucket)>;

  // `config`, `cost` and `stats` outlive the schedule.
  BucketSchedule(Communicator& comm, const Config& config, JobCostModel& cost, SparseStats& stats, RunBucket run);

  // MGS_PLAN_FILE (collective; once the cost model is ready, before any
  // submit). Set: rank 0 reads the file and broadcasts it; a file that does
  // not fit the job (ranks, settings, library) fails on every rank, naming
  // the cause. `fail` completes a request the loaded plan refuses (a tensor
  // it does not have, or of another size); unset: nothing happens.
  Status usePlanFile(std::function<void(Request&, Status)> fail);
  // Allgather, agreed, dense or hierarchical for a bucket of `members` (n
  // elements) at `density`: the plan file's exchange for a whole bucket at
  // MGS_DENSITY, else the cost model's choice (JobCostModel::exchangeFor).
  // The same on every rank.
  plan::Exchange exchangeFor(const std::vector<Request>& members, size_t n, double density) const;
  // Running a plan loaded from MGS_PLAN_FILE.
  bool pinned() const { return pinned_; }

  // Ready sparse requests, in negotiated order, declared ready by the
  // negotiation round that ended at `declared` (this rank's clock).
  void submit(std::vector<Request> reqs, Clock::time_point declared = Clock::now());
  // When the buckets run now were declared ready: the submit's, or the
  // idle flush's cycle.
  Clock::time_point declared() const { return declared_; }
  // A ready gradient the runtime reduces densely (sparse-eligible but too
  // small): the re-planner profiles it for the coordinator model.
  void noteDense(const Request& req) {
    replanner_.recordDense(req.name, static_cast<int64_t>(req.input.numel()), req.enqueued, step_, have_plan_,
                           req.sig.on_cuda);
  }
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
  // Rank 0's timeline, or null: the re-planner's PLAN_SPAN and PLAN_BUCKET boxes.
  void setTimeline(Timeline* timeline) { replanner_.setTimeline(timeline); }
  void roundTimed(double seconds) { replanner_.roundTimed(seconds); }
  // The density of this step (DGC warm-up, algorithms.md 8.3).
  double currentDensity() const;

 private:
  struct Bucket {
    std::vector<std::string> members;  // plan order
    std::map<std::string, Request> ready;
  };
  void onStepBoundary();
  // MGS_PLAN_FILE, rank 0, the first boundary: names the plan's tensors the
  // first step did not submit.
  void checkPinnedStep();
  void flushPartialBuckets();
  void applyPlan(const Replanner::PlanChoice& p);
  // A loaded plan refuses `req` (unknown name or size): fail it, and from
  // now on every sparse request, on every rank alike (the check sees the
  // negotiated order and sizes, identical everywhere).
  void refuse(Request& req, const std::string& why);

  Communicator& comm_;
  const Config& config_;
  JobCostModel& cost_;
  SparseStats& stats_;
  RunBucket run_;
  Replanner replanner_;

  uint64_t step_ = 0;
  Clock::time_point declared_{};
  SparseProgress* progress_ = nullptr;
  int idle_cycles_ = 0;
  std::unordered_set<std::string> seen_;  // names seen in the current step
  std::unordered_map<std::string, int64_t> elements_;
  bool have_plan_ = false, plan_stale_ = false;
  std::unordered_map<std::string, size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  // MGS_PLAN_FILE: the loaded plan (pinned_), each bucket's exchange, each
  // tensor's elements.
  bool pinned_ = false;
  std::vector<plan::Exchange> pinned_exchange_;
  std::unordered_map<std::string, int64_t> pinned_elements_;
  std::function<void(Request&, Status)> fail_;
  Status refused_;
  bool idle_flush_warned_ = false, pinned_checked_ = false;
};

}  // namespace mgs
