#include "core/bucket_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/check.h"
#include "common/logging.h"
#include "common/threads.h"
#include "core/block_exchange.h"
#include "core/calibration.h"
#include "core/wire.h"
#include "plan/plan.h"

namespace mgs {

BucketSchedule::BucketSchedule(Communicator& comm, const Config& config, OnlineCost& online, SparseStats& stats,
                               BaseSelector base_selector, RunBucket run)
    : comm_(comm),
      config_(config),
      online_(online),
      stats_(stats),
      base_selector_(std::move(base_selector)),
      run_(std::move(run)) {}

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

void BucketSchedule::submit(std::vector<Request> reqs) {
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
    if (seen_.count(req.name)) onStepBoundary();
    if (seen_.empty()) {
      // A step begins. A restored step counter (a resumed checkpoint,
      // mgs_sparse_state_restore) is taken over here, on every rank at the
      // same place; the profile starts again from it.
      uint64_t restored = 0;
      if (progress_ && progress_->takeRestoredStep(&restored) && restored != step_) {
        step_ = restored;
        profile_start_ = step_;
        profile_.clear();
      }
      if (progress_) progress_->stepBegan(step_);
      online_.stepStarted(req.enqueued);
    }
    seen_.insert(req.name);
    elements_[req.name] = static_cast<int64_t>(req.input.numel());
    const uint64_t profiled = step_ - profile_start_;
    if (comm_.rank() == 0 && !pinned_ && (!have_plan_ || online_.enabled()) &&
        profiled < static_cast<uint64_t>(config_.profile_steps)) {
      if (profile_.size() <= profiled) profile_.resize(profiled + 1);
      profile_[profiled].emplace_back(req.name, req.enqueued);
    }
    auto it = have_plan_ ? bucket_of_.find(req.name) : bucket_of_.end();
    if (it == bucket_of_.end()) {
      if (have_plan_) plan_stale_ = true;  // a tensor the plan does not know: re-plan
      std::vector<Request> single;
      single.push_back(std::move(req));
      run_(single);
      continue;
    }
    Bucket& b = buckets_[it->second];
    std::string name = req.name;
    b.ready.emplace(std::move(name), std::move(req));
    if (b.ready.size() == b.members.size()) {
      std::vector<Request> members;
      for (const auto& m : b.members) members.push_back(std::move(b.ready[m]));
      b.ready.clear();
      run_(members);
    }
  }
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
    flushPartialBuckets();
    idle_cycles_ = 0;
  }
}

void BucketSchedule::onStepBoundary() {
  // A bucket whose members did not all arrive this step runs with what it
  // has, so a tensor skipped by the framework cannot hold the others forever.
  flushPartialBuckets();
  if (pinned_ && !pinned_checked_ && comm_.rank() == 0) {
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
  ++step_;
  ++stats_.steps;
  seen_.clear();
  if (comm_.rank() == 0 && !have_plan_ && step_ - profile_start_ == 1) sched_mark_ = readThreadSchedule();
  if (!plan_stale_) trialBoundary();
  checkPlan();
  if (have_plan_ && plan_stale_) {
    MGS_LOG_INFO("new sparse tensors appeared: dropping the merge plan and profiling again");
    have_plan_ = plan_stale_ = false;
    trials_.clear();
    bucket_of_.clear();
    buckets_.clear();
    stats_.plan_buckets = 0;
    profile_start_ = step_;
    profile_.clear();
  }
  if (!have_plan_ && step_ - profile_start_ >= static_cast<uint64_t>(config_.profile_steps)) {
    Status st = replan(true);
    if (!st.ok()) {
      MGS_LOG_ERROR("merge planning failed, staying layer-wise: {}", st.toString());
      profile_start_ = step_;  // try again after another profile
      profile_.clear();
    }
  }
}

void BucketSchedule::flushPartialBuckets() {
  for (auto& b : buckets_) {
    if (b.ready.empty()) continue;
    std::vector<Request> members;
    for (const auto& m : b.members) {
      auto it = b.ready.find(m);
      if (it != b.ready.end()) members.push_back(std::move(it->second));
    }
    b.ready.clear();
    run_(members);
  }
}

void BucketSchedule::checkPlan() {
  // Every rank reaches this boundary at the same point of the negotiated
  // order, and active-or-not depends only on collective state: so every rank
  // runs the allreduce below, or none does.
  if (pinned_ || !have_plan_ || !online_.enabled() || !online_.havePrediction() ||
      static_cast<int64_t>(step_) <= config_.warmup_steps) {
    online_.discardStep();
    return;
  }
  // Rank 0 keeps only the last MGS_PROFILE_STEPS steps of timings.
  while (step_ - profile_start_ >= static_cast<uint64_t>(config_.profile_steps)) {
    if (!profile_.empty()) profile_.erase(profile_.begin());
    ++profile_start_;
  }
  std::vector<int64_t> wire;
  online_.pack(&wire);
  const auto t0 = Clock::now();
  Status st = comm_.allreduce(wire.data(), wire.size(), MGS_INT64, CommOp::kSum);
  online_.reduceCost(std::chrono::duration<double>(Clock::now() - t0).count());
  if (!st.ok()) {
    MGS_LOG_ERROR("online plan check failed, keeping the plan: {}", st.toString());
    return;
  }
  const OnlineCost::Decision d = online_.onReduced(wire);
  if (d.checked) {
    ++stats_.span_checks;
    stats_.span_predicted_us = static_cast<uint64_t>(std::llround(d.predicted_s * 1e6));
    stats_.span_measured_us = static_cast<uint64_t>(std::llround(d.measured_s * 1e6));
  }
  if (!d.replan) return;
  const plan::CostModel old = cost_;
  cost_ = online_.refit();
  MGS_LOG_INFO(
      "re-planning at step {}: measured {:.3f} ms per step (mean over ranks) vs predicted {:.3f} ms ({:+.0f}%) "
      "for {} steps in a row (tolerance {:.0f}%); refitted allgather {:.3f} -> {:.3f} ms at 64 KiB, allreduce "
      "{:.3f} -> {:.3f} ms at 4 MiB, selection {:.3g} -> {:.3g} s/element (the check costs {:.0f} us per step)",
      step_, d.measured_s * 1e3, d.predicted_s * 1e3, 100.0 * (d.measured_s / d.predicted_s - 1.0), d.steps_off,
      config_.replan_tolerance * 100, old.allgather.seconds(65536.0) * 1e3, cost_.allgather.seconds(65536.0) * 1e3,
      old.allreduce.seconds(4194304.0) * 1e3, cost_.allreduce.seconds(4194304.0) * 1e3, old.sparsify.c_s,
      cost_.sparsify.c_s, online_.meanReduceSeconds() * 1e6);
  st = replan(false);
  if (!st.ok()) MGS_LOG_ERROR("online re-planning failed, keeping the plan: {}", st.toString());
}

void BucketSchedule::setSelectionModel(const plan::SparsifyModel& m) {
  if (pinned_) return;  // the plan file's model decides, not a measurement
  cost_.sparsify = m;
  if (online_.haveBase()) {
    plan::CostModel base = online_.base();
    base.sparsify = m;
    online_.setBase(base);
  }
}

Status BucketSchedule::replan(bool with_trials) {
  trials_.clear();
  // Read before calibration, whose collectives would count as this step's
  // waits; only rank 0 plans.
  const double steal =
      comm_.rank() == 0 ? hostSteal(sched_mark_, readThreadSchedule(), comm_.localSize(), availableCores()) : 0.0;
  if (!have_cost_) {
    MGS_RETURN_IF_ERROR(resolveCostModel(comm_, config_, base_selector_(), &cost_));
    have_cost_ = true;
  }
  if (!online_.haveBase()) online_.setBase(cost_);  // refits stay relative to the calibration
  std::string text;
  if (comm_.rank() == 0) {
    // Backward time of a tensor = gap since the previous gradient of the same
    // step, averaged over the profiled steps (the first one is warm-up when
    // there are more).
    const size_t first = profile_.size() > 1 ? 1 : 0;
    std::unordered_map<std::string, std::pair<double, int>> gaps;
    std::vector<std::string> order;
    for (size_t s = first; s < profile_.size(); ++s) {
      auto step = profile_[s];
      std::stable_sort(step.begin(), step.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      if (s + 1 == profile_.size())
        for (const auto& e : step) order.push_back(e.first);
      for (size_t i = 1; i < step.size(); ++i) {
        auto& g = gaps[step[i].first];
        g.first += std::chrono::duration<double>(step[i].second - step[i - 1].second).count();
        g.second += 1;
      }
    }
    plan::PlanInput in;
    in.cost = cost_;
    in.cost.density = config_.density;
    in.cost.exchanges = allowedExchanges(config_, comm_.size());  // plan with what the pipeline will choose
    in.sparse = true;
    // The coordinator selects while backward goes on, and a bucket's
    // allgather overlaps the next bucket's selection: the two-stage model.
    // Unless the cores are busy with training: then the coordinator's work
    // (selection and each bucket's fixed CPU) comes out of backward, which
    // is the compute-stream model, each second counted `steal` times
    // (plan::CostModel::host_steal).
    in.cost.host_steal = steal;
    in.selection = steal > 0 ? plan::Selection::kCompute : plan::Selection::kSeparate;
    in.fusion_threshold_bytes = config_.fusion_threshold_bytes;
    double mean_gap = 0;
    int counted = 0;
    for (const auto& name : order) {
      auto it = gaps.find(name);
      const double gap = (it != gaps.end() && it->second.second) ? it->second.first / it->second.second : -1;
      in.layers.push_back({name, elements_[name], gap});
      if (gap >= 0) {
        mean_gap += gap;
        ++counted;
      }
    }
    for (auto& l : in.layers)
      if (l.backward_s < 0) l.backward_s = counted ? mean_gap / counted : 0;  // the first gradient's gap is unknown
    // On busy cores the profiled gaps hold what the profile's own buckets
    // cost backward (one per tensor): the plan charges its own instead.
    if (steal > 0)
      for (auto& l : in.layers) l.backward_s = std::max(0.0, l.backward_s - steal * in.cost.group_host_s);
    plan::Plan plan;
    Status st = plan::computePlan(config_.effectivePlanner(), in, &plan);
    if (!st.ok()) {
      MGS_LOG_ERROR("planner {}: {}", config_.effectivePlanner(), st.toString());
    } else {
      if (plan.front_capped)
        MGS_LOG_WARN("MGS planner hit its Pareto front cap ({}): the plan may not be optimal", plan.max_front);
      MGS_LOG_INFO(
          "merge plan ({}): {} sparse tensors in {} buckets, predicted {:.3f} ms per step (coordinator {:.3f} ms "
          "a bucket, {})",
          plan.planner, in.layers.size(), plan.groups.size(), plan.predicted_s * 1e3, in.cost.group_host_s * 1e3,
          steal > 0 ? fmt::format("on busy cores: each second of it costs backward {:.2f} s", steal)
                    : std::string("on a core of its own"));
      // The candidates: this plan, then (trials) uniform cuts of the same
      // layers at 1, 2, 4 and 8 buckets' worth of bytes, without repeats.
      std::vector<std::pair<plan::Plan, std::string>> cands;
      cands.emplace_back(plan, plan.planner);
      if (with_trials && config_.plan_trial_steps > 1 && config_.effectivePlanner() == "mgs" &&
          in.layers.size() > 1) {
        int64_t total = 0;
        for (const auto& l : in.layers) total += l.elements * in.cost.bytes_per_element;
        for (int k : {1, 2, 4, 8}) {
          plan::PlanInput cut = in;
          cut.fusion_threshold_bytes = (total + k - 1) / k;
          plan::Plan p;
          if (!plan::computePlan("fusion", cut, &p).ok()) continue;
          bool seen = false;
          for (const auto& c : cands) seen = seen || c.first.groups == p.groups;
          if (!seen) cands.emplace_back(std::move(p), fmt::format("uniform 1/{}", k));
        }
      }
      const double first_gap = in.layers.empty() ? 0.0 : in.layers.front().backward_s;
      WireWriter w;
      w.put(static_cast<uint32_t>(cands.size()));
      for (const auto& [p, label] : cands) {
        if (logger().should_log(spdlog::level::debug)) {
          std::string sizes;
          for (const auto& g : p.groups) {
            int64_t elements = 0;
            for (int i : g) elements += in.layers[i].elements;
            sizes += fmt::format("{}{}:{}", sizes.empty() ? "" : " ", g.size(), elements);
          }
          MGS_LOG_DEBUG("merge plan '{}': buckets in backward order (tensors:elements): {}", label, sizes);
        }
        w.put(static_cast<uint32_t>(p.groups.size()));
        for (const auto& g : p.groups) {
          w.put(static_cast<uint32_t>(g.size()));
          for (int i : g) w.putString(in.layers[i].name);
        }
        // What the online check compares against: first gradient -> last
        // exchange end (the plan's time starts with backward, one gap earlier).
        w.put(p.predicted_s - first_gap);
        w.putString(label);
      }
      text = std::move(w.str());
    }
  }
  MGS_RETURN_IF_ERROR(comm_.broadcastString(&text, 0));
  MGS_ENSURE(!text.empty(), kInternal, "rank 0 could not compute a merge plan (see its log)");
  WireReader r(text);
  // Counts are read, never trusted for allocation: a corrupt one runs out
  // of bytes to read first.
  uint32_t count = 0;
  MGS_ENSURE(r.get(&count) && count >= 1, kInternal, "corrupt plan from rank 0");
  std::vector<PlanChoice> cands;
  for (uint32_t k = 0; k < count; ++k) {
    PlanChoice c;
    uint32_t groups = 0;
    MGS_ENSURE(r.get(&groups), kInternal, "corrupt plan from rank 0");
    for (uint32_t g = 0; g < groups; ++g) {
      uint32_t members = 0;
      MGS_ENSURE(r.get(&members), kInternal, "corrupt plan from rank 0");
      c.groups.emplace_back();
      for (uint32_t i = 0; i < members; ++i) {
        std::string name;
        MGS_ENSURE(r.getString(&name), kInternal, "corrupt plan from rank 0");
        c.groups.back().push_back(std::move(name));
      }
    }
    MGS_ENSURE(r.get(&c.predicted_span) && r.getString(&c.label), kInternal, "corrupt plan from rank 0");
    cands.push_back(std::move(c));
  }
  ++stats_.plans;
  applyPlan(cands.front());
  if (cands.size() == 1) savePlan(cands.front());
  if (cands.size() > 1) {
    trials_ = std::move(cands);
    const int rounds = trialRounds(config_.plan_trial_steps);
    trial_order_ = trialOrder(trials_.size(), rounds);
    trial_visit_ = 0;
    trial_ = trial_order_.front();
    trial_steps_ = 0;
    trial_samples_.assign(trials_.size(), {});
    trial_started_.assign(trials_.size(), 0);
    trial_started_[trial_] = 1;
    stats_.plan_trials += 1;
    if (comm_.rank() == 0) {
      std::string list;
      for (const auto& c : trials_) list += fmt::format("{}{} ({} buckets)", list.empty() ? "" : ", ", c.label, c.groups.size());
      MGS_LOG_INFO("trying {} merge plans in {} rounds of {} steps each (order reversed every round), keeping the "
                   "fastest: {}",
                   trials_.size(), rounds, kTrialVisitSteps, list);
    }
  }
  return Status::OK();
}

void BucketSchedule::applyPlan(const PlanChoice& p) {
  buckets_.assign(p.groups.size(), Bucket{});
  bucket_of_.clear();
  for (size_t g = 0; g < p.groups.size(); ++g) {
    buckets_[g].members = p.groups[g];
    for (const auto& name : p.groups[g]) bucket_of_[name] = g;
  }
  online_.planned(p.predicted_span);
  have_plan_ = true;
  stats_.plan_buckets = p.groups.size();
}

void BucketSchedule::trialBoundary() {
  if (trials_.empty()) return;
  const auto now = Clock::now();
  // The first step of each visit is left out (the plan's buffers are new).
  if (comm_.rank() == 0 && trial_steps_ >= 1)
    trial_samples_[trial_].push_back(std::chrono::duration<double>(now - last_boundary_).count());
  last_boundary_ = now;
  if (++trial_steps_ < kTrialVisitSteps) return;
  trial_steps_ = 0;
  if (++trial_visit_ < trial_order_.size()) {
    const size_t next = trial_order_[trial_visit_];
    if (next != trial_) {  // at a round's turn the same candidate runs on
      trial_ = next;
      if (!trial_started_[trial_]) {
        trial_started_[trial_] = 1;
        stats_.plan_trials += 1;
      }
      applyPlan(trials_[trial_]);
    }
    return;
  }
  // Every visit ran: rank 0 names the plan to keep (plan_trials.h: the
  // fastest mean step, if it beats the dynamic program's plan by more than
  // the margin and the spread between visits), every rank keeps it. Where
  // candidates differ by less than the noise (one host, shared memory), a
  // choice by noise would only make the job's plan, and the exchanges it
  // picks, vary from run to run.
  constexpr double kTrialMargin = 0.03;
  std::string text;
  if (comm_.rank() == 0) {
    std::string why, report;
    const size_t best = chooseTrial(trial_samples_, kTrialMargin, &why);
    for (size_t i = 0; i < trials_.size(); ++i) {
      std::string times;
      for (double s : trial_samples_[i]) times += fmt::format("{}{:.1f}", times.empty() ? "" : "/", s * 1e3);
      report += fmt::format("{}{} {} ms", report.empty() ? "" : ", ", trials_[i].label, times.empty() ? "-" : times);
    }
    MGS_LOG_INFO("merge plan trials (timed steps per visit): {}; keeping {} ({} buckets): {}", report,
                 trials_[best].label, trials_[best].groups.size(), why);
    text = std::to_string(best);
  }
  Status st = comm_.broadcastString(&text, 0);
  size_t best = 0;
  if (st.ok()) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(text.c_str(), &end, 10);
    if (end && *end == '\0' && !text.empty() && v < trials_.size()) best = v;
    else st = Status(Code::kInternal, "corrupt plan choice from rank 0: '" + text + "'");
  }
  // A failed broadcast leaves every rank on the DP plan; a communication
  // failure surfaces in the next negotiation.
  if (!st.ok()) MGS_LOG_ERROR("merge plan trials: {}; keeping the first plan", st.toString());
  applyPlan(trials_[best]);
  savePlan(trials_[best]);
  trials_.clear();
  trial_samples_.clear();
  trial_order_.clear();
}

}  // namespace mgs
