// Plan trials' order and choice (core/plan_trials.h).
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "core/plan_trials.h"

using namespace mgs;

TEST_CASE("plan trials: rounds alternate, every candidate visited once per round", "[core][plan_trials]") {
  REQUIRE(trialRounds(0) == 2);
  REQUIRE(trialRounds(3) == 2);
  REQUIRE(trialRounds(5) == 4);
  const std::vector<size_t> order = trialOrder(3, 3);
  REQUIRE(order == std::vector<size_t>{0, 1, 2, 2, 1, 0, 0, 1, 2});
  // Over an even number of rounds each candidate's mean position is the
  // same: a drift linear in the visit index adds the same to every mean.
  for (size_t c : {2, 5}) {
    const std::vector<size_t> o = trialOrder(c, 4);
    std::map<size_t, double> pos;
    for (size_t v = 0; v < o.size(); ++v) pos[o[v]] += static_cast<double>(v);
    for (const auto& [cand, sum] : pos) {
      INFO("candidates " << c << ", candidate " << cand);
      REQUIRE(sum == pos[0]);
    }
  }
}

// Steps a TrialVisits through its visits with steps of known length: the
// step that ends at boundary i (i = 1, 2, ...) lasts i ms on candidate c's
// clock, so each sample names its step.
TEST_CASE("trial visits: switches, first runs and timed steps", "[core][plan_trials]") {
  using std::chrono::milliseconds;
  for (bool skip_first : {false, true}) {
    INFO("skip_first " << skip_first);
    TrialVisits v;
    REQUIRE_FALSE(v.active());
    Clock::time_point t{};
    v.start(3, 2, skip_first, true, t);
    REQUIRE(v.active());
    REQUIRE(v.visits() == 6);
    REQUIRE(v.current() == 0);
    REQUIRE(v.started() == 1);
    // Visits 0 1 2 | 2 1 0, kTrialVisitSteps = 2 steps each.
    std::vector<size_t> ran;  // the candidate of each step
    std::vector<TrialVisits::Step> steps;
    std::vector<int> first_runs;
    for (int i = 1;; ++i) {
      ran.push_back(v.current());
      t += milliseconds(i);
      const TrialVisits::Step st = v.boundary(t);
      steps.push_back(st);
      if (st == TrialVisits::Step::kSwitched) first_runs.push_back(v.firstRun());
      if (st == TrialVisits::Step::kDone) break;
      REQUIRE(i < 100);
    }
    REQUIRE(ran == std::vector<size_t>{0, 0, 1, 1, 2, 2, 2, 2, 1, 1, 0, 0});
    using S = TrialVisits::Step;
    // The turn of the round (2 then 2) runs on without a switch.
    REQUIRE(steps == std::vector<S>{S::kOn, S::kSwitched, S::kOn, S::kSwitched, S::kOn, S::kOn, S::kOn, S::kSwitched,
                                    S::kOn, S::kSwitched, S::kOn, S::kDone});
    REQUIRE(first_runs == std::vector<int>{1, 1, 0, 0});
    REQUIRE(v.started() == 3);
    const auto& s = v.samples();
    REQUIRE(s.size() == 3);
    // Step i lasted i ms; with skip_first the first step of each visit is left out.
    auto steps_of = [](const std::vector<double>& secs) {  // back to the step numbers
      std::vector<int> out;
      for (double x : secs) out.push_back(static_cast<int>(std::lround(x * 1e3)));
      return out;
    };
    if (skip_first) {
      REQUIRE(steps_of(s[0]) == std::vector<int>{2, 12});
      REQUIRE(steps_of(s[1]) == std::vector<int>{4, 10});
      REQUIRE(steps_of(s[2]) == std::vector<int>{6, 8});
    } else {
      REQUIRE(steps_of(s[0]) == std::vector<int>{1, 2, 11, 12});
      REQUIRE(steps_of(s[1]) == std::vector<int>{3, 4, 9, 10});
      REQUIRE(steps_of(s[2]) == std::vector<int>{5, 6, 7, 8});
    }
    v.clear();
    REQUIRE_FALSE(v.active());
    REQUIRE(v.started() == 3);
    REQUIRE(v.boundary(t) == TrialVisits::Step::kDone);
  }
  // An untimed rank steps alike and records nothing.
  TrialVisits u;
  u.start(2, 2, false, false);
  int boundaries = 0;
  while (u.boundary() != TrialVisits::Step::kDone) ++boundaries;
  REQUIRE(boundaries + 1 == 4 * kTrialVisitSteps);
  for (const auto& c : u.samples()) REQUIRE(c.empty());
}

TEST_CASE("plan trials: maxTrialSteps counts every visit of the most candidates", "[core][plan_trials]") {
  // What a benchmark leaves untimed (mgs-replay's default warm-up): the
  // visits trialOrder makes for the most candidates, then a run-off's of two,
  // kTrialVisitSteps each.
  REQUIRE(maxTrialSteps(0) == 0);
  REQUIRE(maxTrialSteps(1) == 0);
  REQUIRE(maxTrialSteps(3) == 36);
  for (int n : {2, 3, 5, 9}) {
    INFO("MGS_PLAN_TRIAL_STEPS " << n);
    const size_t visits = trialOrder(kMaxTrialCandidates, trialRounds(n)).size() + trialOrder(2, kRunOffRounds).size();
    REQUIRE(maxTrialSteps(n) == static_cast<int>(visits) * kTrialVisitSteps);
  }
}

TEST_CASE("plan trials: a linear drift does not pick a plan", "[core][plan_trials]") {
  // Three equal plans, each step 1 ms slower than the one before (the
  // warm-up drift seen in the trials). Run back to back, the first would
  // look fastest by the drift alone; interleaved, they tie and the first
  // (the dynamic program's plan) is kept because nothing beats it.
  const std::vector<size_t> order = trialOrder(3, 2);
  std::vector<std::vector<double>> samples(3);
  for (size_t v = 0; v < order.size(); ++v) samples[order[v]].push_back(0.100 + 0.001 * static_cast<double>(v));
  std::string why;
  REQUIRE(chooseTrial(samples, 0.03, &why) == 0);
  // The same drift with the last plan really 10% faster: it is kept.
  for (size_t v = 0; v < order.size(); ++v)
    if (order[v] == 2) samples[2][v < 3 ? 0 : 1] -= 0.010;
  REQUIRE(chooseTrial(samples, 0.03, &why) == 2);
  REQUIRE(why.find("exceeds") != std::string::npos);
}

TEST_CASE("plan trials: a gain within the standard error keeps the first plan", "[core][plan_trials]") {
  std::string why;
  // 5 ms faster on average, but the first plan's visits differ by 20 ms: the
  // pooled standard deviation is 10 ms, the difference's standard error 10 ms.
  REQUIRE(chooseTrial({{0.090, 0.110}, {0.095, 0.095}}, 0.03, &why) == 0);
  REQUIRE(why.find("standard error of the difference (10.0 ms)") != std::string::npos);
  // The same gain with tight visits: kept.
  REQUIRE(chooseTrial({{0.100, 0.100}, {0.095, 0.095}}, 0.03, &why) == 1);
  REQUIRE(why.find("exceeds") != std::string::npos);
  // Within the margin: the first stays.
  REQUIRE(chooseTrial({{0.100, 0.100}, {0.098, 0.098}}, 0.03, &why) == 0);
  // Untimed candidates are skipped; an untimed first plan is kept.
  REQUIRE(chooseTrial({{0.100, 0.100}, {}, {0.080, 0.080}}, 0.03, &why) == 2);
  REQUIRE(chooseTrial({{}, {0.080}}, 0.03, &why) == 0);
  // One visit each: no noise to estimate, the margin alone decides.
  REQUIRE(chooseTrial({{0.100}, {0.090}}, 0.03, &why) == 1);
  // The noise is pooled over every candidate: a third candidate's scattered
  // visits (16 ms pooled) hide a gain that two tight ones would show.
  REQUIRE(chooseTrial({{0.100, 0.100}, {0.094, 0.094}, {0.100, 0.140}}, 0.03, &why) == 0);
}

TEST_CASE("plan trials: more visits narrow the standard error, where the range of each candidate's visits widened",
          "[core][plan_trials]") {
  // A second plan 8 ms faster (8 %), the per-step noise the same in both:
  // with 8 visits each, the ranges (20 and 9 ms) would have hidden the gain;
  // the standard error of the difference is 2.6 ms.
  const std::vector<std::vector<double>> s = {{0.100, 0.110, 0.095, 0.105, 0.090, 0.108, 0.102, 0.098},
                                              {0.092, 0.095, 0.088, 0.097, 0.090, 0.094, 0.096, 0.092}};
  std::string why;
  REQUIRE(chooseTrial(s, 0.03, &why) == 1);
  // Two visits each: a gain of 10.5 ms against a standard error of 5.6 ms
  // is kept; 5 ms against 5.8 ms is not.
  REQUIRE(chooseTrial({{0.100, 0.110}, {0.092, 0.097}}, 0.03, &why) == 1);
  REQUIRE(chooseTrial({{0.100, 0.110}, {0.097, 0.103}}, 0.03, &why) == 0);
}

TEST_CASE("plan trials: a gain above the margin but within the noise goes to a run-off", "[core][plan_trials]") {
  // 5 ms (5 %) faster, the standard error 5.8 ms: kept by neither rule, so
  // the second runs off against the first.
  auto runOffCandidate = [](const std::vector<std::vector<double>>& samples, double margin) {
    size_t rival = 99;
    chooseTrial(samples, margin, nullptr, &rival);
    return rival;
  };
  const std::vector<std::vector<double>> s = {{0.100, 0.110}, {0.097, 0.103}};
  size_t rival = 0;
  REQUIRE(chooseTrial(s, 0.03, nullptr, &rival) == 0);
  REQUIRE(rival == 1);
  // The fastest of several is the one run off, not merely any faster one.
  REQUIRE(runOffCandidate({{0.100, 0.110}, {0.103, 0.113}, {0.097, 0.103}}, 0.03) == 2);
  // No run-off: a gain within the margin, the first fastest, a clear winner
  // (chooseTrial keeps it), an untimed first plan.
  REQUIRE(runOffCandidate({{0.100, 0.110}, {0.103, 0.104}}, 0.03) == 0);
  REQUIRE(runOffCandidate({{0.095, 0.097}, {0.100, 0.110}}, 0.03) == 0);
  REQUIRE(runOffCandidate({{0.100, 0.100}, {0.095, 0.095}}, 0.03) == 0);
  REQUIRE(runOffCandidate({{}, {0.080, 0.090}}, 0.03) == 0);
  // Four more visits each at the same means and scatter: the gain now
  // exceeds the standard error (2.9 ms), and the run-off keeps the second.
  const std::vector<std::vector<double>> both = {{0.100, 0.110, 0.100, 0.110, 0.100, 0.110},
                                                 {0.097, 0.103, 0.097, 0.103, 0.097, 0.103}};
  std::string why;
  REQUIRE(chooseTrial(both, 0.03, &why) == 1);
  REQUIRE(why.find("exceeds") != std::string::npos);
}

TEST_CASE("fastest mean: any gain wins where the standard error keeps the first", "[core][plan_trials]") {
  // The first candidate's 2 steps differ by 40 ms, the second runs 10 ms
  // faster on average: the standard error of the difference (20.6 ms) keeps
  // the first; the fastest mean does not.
  const std::vector<std::vector<double>> s = {{0.170, 0.210}, {0.175, 0.185}};
  std::string why;
  REQUIRE(chooseTrial(s, 0.03, &why) == 0);
  REQUIRE(chooseFastest(s, &why) == 1);
  REQUIRE(why.find("180.0 ms against 190.0 ms") != std::string::npos);
  // 2 % faster is faster: no margin (chooseTrial's margin keeps the first).
  REQUIRE(chooseTrial({{0.100, 0.100, 0.100}, {0.098, 0.098, 0.098}}, 0.03, &why) == 0);
  REQUIRE(chooseFastest({{0.100, 0.100, 0.100}, {0.098, 0.098, 0.098}}, &why) == 1);
  // The fastest of several, not the first faster one.
  REQUIRE(chooseFastest({{0.100, 0.100}, {0.090, 0.090}, {0.080, 0.085}, {0.095, 0.095}}, &why) == 2);
  // A tie keeps the first; so does a first that is the fastest.
  REQUIRE(chooseFastest({{0.100, 0.100}, {0.100, 0.100}}, &why) == 0);
  REQUIRE(chooseFastest({{0.090, 0.100}, {0.100, 0.100}}, &why) == 0);
  REQUIRE(why.find("the first candidate is the fastest") != std::string::npos);
  // The first timed once: kept, whatever the others ran.
  REQUIRE(chooseFastest({{0.2}, {0.1, 0.1}}, &why) == 0);
  REQUIRE(why.find("not timed") != std::string::npos);
  // A candidate timed once is not chosen.
  REQUIRE(chooseFastest({{0.2, 0.2}, {0.1}}, &why) == 0);
  REQUIRE(chooseFastest({}, &why) == 0);
}
TEST_CASE("plan trials: a re-plan goes on trial only for a predicted gain above the margin", "[core][plan_trials]") {
  // 3 % of a 60 ms span is 1.8 ms: 58.1 ms is not enough, 58.0 ms and less is.
  CHECK_FALSE(replanWorthTrial(0.060, 0.0590, kTrialMargin));
  CHECK_FALSE(replanWorthTrial(0.060, 0.0583, kTrialMargin));
  CHECK(replanWorthTrial(0.060, 0.0579, kTrialMargin));
  CHECK(replanWorthTrial(0.060, 0.030, kTrialMargin));
  // The same or a slower prediction (a model the DP did not plan on).
  CHECK_FALSE(replanWorthTrial(0.060, 0.060, kTrialMargin));
  CHECK_FALSE(replanWorthTrial(0.060, 0.070, kTrialMargin));
  // A margin of 0: any predicted gain.
  CHECK(replanWorthTrial(0.060, 0.0599, 0.0));
  // Nothing to compare: no trial.
  CHECK_FALSE(replanWorthTrial(0.0, 0.001, kTrialMargin));
  CHECK_FALSE(replanWorthTrial(0.060, -0.001, kTrialMargin));
  CHECK_FALSE(replanWorthTrial(std::nan(""), 0.001, kTrialMargin));
  CHECK_FALSE(replanWorthTrial(0.060, std::numeric_limits<double>::infinity(), kTrialMargin));
}
