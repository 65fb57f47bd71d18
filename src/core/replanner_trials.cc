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
      if (visits_.firstRun()) stats_.plan_trials += 1;
      planned(trials_[visits_.current()], out);
      return;
    case TrialVisits::Step::kDone:
      break;
  }
  // Every visit ran: rank 0 names the plan to keep (plan_trials.h: the
  // fastest mean step, if it beats the dynamic program's plan by more than
  // the margin and the standard error of the difference), every rank keeps it. Where
  // candidates differ by less than the noise (one host, shared memory), a
  // choice by noise would only make the job's plan, and the exchanges it
  // picks, vary from run to run.
  size_t best = 0;
  if (comm_.rank() == 0) {
    std::string why, report;
    best = chooseTrial(visits_.samples(), kTrialMargin, &why);
    for (size_t i = 0; i < trials_.size(); ++i) {
      std::string times;
      for (double s : visits_.samples()[i]) times += fmt::format("{}{:.1f}", times.empty() ? "" : "/", s * 1e3);
      report += fmt::format("{}{} {} ms", report.empty() ? "" : ", ", trials_[i].label, times.empty() ? "-" : times);
    }
    MGS_LOG_INFO("merge plan trials (timed steps per visit): {}; keeping {} ({} buckets): {}", report,
                 trials_[best].label, trials_[best].groups.size(), why);
  }
  const Status st = broadcastTrialChoice(comm_, trials_.size(), &best);
  // A failed broadcast leaves every rank on the DP plan; a communication
  // failure surfaces in the next negotiation.
  if (!st.ok()) MGS_LOG_ERROR("merge plan trials: {}; keeping the first plan", st.toString());
  if (replan_trial_ && best == 0) ++stats_.replans_rejected;
  planned(trials_[best], out);
  savePlan(trials_[best], b);
  replan_trial_ = false;
  trials_.clear();
  visits_.clear();
}

}  // namespace mgs
