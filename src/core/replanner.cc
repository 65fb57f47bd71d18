#include "core/replanner.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/logging.h"
#include "common/threads.h"
#include "core/block_exchange.h"
#include "core/plan_trials.h"
#include "core/wire.h"
#include "plan/plan.h"

namespace mgs {

double rescaleBackward(double scale, double backward_s, double predicted_s, double measured_s) {
  if (!(backward_s > 0) || !(predicted_s > 0)) return scale;
  const double tail = std::max(0.0, predicted_s - backward_s);
  const double want = std::max(0.1 * backward_s, measured_s - tail);
  return std::clamp(scale * want / backward_s, 0.05, 20.0);
}

std::vector<plan::DenseTensor> denseOnPlanClock(const std::vector<ProfiledStep>& profile, size_t first,
                                                const std::vector<ProfiledDense>& dense,
                                                const std::vector<plan::LayerInfo>& layers) {
  std::unordered_map<std::string, double> ready_at;  // each sparse gradient's ready time on the plan's clock
  double clock = 0;
  for (const auto& l : layers) ready_at[l.name] = clock += l.backward_s;
  struct Sum {
    int64_t elements = 0;
    double seconds = 0;
    int steps = 0;
  };
  std::unordered_map<std::string, Sum> sums;
  std::vector<std::string> names;  // first-seen order, for a deterministic result
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  for (size_t s = std::max<size_t>(first, 1); s < profile.size(); ++s) {
    if (profile[s].empty() || profile[s - 1].empty()) continue;
    ProfiledStep step = profile[s];
    std::stable_sort(step.begin(), step.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    Clock::time_point after = profile[s - 1].front().second;
    for (const auto& e : profile[s - 1]) after = std::max(after, e.second);
    for (const auto& d : dense) {
      if (d.enqueued <= after || d.enqueued > step.back().second) continue;
      // The first sparse gradient enqueued after it (or with it).
      const auto next = std::lower_bound(step.begin(), step.end(), d.enqueued,
                                         [](const auto& e, Clock::time_point t) { return e.second < t; });
      const auto hi = ready_at.find(next->first);
      if (hi == ready_at.end()) continue;
      double at = 0;
      if (next == step.begin()) {
        at = std::max(0.0, hi->second - seconds(d.enqueued, next->second));
      } else {
        const auto prev = std::prev(next);
        const auto lo = ready_at.find(prev->first);
        if (lo == ready_at.end()) continue;
        const double gap = seconds(prev->second, next->second);
        const double f = gap > 0 ? seconds(prev->second, d.enqueued) / gap : 1.0;
        at = lo->second + f * (hi->second - lo->second);
      }
      auto [it, inserted] = sums.try_emplace(d.name);
      if (inserted) names.push_back(d.name);
      it->second.elements = d.elements;
      it->second.seconds += at;
      it->second.steps += 1;
    }
  }
  std::vector<plan::DenseTensor> out;
  for (const auto& n : names) {
    const Sum& sum = sums[n];
    out.push_back({n, sum.elements, sum.seconds / sum.steps});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const plan::DenseTensor& a, const plan::DenseTensor& b) { return a.ready_s < b.ready_s; });
  return out;
}

void Replanner::recordDense(const std::string& name, int64_t elements, Clock::time_point enqueued, uint64_t step,
                            bool have_plan, bool on_cuda) {
  dense_on_cuda_ = dense_on_cuda_ || on_cuda;
  // The same steps as record(), and the one after the last (its dense
  // gradients before the boundary belong to no profiled step and are
  // dropped by denseOnPlanClock). Bounded: a model of a million small
  // tensors profiles them, nothing more.
  constexpr size_t kMaxDense = size_t{1} << 20;
  if (comm_.rank() == 0 && !pinned_ && !have_plan && coordinator_model_ &&
      step - profile_start_ <= static_cast<uint64_t>(config_.profile_steps) && dense_profile_.size() < kMaxDense)
    dense_profile_.push_back({name, elements, enqueued});
}

void Replanner::record(const std::string& name, Clock::time_point enqueued, uint64_t step, bool have_plan) {
  const uint64_t profiled = step - profile_start_;
  // Only while profiling for a plan (layer-wise buckets): there every
  // tensor's exchange holds the ranks in step, so rank 0's gaps are the
  // pace of the slowest rank, which is what a plan's last exchange waits
  // for. Under a plan of few buckets nothing holds them in step during
  // backward, and rank 0's own gaps were half the span the plan then took
  // (ResNet-50, 4 ranks on 2 cores: 141 ms of backward against 250-290 ms
  // measured spans), so re-plans priced from them predicted steps far below
  // what they measured. Re-plans keep this profile, rescaled to the
  // backward the running plan measured (checkPlan), and take the refitted
  // model (docs/planner.md §7).
  if (comm_.rank() == 0 && !pinned_ && !have_plan && profiled < static_cast<uint64_t>(config_.profile_steps)) {
    if (profile_.size() <= profiled) profile_.resize(profiled + 1);
    profile_[profiled].emplace_back(name, enqueued);
  }
}

void Replanner::restartProfile(uint64_t step) {
  profile_start_ = step;
  trials_after_warmup_ = false;
  profile_.clear();
  dense_profile_.clear();
  backward_scale_ = 1.0;
}

void Replanner::planned(const PlanChoice& p, std::optional<PlanChoice>* out) {
  // At once, not when the schedule applies it: a later check at this same
  // boundary must see the new plan's window.
  std::vector<double> ends = p.predicted_ends, ready = p.predicted_ready;
  if (ends.size() != p.groups.size()) ends.assign(p.groups.size(), -1.0);
  if (ready.size() != p.groups.size()) ready.assign(p.groups.size(), -1.0);
  cost_.online().planned(p.predicted_span, ends, ready);
  running_ = p;
  rounds_s_ = 0;
  rounds_ = 0;
  // The sums follow the plan that runs (a trial candidate, a re-plan).
  stats_.span_predicted_sum_us = stats_.span_measured_sum_us = stats_.span_plan_checks = 0;
  stats_.plan_bucket.assign(p.groups.size(), PlanBucketStat{});
  for (size_t g = 0; g < p.groups.size(); ++g) {
    stats_.plan_bucket[g].tensors = p.groups[g].size();
    stats_.plan_bucket[g].predicted_end_us = ends[g] < 0 ? -1 : std::llround(ends[g] * 1e6);
    stats_.plan_bucket[g].predicted_ready_us = ready[g] < 0 ? -1 : std::llround(ready[g] * 1e6);
  }
  *out = p;
}

Replanner::Verdict Replanner::stepBoundary(const Boundary& b) {
  Verdict v;
  if (comm_.rank() == 0 && !b.have_plan && b.step - profile_start_ == 1) {
    sched_mark_ = readThreadSchedule();
    rounds_s_ = 0;
    rounds_ = 0;
  }
  // The check first: the step that ended here ran under the plan in force
  // until now, which trialBoundary may replace (OnlineCost skips the first
  // step under a new plan, so a trial visit of 2 steps compares its second,
  // the one the trial times).
  checkPlan(b, &v.apply);
  // A re-plan just made (its trial, if any, starts with the next step).
  if (!b.plan_stale && !v.apply) trialBoundary(b, &v.apply);
  bool have_plan = b.have_plan;
  if (have_plan && b.plan_stale) {
    MGS_LOG_INFO("new sparse tensors appeared: dropping the merge plan and profiling again");
    v.drop = true;
    v.apply.reset();
    have_plan = false;
    clearTrials();
    restartProfile(b.step);
  }
  if (!have_plan && b.step - profile_start_ >= static_cast<uint64_t>(config_.profile_steps)) {
    // Trials time steps at the density the job will run at: inside the
    // density warm-up (MGS_WARMUP_STEPS) the exchange is denser, so the plan
    // runs untried until the warm-up ends, and its trials start then.
    const bool in_warmup = static_cast<int64_t>(b.step) < config_.warmup_steps;
    Status st = replan(b, !in_warmup, &v.apply);
    if (!st.ok()) {
      MGS_LOG_ERROR("merge planning failed, staying layer-wise: {}", st.toString());
      restartProfile(b.step);  // try again after another profile
    } else if (in_warmup && config_.plan_trial_steps > 1 && config_.effectivePlanner() == "mgs") {
      trials_after_warmup_ = true;
      MGS_LOG_DEBUG("merge plan trials wait for the density warm-up's end (step {})", config_.warmup_steps);
    }
  } else if (have_plan && trials_after_warmup_ && trials_.empty() &&
             static_cast<int64_t>(b.step) >= config_.warmup_steps) {
    trials_after_warmup_ = false;
    // The first plan's trials (its candidates, priced from the same profile,
    // the plan that ran first among them): not a new plan in the counters.
    Status st = replan(b, true, &v.apply, false);
    if (!st.ok()) MGS_LOG_ERROR("merge plan trials after the warm-up failed, keeping the plan: {}", st.toString());
  }
  // Candidates on trial from the next step (every rank alike).
  stats_.plan_trial_running = trials_.empty() ? 0 : 1;
  return v;
}

void Replanner::checkPlan(const Boundary& b, std::optional<PlanChoice>* out) {
  // Every rank reaches this boundary at the same point of the negotiated
  // order, and active-or-not depends only on collective state: so every rank
  // runs the allreduce below, or none does.
  OnlineCost& online = cost_.online();
  if (pinned_ || !b.have_plan || !online.enabled() || !online.havePrediction() ||
      static_cast<int64_t>(b.step) <= config_.warmup_steps) {
    online.discardStep();
    return;
  }
  std::vector<int64_t> wire;
  online.pack(&wire);
  const auto t0 = Clock::now();
  Status st = comm_.allreduce(wire.data(), wire.size(), MGS_INT64, CommOp::kSum);
  online.reduceCost(std::chrono::duration<double>(Clock::now() - t0).count());
  if (!st.ok()) {
    MGS_LOG_ERROR("online plan check failed, keeping the plan: {}", st.toString());
    return;
  }
  const OnlineCost::Decision d = online.onReduced(wire);
  if (d.checked) {
    ++stats_.span_checks;
    stats_.span_predicted_us = static_cast<uint64_t>(std::llround(d.predicted_s * 1e6));
    stats_.span_measured_us = static_cast<uint64_t>(std::llround(d.measured_s * 1e6));
    ++stats_.span_plan_checks;
    stats_.span_predicted_sum_us += stats_.span_predicted_us;
    stats_.span_measured_sum_us += stats_.span_measured_us;
    stats_.span_predicted_total_us += stats_.span_predicted_us;
    stats_.span_measured_total_us += stats_.span_measured_us;
    Clock::time_point start, end;
    if (timeline_ && online.lastSpan(&start, &end))
      // This rank's span as the box; the figures compared are the stats' (the mean over ranks).
      timeline_->span("mgs.plan", "PLAN_SPAN", start, end,
                      "{\"predicted_us\":" + std::to_string(stats_.span_predicted_us) + ",\"measured_mean_us\":" +
                          std::to_string(stats_.span_measured_us) + ",\"step\":" + std::to_string(b.step) + "}");
    reportBuckets(b.step);
  }
  if (!d.replan) return;
  // Backward as the plan ran it: the layer-wise profile's pace can be far
  // from the steady state's either way (its per-tensor exchanges slow
  // backward on busy cores, or hold the ranks in step where a plan does
  // not). Rank 0 rescales the profile's backward so that, with the tail the
  // plan predicted after it, the plan would have predicted the measured span.
  const double old_scale = backward_scale_;
  if (comm_.rank() == 0)
    backward_scale_ = rescaleBackward(backward_scale_, last_backward_s_, d.predicted_s, d.measured_s);
  const plan::CostModel old = cost_.refit();
  const plan::CostModel& now = cost_.model();
  MGS_LOG_INFO(
      "re-planning at step {}: measured {:.3f} ms per step (mean over ranks) vs predicted {:.3f} ms ({:+.0f}%) "
      "for {} steps in a row (tolerance {:.0f}%); refitted allgather {:.3f} -> {:.3f} ms at 64 KiB, allreduce "
      "{:.3f} -> {:.3f} ms at 4 MiB, selection {:.3g} -> {:.3g} s/element (the check costs {:.0f} us per step); "
      "backward scaled {:.3f} -> {:.3f}",
      b.step, d.measured_s * 1e3, d.predicted_s * 1e3, 100.0 * (d.measured_s / d.predicted_s - 1.0), d.steps_off,
      config_.replan_tolerance * 100, old.allgather.seconds(65536.0) * 1e3, now.allgather.seconds(65536.0) * 1e3,
      old.allreduce.seconds(4194304.0) * 1e3, now.allreduce.seconds(4194304.0) * 1e3, old.sparsify.c_s,
      now.sparsify.c_s, online.meanReduceSeconds() * 1e6, old_scale, backward_scale_);
  // Where the plan went wrong, bucket by bucket (mgs_get_plan_buckets): the
  // three whose mean measured end strays most from the predicted one.
  std::vector<size_t> worst;
  for (size_t i = 0; i < stats_.plan_bucket.size(); ++i)
    if (stats_.plan_bucket[i].checks > 0 && stats_.plan_bucket[i].predicted_end_us >= 0) worst.push_back(i);
  auto miss = [&](size_t i) {
    const PlanBucketStat& s = stats_.plan_bucket[i];
    return std::fabs(static_cast<double>(s.measured_end_sum_us) / static_cast<double>(s.checks) -
                     static_cast<double>(s.predicted_end_us));
  };
  std::stable_sort(worst.begin(), worst.end(), [&](size_t x, size_t y) { return miss(x) > miss(y); });
  if (worst.size() > 3) worst.resize(3);
  std::string buckets;
  for (size_t i : worst) {
    const PlanBucketStat& s = stats_.plan_bucket[i];
    const double n = static_cast<double>(s.checks);
    buckets += fmt::format(
        "{}bucket {} of {} ({} tensors): ready {:.1f} / {:.1f} ms, end {:.1f} / {:.1f} ms", buckets.empty() ? "" : "; ",
        i, stats_.plan_bucket.size(), s.tensors, static_cast<double>(s.predicted_ready_us) / 1e3,
        static_cast<double>(s.measured_ready_sum_us) / n / 1e3, static_cast<double>(s.predicted_end_us) / 1e3,
        static_cast<double>(s.measured_end_sum_us) / n / 1e3);
  }
  if (!buckets.empty())
    MGS_LOG_INFO(
        "the plan's buckets that strayed most, predicted / measured from the first gradient of the rank that "
        "started the step last (mean over ranks and {} compared steps): {}",
        stats_.span_plan_checks, buckets);
  st = replan(b, false, out);
  if (!st.ok()) MGS_LOG_ERROR("online re-planning failed, keeping the plan: {}", st.toString());
}

void Replanner::reportBuckets(uint64_t step) {
  const OnlineCost& online = cost_.online();
  const auto& figures = online.buckets();
  if (stats_.plan_bucket.size() != figures.size()) return;
  for (size_t i = 0; i < figures.size(); ++i) {
    PlanBucketStat& s = stats_.plan_bucket[i];
    s.checks = figures[i].checks;
    s.measured_end_us = static_cast<uint64_t>(std::llround(figures[i].last_measured_end_s * 1e6));
    s.measured_end_sum_us = static_cast<uint64_t>(std::llround(figures[i].measured_end_sum_s * 1e6));
    s.measured_ready_us = static_cast<uint64_t>(std::llround(figures[i].last_measured_ready_s * 1e6));
    s.measured_ready_sum_us = static_cast<uint64_t>(std::llround(figures[i].measured_ready_sum_s * 1e6));
  }
  Clock::time_point start, end;
  if (!timeline_ || !online.lastSpan(&start, &end)) return;
  // This rank's buckets as boxes that tile its step: each from where the one
  // that finished before it finished (the first from the step's first
  // gradient) to where it finished; the figures are the statistics' (the
  // mean over ranks). Buckets ready in one coordinator cycle may run in
  // another order than the plan's.
  const auto& ends = online.lastBucketEnds();
  std::vector<size_t> order;
  for (size_t i = 0; i < ends.size() && i < figures.size(); ++i)
    if (ends[i] != Clock::time_point{}) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return ends[x] < ends[y]; });
  Clock::time_point from = start;
  for (size_t i : order) {
    if (ends[i] < from) continue;
    const PlanBucketStat& s = stats_.plan_bucket[i];
    timeline_->span("mgs.plan.buckets", "PLAN_BUCKET", from, ends[i],
                    "{\"bucket\":" + std::to_string(i) + ",\"tensors\":" + std::to_string(s.tensors) +
                        ",\"predicted_end_us\":" + std::to_string(s.predicted_end_us) +
                        ",\"measured_end_mean_us\":" + std::to_string(s.measured_end_us) +
                        ",\"predicted_ready_us\":" + std::to_string(s.predicted_ready_us) +
                        ",\"measured_ready_mean_us\":" + std::to_string(s.measured_ready_us) +
                        ",\"step\":" + std::to_string(step) + "}");
    from = ends[i];
  }
}

std::string Replanner::planOnRankZero(const Boundary& b, bool with_trials, double steal, double dilation) {
  // Backward time of a tensor = gap since the previous gradient of the same
  // step, averaged over the profiled steps (the first one is warm-up when
  // there are more).
  const size_t first = profile_.size() > 1 ? 1 : 0;
  std::unordered_map<std::string, std::pair<double, int>> gaps;
  std::vector<std::string> order;
  for (size_t s = first; s < profile_.size(); ++s) {
    auto step = profile_[s];
    std::stable_sort(step.begin(), step.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    if (s + 1 == profile_.size())
      for (const auto& e : step) order.push_back(e.first);
    for (size_t i = 1; i < step.size(); ++i) {
      auto& g = gaps[step[i].first];
      g.first += std::chrono::duration<double>(step[i].second - step[i - 1].second).count();
      g.second += 1;
    }
  }
  plan::PlanInput in;
  in.cost = cost_.model();  // the job's density and allowed exchanges are in it (job_cost_model.h)
  in.sparse = true;
  // The coordinator selects while backward goes on, and a bucket's
  // allgather overlaps the next bucket's selection: the two-stage model.
  // Unless the cores are busy with training: then the coordinator's work
  // (selection and each bucket's fixed CPU) comes out of backward, which
  // is the compute-stream model, each second counted `steal` times
  // (plan::CostModel::host_steal: this plan's input, not the job's model).
  in.cost.host_steal = steal;
  // Otherwise the coordinator may still wait for a core (the node's other
  // ranks' coordinators, other jobs, the kernel): each bucket's fixed CPU
  // then ends `dilation` times its CPU later (CostModel::host_dilation).
  in.cost.host_dilation = steal > 0 ? 1.0 : dilation;
  // Rounds at what they measured (roundTimed), where the model has rounds.
  const double calibrated_round_s = in.cost.negotiation_s;
  const bool rounds_timed = in.cost.negotiation_s > 0 && rounds_ >= kMinTimedRounds;
  if (rounds_timed) in.cost.negotiation_s = rounds_s_ / static_cast<double>(rounds_);
  stats_.plan_round_us = static_cast<uint64_t>(std::llround(in.cost.negotiation_s * 1e6));
  stats_.plan_rounds_timed = rounds_timed ? rounds_ : 0;
  in.selection = steal > 0 ? plan::Selection::kCompute : plan::Selection::kSeparate;
  in.fusion_threshold_bytes = config_.fusion_threshold_bytes;
  double mean_gap = 0;
  int counted = 0;
  for (const auto& name : order) {
    auto it = gaps.find(name);
    const double gap = (it != gaps.end() && it->second.second) ? it->second.first / it->second.second : -1;
    const auto e = b.elements->find(name);
    in.layers.push_back({name, e == b.elements->end() ? 0 : e->second, gap});
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
  // Re-plans: the backward the running plan measured (checkPlan).
  for (auto& l : in.layers) l.backward_s *= backward_scale_;
  if (coordinator_model_) {
    // The runtime's coordinator loop as the model (plan/coordinator.h):
    // rounds on the MGS_CYCLE_TIME_MS grid, the dense gradients' allreduces
    // started on it before the sparse buckets, allgathers in flight.
    in.cost.coordinator_loop = true;
    in.cost.cycle_s = config_.cycle_time_ms * 1e-3;
    in.cost.max_in_flight = static_cast<int>(BlockExchange::kMaxInFlight);
    // Executor::startInFlight: host allreduces over an asynchronous
    // communicator, without MGS_NONFINITE=error's blocking check first.
    in.cost.dense_in_flight = comm_.asyncCollectives() && config_.nonfinite != "error" && !dense_on_cuda_;
    in.dense_tensors = denseOnPlanClock(profile_, first, dense_profile_, in.layers);
  }
  plan::Plan plan;
  Status st = plan::computePlan(config_.effectivePlanner(), in, &plan);
  if (!st.ok()) {
    MGS_LOG_ERROR("planner {}: {}", config_.effectivePlanner(), st.toString());
    return std::string();
  }
  if (plan.front_capped)
    MGS_LOG_WARN("MGS planner hit its Pareto front cap ({}): the plan may not be optimal", plan.max_front);
  double backward_s = 0;
  for (const auto& l : in.layers) backward_s += l.backward_s;
  // What the online check compares: the span from the first gradient, one gap later.
  last_backward_s_ = backward_s - (in.layers.empty() ? 0.0 : in.layers.front().backward_s);
  MGS_LOG_INFO(
      "merge plan ({}, {} model): {} sparse tensors in {} buckets, {} dense gradients, predicted {:.3f} ms per step "
      "from {:.3f} ms of backward ({} profiled steps x {:.2f}) (coordinator {:.3f} ms a bucket, {}; negotiation "
      "rounds {})",
      plan.planner, in.cost.coordinator_loop ? "coordinator" : "timeline", in.layers.size(), plan.groups.size(),
      in.dense_tensors.size(), plan.predicted_s * 1e3, backward_s * 1e3, profile_.size() - first, backward_scale_,
      in.cost.group_host_s * 1e3,
      steal > 0 ? fmt::format("on busy cores: each second of it costs backward {:.2f} s", steal)
      : in.cost.host_dilation > 1
          ? fmt::format("on cores shared, not with training: each second of it takes {:.2f} s", in.cost.host_dilation)
          : std::string("on a core of its own"),
      calibrated_round_s <= 0 ? std::string("none: the cost model has no rounds")
      : !rounds_timed ? fmt::format("{:.3f} ms as calibrated ({} timed, fewer than {})", calibrated_round_s * 1e3,
                                    rounds_, kMinTimedRounds)
                      : fmt::format("{:.3f} ms as measured over {} rounds, {:.3f} ms calibrated",
                                    in.cost.negotiation_s * 1e3, rounds_, calibrated_round_s * 1e3));
  // The candidates: this plan, then (trials) uniform cuts of the same
  // layers at 1, 2, 4 and 8 buckets' worth of bytes, without repeats.
  std::vector<std::pair<plan::Plan, std::string>> cands;
  // A re-plan: the running plan first, priced by the same refitted model and
  // rescaled backward, so that it keeps an up-to-date prediction if it stays
  // (replan() puts the two on trial). Not when its tensors are not these.
  if (!with_trials && running_) {
    std::unordered_map<std::string, int> index;
    for (size_t i = 0; i < in.layers.size(); ++i) index[in.layers[i].name] = static_cast<int>(i);
    plan::Plan current;
    bool known = true;
    for (const auto& g : running_->groups) {
      current.groups.emplace_back();
      for (const auto& name : g) {
        const auto it = index.find(name);
        if (it == index.end()) {
          known = false;
          break;
        }
        current.groups.back().push_back(it->second);
      }
      if (!known) break;
    }
    if (known && plan::evaluatePlan(in, current.groups, true, &current.predicted_s).ok())
      cands.emplace_back(std::move(current), "running plan");
  }
  cands.emplace_back(plan, plan.planner);
  if (with_trials && config_.plan_trial_steps > 1 && config_.effectivePlanner() == "mgs" && in.layers.size() > 1) {
    int64_t total = 0;
    for (const auto& l : in.layers) total += l.elements * in.cost.bytes_per_element;
    for (int k : kTrialCuts) {
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
    // Each bucket's predicted exchange end on the same clock (the plan's
    // timeline; the mean over the round grid's phases of predicted_s has no
    // per-bucket counterpart, so the last end may differ from it a little).
    std::vector<plan::GroupTiming> timing;
    if (!plan::planTimeline(in, p.groups, true, &timing).ok()) timing.clear();
    w.put(static_cast<uint32_t>(timing.size()));
    for (const auto& t : timing) {
      w.put(t.comm_end_s - first_gap);
      w.put(t.negotiated_s - first_gap);  // the round that declares it ready everywhere
    }
    w.putString(label);
  }
  return std::move(w.str());
}

Status Replanner::replan(const Boundary& b, bool with_trials, std::optional<PlanChoice>* out, bool new_plan) {
  clearTrials();
  MGS_ENSURE(cost_.ready(), kInternal, "planning before the cost model is resolved");
  // Read before any collective of this boundary's planning, whose waits
  // would count as this step's; only rank 0 plans.
  double steal = 0, dilation = 1;
  if (comm_.rank() == 0) {
    const ThreadSchedule now = readThreadSchedule();
    steal = hostSteal(sched_mark_, now, comm_.localSize(), availableCores());
    dilation = hostDilation(sched_mark_, now);
  }
  std::string text;
  if (comm_.rank() == 0) text = planOnRankZero(b, with_trials, steal, dilation);
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
    uint32_t ends = 0;
    MGS_ENSURE(r.get(&c.predicted_span) && r.get(&ends), kInternal, "corrupt plan from rank 0");
    for (uint32_t g = 0; g < ends; ++g) {
      double e = 0, ready = 0;
      MGS_ENSURE(r.get(&e) && r.get(&ready), kInternal, "corrupt plan from rank 0");
      c.predicted_ends.push_back(e);
      c.predicted_ready.push_back(ready);
    }
    MGS_ENSURE(r.getString(&c.label), kInternal, "corrupt plan from rank 0");
    cands.push_back(std::move(c));
  }
  // An online re-plan's plan is tried against the plan that runs (the running
  // plan first, as the DP's plan is among the first plan's candidates): the
  // refitted model has misjudged this job once already, and the job's pace
  // under the new plan is what the re-plan cannot predict (on shared cores
  // more buckets take coordinator time from backward, which a re-plan reads
  // as a slower backward and answers with more buckets). Visits alternate,
  // so a change in the job's conditions weighs on both alike; the new plan
  // is kept only when it is faster by more than the margin and the noise
  // (chooseTrial).
  // Rank 0 sent the running plan, re-priced, before the new one
  // (planOnRankZero: a re-plan's only two candidates).
  // A new plan that the refitted model itself prices within the trials'
  // margin of the running plan (re-priced by the same model) does not go on
  // trial: no trial keeps a plan for less (chooseTrial), and half of the
  // trial's steps would run the plan that the last trial or the last check
  // found no better. The running plan stays with its new prediction.
  replan_trial_ = false;
  if (!with_trials && cands.size() == 2) {
    const bool triable = cands[0].groups != cands[1].groups && config_.plan_trial_steps > 1;
    if (triable && replanWorthTrial(cands[0].predicted_span, cands[1].predicted_span, kTrialMargin)) {
      replan_trial_ = true;
      cands[1].label = "re-plan " + cands[1].label;
    } else if (triable) {
      ++stats_.replans_rejected;
      if (comm_.rank() == 0)
        MGS_LOG_INFO(
            "keeping the running plan ({} buckets) without a trial: the re-plan ({} buckets) is predicted {:.3f} ms "
            "against its {:.3f} ms, less than the {:.0f} % a trial needs",
            cands[0].groups.size(), cands[1].groups.size(), cands[1].predicted_span * 1e3,
            cands[0].predicted_span * 1e3, kTrialMargin * 100);
      cands.pop_back();
    } else {
      // The same plan, or no trials: the new plan (priced by the refitted model) runs.
      cands.erase(cands.begin());
    }
  }
  if (new_plan) ++stats_.plans;
  planned(cands.front(), out);
  if (cands.size() == 1) savePlan(cands.front(), b);
  if (cands.size() > 1) {
    trials_ = std::move(cands);
    const int rounds = trialRounds(config_.plan_trial_steps);
    // The first step of each visit is not timed (the plan's buffers are new).
    visits_.start(trials_.size(), rounds, true, comm_.rank() == 0);
    stats_.plan_trials += 1;
    if (comm_.rank() == 0) {
      std::string list;
      for (const auto& c : trials_)
        list += fmt::format("{}{} ({} buckets)", list.empty() ? "" : ", ", c.label, c.groups.size());
      MGS_LOG_INFO(
          "trying {} merge plans in {} rounds of {} steps each (order reversed every round), keeping the "
          "fastest: {}",
          trials_.size(), rounds, kTrialVisitSteps, list);
    }
  }
  return Status::OK();
}

}  // namespace mgs
