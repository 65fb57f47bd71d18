// Online re-planning under mpirun (issue 14, item 5):
//   mpirun -np {2,3,4} mgs_mpi_replan_test
// with MGS_COMPRESSOR, MGS_PROFILE_STEPS and MGS_REPLAN_TOLERANCE set by ctest.
//
// The job's conditions change mid-run: from step kChange on (or the first step
// after it with no candidate plan on trial), every gradient
// arrives kSlowMs after the previous one instead of kFastMs (backward got
// slower, as on a shared or throttled accelerator). The plan's predicted step
// no longer holds, so with a tolerance > 0 a re-plan must follow, and
//   - every rank re-plans at the same step (the plan counter, read after each
//     step, is identical on every rank at every step),
//   - re-plans after the first plan are at least the cool-down apart,
//   - every step's results equal the average of exactly the pairs each rank
//     selected (error feedback intact across the plan change).
// With MGS_REPLAN_TOLERANCE=0 exactly one plan is made, change or not.
// With REPLAN_TEST_PENALIZE_BUCKETS=1 the plans the test does not want pause
// kPenaltyMs after every step (a plan that makes the job slower in a way no model sees). Before the change,
// plans of 2 or more buckets, so the first trials keep one bucket; from the
// change, every plan but the one the first trials kept. The tensors are then
// four times larger, so that after the change the refitted model prices one
// bucket's exposed tail well above a re-plan that cuts more (a re-plan goes
// on trial only when predicted more than 3 % faster). That re-plan (2 to 6
// buckets) differs from the running plan, goes on trial against it
// (running plan first, visits alternating) and loses:
// mgs_stats_t.plan_replans_rejected counts it on every rank alike, and the
// last step outside a trial (a re-plan's trial may still run when the job
// ends) runs the plan the first trials kept. No other plan runs after the
// change outside a trial.
// The first plan's candidates run on trial (MGS_PLAN_TRIAL_STEPS, default 3):
// the bucket count and trial counter, read after each step, are identical
// on every rank at every step (every rank switches at the same boundary),
// more than one candidate ran, and the results stay exact across switches.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "mpi_harness.h"

using mpitest::cpuTensor;
using mpitest::g_rank;
using mpitest::StepTensors;
using mpitest::stepGrad;
using mpitest::residualOf;
using mpitest::gatherAll;

namespace {

int g_size = 0;
// The change comes at step kChange, or later while candidate plans still run
// on trial (mgs_stats_t.plan_trial_running: a noisy first trial may go on to
// a run-off, and a re-plan's trial may run), so that no trial is timed under
// both regimes; the job runs kAfter steps from it (at most kMaxSteps in all).
constexpr int kChange = 25, kAfter = 75, kMaxSteps = 200, kFastMs = 1, kSlowMs = 6;
constexpr int kCooldown = 10;  // OnlineCost::Options::cooldown
// A re-plan's trial: the running plan and the re-plan, 2 rounds of visits
// of kTrialVisitSteps steps, and, where the gain was above the margin but
// within the noise, a run-off of 4 more rounds (core/plan_trials.h).
constexpr int kTrialVisitSteps = 2, kTrialSpan = (2 + 4) * 2 * kTrialVisitSteps;
// Penalized plans pause this long a step: well above the spread of a
// loaded CI machine's steps (one bucket's visits read 265 and 436 ms there
// with 10x tensors, and a 100 ms pause lost to that noise).
constexpr int kPenaltyMs = 300;

// The running plan's buckets, as their tensor counts (mgs_get_plan_buckets).
std::vector<uint64_t> planSignature() {
  size_t count = 0;
  EXPECT_OK(mgs_get_plan_buckets(nullptr, 0, sizeof(mgs_plan_bucket_t), &count));
  std::vector<mgs_plan_bucket_t> pb(count);
  EXPECT_OK(mgs_get_plan_buckets(pb.data(), pb.size(), sizeof(mgs_plan_bucket_t), &count));
  std::vector<uint64_t> sig;
  for (size_t i = 0; i < count && i < pb.size(); ++i) sig.push_back(pb[i].tensors);
  return sig;
}

void run(double tolerance, bool penalize) {
  // Penalized: four times the elements, so that the selection of the tensors
  // a bucket holds is a few ms, and one bucket's exposed tail after backward
  // is priced well above a plan that cuts more (a re-plan must be predicted
  // more than 3 % faster to go on trial).
  const int64_t scale = penalize ? 4 : 1;
  const std::vector<int64_t> sizes = {50000 * scale, 20000 * scale, 80000 * scale,
                                      30000 * scale, 60000 * scale, 10000 * scale};
  const size_t L = sizes.size();
  std::vector<float> plans_after(kMaxSteps);  // as floats, for gatherAll
  std::vector<float> buckets_after(kMaxSteps), trials_after(kMaxSteps), rejected_after(kMaxSteps);
  std::vector<float> running_after(kMaxSteps);  // mgs_stats_t.plan_trial_running
  std::vector<uint64_t> kept_sig, last_sig;
  std::vector<char> on_kept(kMaxSteps, 1);  // penalize: the step ran the plan the first trials kept
  // The step of the change and the job's length, the same on every rank (the
  // trial state is; checked below with the counters).
  int change = kMaxSteps, steps = kMaxSteps;
  bool trial_running = true;
  for (int step = 0; step < steps; ++step) {
    // Decided on every rank alike: the change waits while any rank reports a
    // trial (the flag is the same everywhere, checked below; a rank that
    // disagreed would otherwise run a different number of steps).
    if (change == kMaxSteps && step >= kChange) {
      bool any_trial = trial_running || plans_after[step - 1] < 1;
      for (float f : gatherAll("trial_running", std::vector<float>{any_trial ? 1.0f : 0.0f})) any_trial |= f != 0;
      if (!any_trial) {
        change = step;
        steps = std::min(kMaxSteps, change + kAfter);
        kept_sig = last_sig;  // penalize: the plan the first trials kept
        if (g_rank == 0) std::printf("the step time changes at step %d\n", change);
      }
    }
    StepTensors tensors(sizes, step);
    auto &x = tensors.x, &out = tensors.out, &before = tensors.before;
    auto& shapes = tensors.shapes;
    auto& h = tensors.h;
    for (size_t t = 0; t < L; ++t) {
      before[t] = residualOf("g" + std::to_string(t), sizes[t]);
    }
    const auto gap = std::chrono::milliseconds(step < change ? kFastMs : kSlowMs);
    for (size_t t = 0; t < L; ++t) {
      std::this_thread::sleep_for(gap);  // "backward" of tensor t
      mgs_tensor_t in = cpuTensor(x[t].data(), MGS_FLOAT32, shapes[t]);
      mgs_tensor_t o = cpuTensor(out[t].data(), MGS_FLOAT32, shapes[t]);
      EXPECT_OK(mgs_allreduce_async(("g" + std::to_string(t)).c_str(), &in, &o, MGS_REDUCE_AVERAGE, 1, 1,
                                    MGS_FLAG_SPARSE_OK, &h[t]));
    }
    for (size_t t = 0; t < L; ++t) {
      EXPECT_OK(mgs_wait(h[t]));
      mgs_release(h[t]);
    }
    mgs_stats_t st{};
    EXPECT_OK(mgs_get_stats(&st, sizeof st));
    plans_after[step] = static_cast<float>(st.plans);
    buckets_after[step] = static_cast<float>(st.plan_buckets);
    trials_after[step] = static_cast<float>(st.plan_trials);
    rejected_after[step] = static_cast<float>(st.plan_replans_rejected);
    trial_running = st.plan_trial_running != 0;
    running_after[step] = static_cast<float>(st.plan_trial_running);
    if (penalize) {
      // Before the change: plans of 2 or more buckets pause (the first trials
      // keep a smaller one). From the change: every plan but the one the first
      // trials kept pauses (its buckets' tensor counts are its signature).
      const std::vector<uint64_t> sig = planSignature();
      last_sig = sig;
      if (step < change ? sig.size() >= 2 : sig != kept_sig)
        std::this_thread::sleep_for(std::chrono::milliseconds(kPenaltyMs));
      on_kept[step] = sig == kept_sig;
    }
    // Every few steps (and around the change) check the results against the
    // pairs each rank selected: sent = x + residual_before - residual_after.
    if (step % 5 != 0 && std::abs(step - kChange) > 12 && (step < change || step - change > 12)) continue;
    for (size_t t = 0; t < L; ++t) {
      const std::string name = "g" + std::to_string(t);
      const std::vector<float> after = residualOf(name, sizes[t]);
      std::vector<float> sent(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i) sent[i] = (x[t][i] + before[t][i]) - after[i];
      const std::vector<float> all = gatherAll("ref." + name, sent);
      int bad = 0;
      for (int64_t i = 0; i < sizes[t]; ++i) {
        float ref = 0.0f;
        for (int r = 0; r < g_size; ++r) ref += all[r * sizes[t] + i];
        ref *= static_cast<float>(1.0 / g_size);
        if (!(std::fabs(out[t][i] - ref) <= 1e-6f * std::max(1.0f, std::fabs(ref)))) ++bad;
      }
      EXPECT(bad == 0, "step %d %s: %d entries differ from the reference of selected pairs", step, name.c_str(), bad);
    }
  }
  // The same plan counter at every step on every rank: re-plans at the same step.
  const std::vector<float> all = gatherAll("plans", plans_after);
  int differ = 0;
  for (int r = 1; r < g_size; ++r)
    for (int s = 0; s < steps; ++s) differ += all[r * kMaxSteps + s] != plans_after[s];
  EXPECT(differ == 0, "%d per-step plan counts differ across ranks", differ);
  // Trials: the same candidate, and the same kept plan, on every rank at every step.
  const std::vector<float> all_buckets = gatherAll("plan_buckets", buckets_after);
  const std::vector<float> all_trials = gatherAll("plan_trials", trials_after);
  int differ_trial = 0, switches = 0;
  for (int r = 1; r < g_size; ++r)
    for (int s = 0; s < steps; ++s)
      differ_trial +=
          all_buckets[r * kMaxSteps + s] != buckets_after[s] || all_trials[r * kMaxSteps + s] != trials_after[s];
  for (int s = 1; s < steps; ++s) switches += trials_after[s] != trials_after[s - 1];
  EXPECT(differ_trial == 0, "%d per-step plan bucket or trial counts differ across ranks", differ_trial);
  // plan_trial_running: the same on every rank at every step, and set from
  // every step whose boundary put candidates on trial (the counter rose).
  const std::vector<float> all_running = gatherAll("plan_trial_running", running_after);
  int differ_running = 0, unflagged = 0, running_steps = 0;
  for (int r = 1; r < g_size; ++r)
    for (int s = 0; s < steps; ++s) differ_running += all_running[r * kMaxSteps + s] != running_after[s];
  for (int s = 1; s < steps; ++s) {
    unflagged += trials_after[s] > trials_after[s - 1] && running_after[s] != 1;
    running_steps += running_after[s] == 1;
  }
  EXPECT(differ_running == 0, "%d per-step plan_trial_running values differ across ranks", differ_running);
  EXPECT(unflagged == 0, "%d step(s) put candidates on trial but plan_trial_running was not 1 after them", unflagged);
  EXPECT(change < kMaxSteps, "candidate plans still ran on trial at every step from %d to %d", kChange, kMaxSteps);
  if (g_rank == 0) std::printf("candidate plans on trial after %d of %d steps\n", running_steps, steps);
  EXPECT(trials_after[steps - 1] >= 2, "only %.0f candidate plan(s) ran on trial", trials_after[steps - 1]);
  if (g_rank == 0)
    std::printf("plan trials: %.0f candidates, counter moved at %d steps\n", trials_after[steps - 1], switches);
  std::string when;
  std::vector<int> replans;
  for (int s = 1; s < steps; ++s)
    if (plans_after[s] > plans_after[s - 1]) {
      replans.push_back(s);
      when += " " + std::to_string(s);
    }
  const float at_change = plans_after[change - 1], at_end = plans_after[steps - 1];
  if (g_rank == 0)
    std::printf("tolerance %.2f: plans at the change %.0f, at the end %.0f; new plans after steps:%s\n", tolerance,
                at_change, at_end, when.c_str());
  EXPECT(plans_after[0] == 0 && at_end >= 1, "no plan was made (plans %.0f)", at_end);
  // The plan's prediction against the measured span, as mgs_get_stats reports
  // it: compared in steady state (tolerance > 0), the same on every rank.
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  const std::vector<float> span = {static_cast<float>(st.plan_span_checks),
                                   static_cast<float>(st.plan_span_predicted_us),
                                   static_cast<float>(st.plan_span_measured_us),
                                   static_cast<float>(st.plan_span_predicted_sum_us),
                                   static_cast<float>(st.plan_span_measured_sum_us),
                                   static_cast<float>(st.plan_span_plan_checks),
                                   static_cast<float>(st.plan_span_predicted_total_us),
                                   static_cast<float>(st.plan_span_measured_total_us)};
  const std::vector<float> spans = gatherAll("plan_span", span);
  for (int r = 1; r < g_size; ++r)
    for (size_t i = 0; i < span.size(); ++i)
      EXPECT(spans[r * span.size() + i] == span[i], "rank %d reports plan span field %zu as %.0f, rank 0 %.0f", r, i,
             spans[r * span.size() + i], span[i]);
  // Per bucket (mgs_get_plan_buckets): one entry per bucket of the running
  // plan, and the same figures on every rank (the measured ones are means
  // over ranks from the same reduced sums).
  size_t count = 0;
  EXPECT_OK(mgs_get_plan_buckets(nullptr, 0, sizeof(mgs_plan_bucket_t), &count));
  EXPECT(count == st.plan_buckets, "mgs_get_plan_buckets: %zu buckets, the plan has %llu", count,
         (unsigned long long)st.plan_buckets);
  std::vector<mgs_plan_bucket_t> pb(count);
  size_t again = 0;
  EXPECT_OK(mgs_get_plan_buckets(pb.data(), pb.size(), sizeof(mgs_plan_bucket_t), &again));
  EXPECT(again == count, "mgs_get_plan_buckets: %zu buckets, then %zu", count, again);
  std::vector<float> mine;
  uint64_t elements = 0;
  for (const auto& b : pb) {
    elements += b.elements;
    for (double v : {double(b.tensors), double(b.predicted_end_us), double(b.measured_end_sum_us), double(b.checks),
                     double(b.predicted_ready_us), double(b.measured_ready_sum_us)})
      mine.push_back(static_cast<float>(v));
    if (tolerance > 0 && b.checks > 0)
      EXPECT(b.measured_ready_sum_us <= b.measured_end_sum_us && b.predicted_ready_us <= b.predicted_end_us,
             "a bucket ends before it is ready: ready %llu / %lld us, end %llu / %lld us",
             (unsigned long long)b.measured_ready_sum_us, (long long)b.predicted_ready_us,
             (unsigned long long)b.measured_end_sum_us, (long long)b.predicted_end_us);
  }
  if (count > 0) {
    uint64_t total = 0;
    for (int64_t n : sizes) total += static_cast<uint64_t>(n);
    EXPECT(elements == total, "the plan's buckets hold %llu elements, the job %llu", (unsigned long long)elements,
           (unsigned long long)total);
  }
  // Rank 0 priced the last plan's negotiation rounds at the mean its
  // coordinator timed (Replanner::roundTimed): the profile's second and third
  // steps (six gradients 1 ms apart, rounds at least MGS_CYCLE_TIME_MS apart)
  // hold more than the 4 rounds with work it needs, and so do the steps of a
  // plan before its re-plan. Only rank 0 plans: the other ranks report 0.
  // A calibration that priced rounds at 0 (its allreduce fit's intercept
  // clamped, seen under AddressSanitizer at 4 ranks) leaves the model
  // without rounds: then no price and no timed rounds.
  if (g_rank == 0 && st.plan_round_us == 0)
    EXPECT(st.plan_rounds_timed == 0, "rank 0 reports no round price but %llu timed rounds",
           (unsigned long long)st.plan_rounds_timed);
  else if (g_rank == 0)
    EXPECT(st.plan_rounds_timed >= 4 && st.plan_round_us < 1000000,
           "rank 0 priced the plan's rounds at %llu us from %llu timed rounds", (unsigned long long)st.plan_round_us,
           (unsigned long long)st.plan_rounds_timed);
  else
    EXPECT(st.plan_rounds_timed == 0 && st.plan_round_us == 0, "rank %d reports rounds priced at %llu us from %llu",
           g_rank, (unsigned long long)st.plan_round_us, (unsigned long long)st.plan_rounds_timed);
  // Every rank runs the same plan (checked above), so every rank gathers as many.
  const std::vector<float> all_pb = mine.empty() ? mine : gatherAll("plan_bucket_figures", mine);
  for (int r = 1; r < g_size && !mine.empty(); ++r)
    for (size_t i = 0; i < mine.size(); ++i)
      EXPECT(all_pb[r * mine.size() + i] == mine[i], "rank %d reports plan bucket field %zu as %.0f, rank 0 %.0f", r, i,
             all_pb[r * mine.size() + i], mine[i]);
  if (tolerance > 0) {
    EXPECT(st.plan_span_checks > 0 && st.plan_span_predicted_us > 0 && st.plan_span_measured_us > 0,
           "plan span: %llu checks, predicted %llu us, measured %llu us", (unsigned long long)st.plan_span_checks,
           (unsigned long long)st.plan_span_predicted_us, (unsigned long long)st.plan_span_measured_us);
    // The current plan's sums: none of its steps compared yet (a plan chosen
    // at the last boundary), or they hold the last step and, with more than
    // one of its steps compared, more.
    const bool none = st.plan_span_plan_checks == 0 && st.plan_span_predicted_sum_us == 0 &&
                      st.plan_span_measured_sum_us == 0;
    const bool some = st.plan_span_plan_checks >= 1 && st.plan_span_predicted_sum_us >= st.plan_span_predicted_us &&
                      st.plan_span_measured_sum_us >= st.plan_span_measured_us &&
                      (st.plan_span_plan_checks == 1) == (st.plan_span_measured_sum_us == st.plan_span_measured_us);
    EXPECT(st.plan_span_plan_checks <= st.plan_span_checks && (none || some),
           "plan span sums: predicted %llu us, measured %llu us over %llu of %llu checks",
           (unsigned long long)st.plan_span_predicted_sum_us, (unsigned long long)st.plan_span_measured_sum_us,
           (unsigned long long)st.plan_span_plan_checks, (unsigned long long)st.plan_span_checks);
    // The job's totals: every compared step, of every plan; the running
    // plan's sums are a part of them, and all of them when it is the only
    // plan whose steps were compared.
    const bool totals_ok = st.plan_span_predicted_total_us >= st.plan_span_predicted_sum_us &&
                           st.plan_span_measured_total_us >= st.plan_span_measured_sum_us &&
                           st.plan_span_measured_total_us >= st.plan_span_measured_us &&
                           st.plan_span_predicted_total_us > 0 &&
                           (st.plan_span_plan_checks < st.plan_span_checks
                                ? st.plan_span_measured_total_us > st.plan_span_measured_sum_us
                                : (st.plan_span_predicted_total_us == st.plan_span_predicted_sum_us &&
                                   st.plan_span_measured_total_us == st.plan_span_measured_sum_us));
    EXPECT(totals_ok,
           "plan span totals: predicted %llu us, measured %llu us over %llu checks; the running plan's %llu "
           "and %llu us over %llu",
           (unsigned long long)st.plan_span_predicted_total_us, (unsigned long long)st.plan_span_measured_total_us,
           (unsigned long long)st.plan_span_checks, (unsigned long long)st.plan_span_predicted_sum_us,
           (unsigned long long)st.plan_span_measured_sum_us, (unsigned long long)st.plan_span_plan_checks);
    if (g_rank == 0)
      std::printf("plan span: %llu steps compared; the last predicted %.2f ms, measured %.2f ms; the running plan "
                  "%.2f ms against %.2f ms over %llu steps\n",
                  (unsigned long long)st.plan_span_checks, st.plan_span_predicted_us / 1e3,
                  st.plan_span_measured_us / 1e3, st.plan_span_predicted_sum_us / 1e3,
                  st.plan_span_measured_sum_us / 1e3, (unsigned long long)st.plan_span_plan_checks);
  } else {
    EXPECT(st.plan_span_checks == 0 && st.plan_span_measured_total_us == 0,
           "MGS_REPLAN_TOLERANCE=0 but %llu steps were compared", (unsigned long long)st.plan_span_checks);
  }
  if (tolerance == 0) {
    EXPECT(at_end == 1, "MGS_REPLAN_TOLERANCE=0 but %.0f plans were made", at_end);
    return;
  }
  EXPECT(at_end > at_change, "no re-plan after the step time changed at step %d (plans %.0f -> %.0f)", change,
         at_change, at_end);
  for (size_t i = 2; i < replans.size(); ++i)  // replans[0] is the profile's plan
    EXPECT(replans[i] - replans[i - 1] >= kCooldown, "re-plans after steps %d and %d: closer than the cool-down %d",
           replans[i - 1], replans[i], kCooldown);
  const std::vector<float> all_rejected = gatherAll("plan_replans_rejected", rejected_after);
  int differ_rejected = 0;
  for (int r = 1; r < g_size; ++r)
    for (int s = 0; s < steps; ++s) differ_rejected += all_rejected[r * kMaxSteps + s] != rejected_after[s];
  EXPECT(differ_rejected == 0, "%d per-step rejected re-plan counts differ across ranks", differ_rejected);
  // A re-plan the refitted model prices no more than 3 % faster than the
  // running plan is rejected without a trial: the rejected counter rises at a
  // step where no trial started or ran (no candidate counter rise from two
  // trials' length before), and the running plan stays (the same buckets).
  {
    constexpr int kTrialWindow = kTrialSpan + 2;  // and a step of slack each side
    int untried = 0;
    for (int s = 1; s < steps; ++s) {
      if (rejected_after[s] <= rejected_after[s - 1]) continue;
      bool trial = false;
      for (int t = std::max(1, s - kTrialWindow); t <= s; ++t) trial = trial || trials_after[t] > trials_after[t - 1];
      if (trial) continue;
      ++untried;
      EXPECT(buckets_after[s] == buckets_after[s - 1],
             "step %d: a re-plan rejected without a trial, but the plan went from %.0f to %.0f buckets", s,
             buckets_after[s - 1], buckets_after[s]);
    }
    if (g_rank == 0) std::printf("re-plans rejected without a trial: %d\n", untried);
  }
  if (!penalize) return;
  const float kept_trials = trials_after[change - 1];
  if (g_rank == 0)
    std::printf(
        "penalized plans: %.0f bucket(s) kept by the first trials; candidates on trial %.0f -> %.0f; "
        "re-plans rejected %.0f; %.0f bucket(s) at the end\n",
        buckets_after[change - 1], kept_trials, trials_after[steps - 1], rejected_after[steps - 1],
        buckets_after[steps - 1]);
  // A re-plan after the change (backward 6x slower) that differs from the
  // running plan goes on trial. Most runs here cut more buckets then; on
  // loaded cores the refitted start-ups can make the re-plan the running
  // plan again, which runs on without a trial: then no other plan may have
  // run after the change.
  // A re-plan's trial (the running plan and the re-plan, 2 rounds of 2
  // visits of kTrialVisitSteps steps, a run-off at most 4 more) runs from the step its candidate
  // counter rose; a step counts as inside it with a step of slack each side.
  // Outside trials only the kept plan may run, and the last such step (a
  // trial may still run when the job ends) must run it.
  std::vector<char> in_trial(steps, 0);
  for (int s = change; s < steps; ++s)
    if (trials_after[s] > trials_after[s - 1])
      for (int t = std::max(change, s - 1); t < std::min(steps, s + kTrialSpan + 2); ++t) in_trial[t] = 1;
  int outside_other = 0, last_outside = -1;
  bool was_in_trial = false, trial_completed = false;  // a trial's steps, then a step outside one
  for (int s = change; s < steps; ++s) {
    if (in_trial[s]) {
      was_in_trial = true;
      continue;
    }
    trial_completed = trial_completed || was_in_trial;
    last_outside = s;
    outside_other += !on_kept[s];
  }
  const bool tried = trials_after[steps - 1] > kept_trials;
  EXPECT(outside_other == 0,
         "a plan other than the running one ran %d step(s) after the change outside a trial (candidates %.0f -> "
         "%.0f)",
         outside_other, kept_trials, trials_after[steps - 1]);
  if (g_rank == 0 && !tried)
    std::printf("no re-plan differed from the running plan of %zu bucket(s): nothing to try\n", kept_sig.size());
  if (!tried) return;
  const bool ending_trial = in_trial[steps - 1];
  EXPECT(!trial_completed || rejected_after[steps - 1] >= 1,
         "no re-plan was rejected, though every other plan paused %d ms a step", kPenaltyMs);
  EXPECT(last_outside >= change && on_kept[last_outside],
         "the last step outside a trial (%d) ran a plan other than the one the first trials kept", last_outside);
  if (g_rank == 0 && ending_trial) std::printf("a re-plan's trial was still running when the job ended\n");
}

}  // namespace

int main() {
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init failed: %s\n", mgs_last_error());
    return 1;
  }
  mgs_rank(&g_rank);
  mgs_size(&g_size);
  const char* tol = std::getenv("MGS_REPLAN_TOLERANCE");
  const char* penalize = std::getenv("REPLAN_TEST_PENALIZE_BUCKETS");
  run(tol ? std::atof(tol) : 0.15, penalize && std::string(penalize) == "1");
  const int rc = mpitest::finish();
  mgs_shutdown();
  return rc;
}
