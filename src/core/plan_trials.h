// Plan trials (replanner.h, MGS_PLAN_TRIAL_STEPS) and the dense fusion
// threshold trials (fusion_trials.h): in which order the candidates run, the
// visits stepped through at each step boundary, and which candidate is kept.
// The same on every rank; rank 0 alone times the steps and broadcasts its
// choice.
//
// Step times drift while a job warms up (allocator, caches, the online
// model's first refits), so candidates that run one after the other are
// compared at different points of the drift. The candidates therefore run
// in visits of kTrialVisitSteps steps (the first of each visit left out: the
// plan's fusion buffers are new), in rounds whose order alternates,
// 0 1 .. C-1 then C-1 .. 1 0, so that a drift linear in time adds the same
// to every candidate's mean. A candidate replaces the first (the dynamic
// program's plan) only when its mean step is shorter by more than both the
// margin and the standard error of the difference, from the scatter of the
// visits of every candidate about its own mean (chooseTrial).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/request.h"

namespace mgs {

constexpr int kTrialVisitSteps = 2;

// A candidate (or a re-plan) must be faster by more than this fraction.
constexpr double kTrialMargin = 0.03;

// The candidates: the dynamic program's plan and uniform cuts at 1, 2, 4 and
// 8 buckets' worth of bytes (repeats dropped, so there may be fewer).
constexpr int kTrialCuts[] = {1, 2, 4, 8};
constexpr int kMaxTrialCandidates = 1 + static_cast<int>(sizeof(kTrialCuts) / sizeof(kTrialCuts[0]));

// Rounds for MGS_PLAN_TRIAL_STEPS = steps: at least 2 (one forward, one
// backward), so every candidate is timed twice.
constexpr int trialRounds(int steps) { return steps - 1 > 2 ? steps - 1 : 2; }

// A run-off: where the fastest candidate beat the first by more than the
// margin but not by the standard error (chooseTrial's run_off), the two alone run
// this many more rounds, and the choice is made again on every visit of the
// two. Two visits of each candidate tell a gain of 5-8 % from the noise of
// one step on busy hosts only by chance; six do.
constexpr int kRunOffRounds = 4;

// Most steps the trials take after the plan is made (0 without trials): what
// a benchmark leaves untimed to time the plan that is kept. A run-off included.
constexpr int maxTrialSteps(int steps) {
  return steps > 1 ? (kMaxTrialCandidates * trialRounds(steps) + 2 * kRunOffRounds) * kTrialVisitSteps : 0;
}

// Whether an online re-plan goes on trial against the running plan: only
// when the refitted model, which priced both, predicts it faster by more
// than `margin` of the running plan's prediction (the least a trial keeps
// a plan for). Non-finite or non-positive predictions: no.
bool replanWorthTrial(double running_s, double replan_s, double margin);

// The candidate of each visit: `rounds` rounds over `candidates`, forward
// then backward.
std::vector<size_t> trialOrder(size_t candidates, int rounds);

// The candidate to keep, from each candidate's timed steps (seconds; empty:
// none timed): the fastest mean, if it beats the first's by more than
// `margin` of it and by more than the standard error of the difference
// (the within-candidate variance pooled over every candidate with two or
// more visits). `why` (may be null) gets a line for the log. `*run_off`
// (may be null): where the first is kept although the fastest beat it by
// more than the margin (not by the standard error), that candidate, to run
// off against the first (kRunOffRounds); else 0.
size_t chooseTrial(const std::vector<std::vector<double>>& samples, double margin, std::string* why,
                   size_t* run_off = nullptr);

// Rank 0's `*choice` (an index below `candidates`) to every rank: the one
// collective of a trial's end. Not OK (a failed broadcast, or a corrupt
// index) leaves *choice 0, the first candidate, on this rank.
Status broadcastTrialChoice(Communicator& comm, size_t candidates, size_t* choice);

// The candidate with the shortest mean step (each with at least 2 samples;
// the first kept if it has fewer) wins, by any gain. For candidates that
// change only how fast a step runs, never what it computes (dense fusion
// thresholds): a switch between equals costs nothing, while a rule that
// keeps the first unless another beats it by a margin and a standard error
// kept Horovod's 64 MiB where 16 emulated hosts ran it 5-15 % slower than
// the others after the trials (bench/NOTES.md).
size_t chooseFastest(const std::vector<std::vector<double>>& samples, std::string* why);

// The visits of candidates on trial, stepped at the job's step boundaries:
// which candidate runs, each candidate's timed steps and which candidates
// have run. The merge plan trials (replanner.h) and the dense fusion
// threshold trials (fusion_trials.h) step through their visits with it; each
// decides what a switch means (a plan applied, a threshold set) and what to
// keep at the end. Every rank steps alike; only a `timed` rank records.
class TrialVisits {
 public:
  // `candidates` in trialOrder(candidates, rounds), visits of
  // kTrialVisitSteps steps, candidate current() = 0 running from `now`.
  // `skip_first`: the first step of each visit is not timed.
  void start(size_t candidates, int rounds, bool skip_first, bool timed, Clock::time_point now = Clock::now());
  bool active() const { return !order_.empty(); }

  enum class Step {
    kOn,        // the running candidate runs on
    kSwitched,  // current() is another candidate from the next step
    kDone,      // every visit ran: samples() hold the times
  };
  // A step ended at `now`: timed (per the visit), and the visits advanced.
  Step boundary(Clock::time_point now = Clock::now());

  size_t current() const { return order_[visit_]; }
  // After kSwitched: current() had not run before.
  bool firstRun() const { return first_run_; }
  // Candidates that have run (since start()).
  uint64_t started() const { return started_count_; }
  // Each candidate's timed steps, seconds (empty on an untimed rank).
  const std::vector<std::vector<double>>& samples() const { return samples_; }
  size_t visits() const { return order_.size(); }
  // Ends the visits (started() is kept).
  void clear();

 private:
  std::vector<size_t> order_;
  size_t visit_ = 0;
  int visit_steps_ = 0;
  bool skip_first_ = false, timed_ = false, first_run_ = false;
  std::vector<std::vector<double>> samples_;
  std::vector<char> started_;
  uint64_t started_count_ = 0;
  Clock::time_point last_{};
};

}  // namespace mgs
