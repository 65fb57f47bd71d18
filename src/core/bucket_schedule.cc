#include "core/bucket_schedule.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/check.h"
#include "common/logging.h"

namespace mgs {

BucketSchedule::BucketSchedule(Communicator& comm, const Config& config, JobCostModel& cost, SparseStats& stats,
                               RunBucket run)
    : comm_(comm),
      config_(config),
      cost_(cost),
      stats_(stats),
      run_(std::move(run)),
      replanner_(comm, config, cost, stats) {}

bool BucketSchedule::holding() const {
  for (const auto& b : buckets_)
    if (!b.ready.empty()) return true;
  return false;
}

void BucketSchedule::failHeld(const Status& st, const std::function<void(Request&, Status)>& complete) {
  for (auto& b : buckets_) {
    for (auto& [name, req] : b.ready) complete(req, st);
    b.ready.clear();
  }
}

double BucketSchedule::currentDensity() const {
  const double rho = config_.density;
  if (static_cast<int64_t>(step_) >= config_.warmup_steps) return rho;
  // DGC warm-up (algorithms.md 8.3): coeff = rho^(1/(W+1)), density = max(coeff^(step+1), rho).
  const double coeff = std::pow(rho, 1.0 / (config_.warmup_steps + 1));
  return std::max(std::pow(coeff, static_cast<double>(step_ + 1)), rho);
}

Status BucketSchedule::usePlanFile(std::function<void(Request&, Status)> fail) {
  fail_ = std::move(fail);
  std::optional<Replanner::Pinned> loaded;
  MGS_RETURN_IF_ERROR(replanner_.loadPlanFile(&loaded));
  if (!loaded) return Status::OK();
  pinned_exchange_ = std::move(loaded->exchange);
  pinned_elements_ = std::move(loaded->elements);
  applyPlan(loaded->plan);
  pinned_ = true;
  return Status::OK();
}

plan::Exchange BucketSchedule::exchangeFor(const std::vector<Request>& members, size_t n, double density) const {
  if (pinned_ && !members.empty() && density == config_.density) {
    const auto it = bucket_of_.find(members.front().name);
    if (it != bucket_of_.end() && buckets_[it->second].members.size() == members.size())
      return pinned_exchange_[it->second];
  }
  return cost_.exchangeFor(n, density);
}

void BucketSchedule::refuse(Request& req, const std::string& why) {
  if (refused_.ok()) {
    refused_ = Status(Code::kConfig, "rank " + std::to_string(comm_.rank()) + ": MGS_PLAN_FILE=" + config_.plan_file +
                                         " does not fit this job: " + why +
                                         "; delete the file (or point MGS_PLAN_FILE elsewhere) to plan this job anew");
    MGS_LOG_ERROR("{}", refused_.message());
  }
  if (fail_) {
    fail_(req, refused_);
    // Held members of the plan's buckets would wait for ones that now fail.
    failHeld(refused_, fail_);
  }
}

void BucketSchedule::submit(std::vector<Request> reqs, Clock::time_point declared) {
  declared_ = declared;
  // Buckets this round completed, run in plan order once the round's list
  // is through: the round lists names in its own order (the response
  // cache's bits), and the pipeline exchanges buckets in the order they
  // start, which the plan (and its prediction of each bucket's end) takes
  // to be its own. Identical on every rank: the list and the plan are.
  std::vector<std::pair<size_t, std::vector<Request>>> complete;
  const auto runComplete = [&] {
    std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [g, members] : complete) run_(members, static_cast<int>(g));
    complete.clear();
  };
  for (auto& req : reqs) {
    if (pinned_) {
      // A loaded plan runs only the job it was made for (names and sizes
      // are negotiated: every rank refuses the same request).
      const auto pe = pinned_elements_.find(req.name);
      if (!refused_.ok()) {
        if (fail_) fail_(req, refused_);
        continue;
      }
      if (pe == pinned_elements_.end()) {
        refuse(req, "sparse tensor '" + req.name + "' is not in its plan");
        continue;
      }
      if (pe->second != static_cast<int64_t>(req.input.numel())) {
        refuse(req, "sparse tensor '" + req.name + "' has " + std::to_string(req.input.numel()) +
                        " elements, the plan's has " + std::to_string(pe->second));
        continue;
      }
    }
    if (seen_.count(req.name)) {
      runComplete();  // this step's buckets, before the boundary re-plans
      onStepBoundary();
    }
    if (seen_.empty()) {
      // A step begins. A restored step counter (a resumed checkpoint,
      // mgs_sparse_state_restore) is taken over here, on every rank at the
      // same place; the profile starts again from it.
      uint64_t restored = 0;
      if (progress_ && progress_->takeRestoredStep(&restored) && restored != step_) {
        step_ = restored;
        replanner_.restartProfile(step_);
      }
      if (progress_) progress_->stepBegan(step_);
      replanner_.stepStarted(req.enqueued, step_, declared_);
    }
    seen_.insert(req.name);
    elements_[req.name] = static_cast<int64_t>(req.input.numel());
    replanner_.record(req.name, req.enqueued, step_, have_plan_);
    auto it = have_plan_ ? bucket_of_.find(req.name) : bucket_of_.end();
    if (it == bucket_of_.end()) {
      if (have_plan_) plan_stale_ = true;  // a tensor the plan does not know: re-plan
      std::vector<Request> single;
      single.push_back(std::move(req));
      run_(single, -1);
      continue;
    }
    Bucket& b = buckets_[it->second];
    std::string name = req.name;
    b.ready.emplace(std::move(name), std::move(req));
    if (b.ready.size() == b.members.size()) {
      std::vector<Request> members;
      for (const auto& m : b.members) members.push_back(std::move(b.ready[m]));
      b.ready.clear();
      complete.emplace_back(it->second, std::move(members));
    }
  }
  runComplete();
}

int BucketSchedule::idleFlushCycles() const {
  // Counted in cycles, not seconds: cycles are collective, so every rank
  // reaches the count in the same cycle. Cycles last at least MGS_CYCLE_TIME_MS.
  return std::max(100, static_cast<int>(1000.0 / config_.cycle_time_ms));
}

void BucketSchedule::endCycle(bool nothing_ready) {
  idle_cycles_ = (holding() && nothing_ready) ? idle_cycles_ + 1 : 0;
  if (idle_cycles_ >= idleFlushCycles()) {
    MGS_LOG_DEBUG("running partially filled buckets after {} idle cycles", idle_cycles_);
    if (pinned_ && !idle_flush_warned_ && comm_.rank() == 0) {
      // The one timed decision left: which members a bucket holds when it
      // has waited a second for the rest.
      idle_flush_warned_ = true;
      MGS_LOG_WARN(
          "MGS_PLAN_FILE: a bucket ran partially filled after {} idle cycles (its other gradients came later or "
          "never); a run where they come sooner sends it whole, so runs may differ from here on",
          idle_cycles_);
    }
    declared_ = Clock::now();
    flushPartialBuckets();
    idle_cycles_ = 0;
  }
}

void BucketSchedule::checkPinnedStep() {
  // Not an error: the step still runs the same way in every run. But a
  // bucket short of a member waits for the idle flush every step.
  pinned_checked_ = true;
  std::string missing;
  size_t count = 0;
  for (const auto& [name, elements] : pinned_elements_)
    if (!seen_.count(name) && ++count <= 3) missing += (missing.empty() ? "'" : ", '") + name + "'";
  if (count)
    MGS_LOG_WARN(
        "MGS_PLAN_FILE={}: {} tensor(s) of its plan were not submitted in the first step ({}{}): is this "
        "the model that wrote it?",
        config_.plan_file, count, missing, count > 3 ? ", ..." : "");
}

void BucketSchedule::onStepBoundary() {
  // A bucket whose members did not all arrive this step runs with what it
  // has, so a tensor skipped by the framework cannot hold the others forever.
  flushPartialBuckets();
  if (pinned_ && !pinned_checked_ && comm_.rank() == 0) checkPinnedStep();
  ++step_;
  ++stats_.steps;
  seen_.clear();
  Replanner::Boundary b;
  b.step = step_;
  b.have_plan = have_plan_;
  b.plan_stale = plan_stale_;
  b.elements = &elements_;
  Replanner::Verdict v = replanner_.stepBoundary(b);
  if (v.drop) {
    have_plan_ = plan_stale_ = false;
    bucket_of_.clear();
    buckets_.clear();
    stats_.plan_buckets = 0;
    stats_.plan_bucket.clear();
  }
  if (v.apply) applyPlan(*v.apply);
}

void BucketSchedule::flushPartialBuckets() {
  for (size_t g = 0; g < buckets_.size(); ++g) {
    Bucket& b = buckets_[g];
    if (b.ready.empty()) continue;
    std::vector<Request> members;
    for (const auto& m : b.members) {
      auto it = b.ready.find(m);
      if (it != b.ready.end()) members.push_back(std::move(it->second));
    }
    b.ready.clear();
    run_(members, static_cast<int>(g));
  }
}

void BucketSchedule::applyPlan(const Replanner::PlanChoice& p) {
  buckets_.assign(p.groups.size(), Bucket{});
  bucket_of_.clear();
  for (size_t g = 0; g < p.groups.size(); ++g) {
    buckets_[g].members = p.groups[g];
    for (const auto& name : p.groups[g]) bucket_of_[name] = g;
  }
  have_plan_ = true;
  stats_.plan_buckets = p.groups.size();
  if (stats_.plan_bucket.size() == p.groups.size())
    for (size_t g = 0; g < p.groups.size(); ++g) {
      uint64_t n = 0;
      for (const auto& name : p.groups[g]) {
        const auto e = elements_.find(name);
        if (e != elements_.end()) n += static_cast<uint64_t>(e->second);
      }
      stats_.plan_bucket[g].elements = n;
    }
}

}  // namespace mgs
