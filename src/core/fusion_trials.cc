#include "core/fusion_trials.h"

#include <cstdint>

#include "common/logging.h"
#include "core/plan_trials.h"

namespace mgs {

namespace {

std::string mib(int64_t bytes) {
  return bytes >= (1 << 20) ? fmt::format("{:.3g} MiB", bytes / 1048576.0) : fmt::format("{:.3g} KiB", bytes / 1024.0);
}

}  // namespace

std::vector<int64_t> fusionCandidates(int64_t threshold, uint64_t fusable_bytes) {
  std::vector<int64_t> out;
  if (threshold <= 0) return out;
  bool whole = false;  // a candidate that fuses whatever a cycle holds is in
  const int64_t twice = threshold > INT64_MAX / 2 ? INT64_MAX : threshold * 2;  // no overflow
  for (int64_t c : {threshold, threshold / 4, threshold / 16, twice}) {
    if (c <= 0) continue;
    const bool all = static_cast<uint64_t>(c) >= fusable_bytes;
    if (all && whole) continue;
    whole = whole || all;
    out.push_back(c);
  }
  return out;
}

FusionTrials::FusionTrials(Communicator& comm, const Config& config)
    : comm_(comm),
      rounds_(trialRounds(static_cast<int>(config.plan_trial_steps))),
      threshold_(config.fusion_threshold_bytes),
      base_(config.fusion_threshold_bytes),
      done_(!(config.compressor == "none" && config.fusion_trials && config.plan_trial_steps >= 2 &&
              config.fusion_threshold_bytes > 0)) {}

int64_t FusionTrials::onCycle(const std::vector<const std::string*>& names, const std::vector<size_t>& bytes,
                              const std::vector<char>& fusable) {
  if (done_) return threshold_;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!seen_.insert(*names[i]).second) {
      boundary();
      seen_.clear();
      seen_.insert(*names[i]);
      fusable_bytes_ = fusable_count_ = 0;
    }
    if (fusable[i]) {
      fusable_bytes_ += bytes[i];
      fusable_count_ += 1;
    }
  }
  return threshold_;
}

void FusionTrials::boundary() {
  ++steps_;
  if (candidates_.empty()) {
    if (steps_ == kFusionTrialStartStep) start();
    return;
  }
  switch (visits_.boundary()) {
    case TrialVisits::Step::kOn:
      return;
    case TrialVisits::Step::kSwitched:
      threshold_ = candidates_[visits_.current()];
      return;
    case TrialVisits::Step::kDone:
      finish();
      return;
  }
}

void FusionTrials::start() {
  // The step that just ended is the job's (every rank saw the same list).
  candidates_ = fusionCandidates(base_, fusable_bytes_);
  if (fusable_count_ < 2 || candidates_.size() < 2) {
    if (comm_.rank() == 0)
      MGS_LOG_INFO("fusion threshold: {} kept untried ({} fusable allreduces of {} a step: nothing to try)", mib(base_),
                   fusable_count_, mib(static_cast<int64_t>(fusable_bytes_)));
    candidates_.clear();
    done_ = true;
    return;
  }
  // Every step of a visit is timed: unlike a plan's buckets, a threshold
  // allocates nothing per step that the next step would not find again (a
  // fused buffer grows once), and on 16 emulated hosts the first steps of
  // visits were no slower than the second.
  visits_.start(candidates_.size(), rounds_, false, comm_.rank() == 0);
  threshold_ = candidates_[visits_.current()];
  if (comm_.rank() == 0) {
    std::string list;
    for (int64_t c : candidates_) list += fmt::format("{}{}", list.empty() ? "" : ", ", mib(c));
    MGS_LOG_INFO(
        "fusion threshold: trying {} thresholds ({} fusable allreduces of {} a step) in {} rounds of {} steps "
        "each, keeping the fastest: {}",
        candidates_.size(), fusable_count_, mib(static_cast<int64_t>(fusable_bytes_)), rounds_, kTrialVisitSteps, list);
  }
}

void FusionTrials::finish() {
  size_t best = 0;
  if (comm_.rank() == 0) {
    std::string why, report;
    best = chooseFastest(visits_.samples(), &why);
    for (size_t i = 0; i < candidates_.size(); ++i) {
      std::string times;
      for (double s : visits_.samples()[i]) times += fmt::format("{}{:.1f}", times.empty() ? "" : "/", s * 1e3);
      report += fmt::format("{}{} {} ms", report.empty() ? "" : ", ", mib(candidates_[i]), times.empty() ? "-" : times);
    }
    MGS_LOG_INFO("fusion threshold trials (timed steps per visit): {}; keeping {}: {}", report, mib(candidates_[best]),
                 why);
  }
  const Status st = broadcastTrialChoice(comm_, candidates_.size(), &best);
  // A failed broadcast keeps MGS_FUSION_THRESHOLD_BYTES on every rank; a
  // communication failure surfaces in the next negotiation.
  if (!st.ok()) MGS_LOG_ERROR("fusion threshold trials: {}; keeping {}", st.toString(), mib(base_));
  threshold_ = candidates_[best];
  done_ = true;
  visits_.clear();
}

}  // namespace mgs
