// The re-planner's plan trials at a step boundary (replanner.h, plan_trials.h):
// timing each visit on rank 0, moving to the next candidate, and at the end
// broadcasting the plan to keep, which every rank then runs. The candidates
// and the visit order are set up by Replanner::replan.
#include <chrono>
#include <string>

#include "common/logging.h"
#include "core/plan_trials.h"
#include "core/replanner.h"

namespace mgs {

void Replanner::trialBoundary(const Boundary& b, std::optional<PlanChoice>* out) {
  if (trials_.empty()) return;
  switch (visits_.boundary()) {
    case TrialVisits::Step::kOn:
      return;
    case TrialVisits::Step::kSwitched:
      if (visits_.firstRun() && run_off_ == 0) stats_.plan_trials += 1;
      planned(trials_[visitCandidate(visits_.current())], out);
      return;
    case TrialVisits::Step::kDone:
      break;
  }
  // Every visit ran: rank 0 names the plan to keep (plan_trials.h: the
  // fastest mean step, if it beats the dynamic program's plan by more than
  // the margin and the standard error of the difference), every rank keeps it. Where
  // candidates differ by less than the noise (one host, shared memory), a
  // choice by noise would only make the job's plan, and the exchanges it
  // picks, vary from run to run. Where the fastest beat the first by more
  // than the margin but not by the noise, the two run off first
  // (kRunOffRounds more rounds) and the choice is made on both trials' visits.
  const size_t n = trials_.size();
  auto times = [](const std::vector<double>& v) {
    std::string t;
    for (double s : v) t += fmt::format("{}{:.1f}", t.empty() ? "" : "/", s * 1e3);
    return t.empty() ? std::string("-") : t;
  };
  size_t code = 0;  // below n: the candidate to keep; n + c: run c off against the first
  if (comm_.rank() == 0) {
    std::string why, report;
    if (run_off_ == 0) {
      const auto& s = visits_.samples();
      size_t rival = 0;
      code = chooseTrial(s, kTrialMargin, &why, &rival);
      for (size_t i = 0; i < n; ++i)
        report += fmt::format("{}{} {} ms", report.empty() ? "" : ", ", trials_[i].label, times(s[i]));
      if (rival != 0) {
        MGS_LOG_INFO(
            "merge plan trials (timed steps per visit): {}; {} ({} buckets) against {} ({} buckets) in a "
            "run-off of {} rounds: {}",
            report, trials_[rival].label, trials_[rival].groups.size(), trials_[0].label, trials_[0].groups.size(),
            kRunOffRounds, why);
        code = n + rival;
      } else {
        MGS_LOG_INFO("merge plan trials (timed steps per visit): {}; keeping {} ({} buckets): {}", report,
                     trials_[code].label, trials_[code].groups.size(), why);
      }
    } else {
      std::vector<std::vector<double>> two = {trial_samples_[0], trial_samples_[run_off_]};
      for (int i = 0; i < 2; ++i) two[i].insert(two[i].end(), visits_.samples()[i].begin(), visits_.samples()[i].end());
      code = chooseTrial(two, kTrialMargin, &why) == 0 ? 0 : run_off_;
      MGS_LOG_INFO(
          "merge plan run-off (timed steps per visit, the trials' then the run-off's): {} {} ms, {} {} ms; "
          "keeping {} ({} buckets): {}",
          trials_[0].label, times(two[0]), trials_[run_off_].label, times(two[1]), trials_[code].label,
          trials_[code].groups.size(), why);
    }
  }
  const Status st = broadcastTrialChoice(comm_, run_off_ == 0 ? 2 * n : n, &code);
  // A failed broadcast leaves every rank on the DP plan; a communication
  // failure surfaces in the next negotiation.
  if (!st.ok()) MGS_LOG_ERROR("merge plan trials: {}; keeping the first plan", st.toString());
  if (code >= n) {
    // The run-off: the first plan and code - n, visits alternating as before.
    run_off_ = code - n;
    if (comm_.rank() == 0) trial_samples_ = visits_.samples();
    visits_.start(2, kRunOffRounds, true, comm_.rank() == 0);
    planned(trials_[0], out);
    return;
  }
  const size_t best = code;
  if (replan_trial_ && best == 0) ++stats_.replans_rejected;
  planned(trials_[best], out);
  savePlan(trials_[best], b);
  replan_trial_ = false;
  clearTrials();
}

}  // namespace mgs
