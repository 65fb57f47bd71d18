// Plan trials (replanner.h, MGS_PLAN_TRIAL_STEPS): in which order the
// candidate plans run, and which one is kept. Pure functions, the same on
// every rank; rank 0 alone times the steps and broadcasts its choice.
//
// Step times drift while a job warms up (allocator, caches, the online
// model's first refits), so candidates that run one after the other are
// compared at different points of the drift. The candidates therefore run
// in visits of kTrialVisitSteps steps (the first of each visit left out: the
// plan's fusion buffers are new), in rounds whose order alternates,
// 0 1 .. C-1 then C-1 .. 1 0, so that a drift linear in time adds the same
// to every candidate's mean. A candidate replaces the first (the dynamic
// program's plan) only when its mean step is shorter by more than both the
// margin and the spread measured between visits of the same candidates.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/communicator.h"

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

// Most steps the trials take after the plan is made (0 without trials): what
// a benchmark leaves untimed to time the plan that is kept.
constexpr int maxTrialSteps(int steps) {
  return steps > 1 ? kMaxTrialCandidates * kTrialVisitSteps * trialRounds(steps) : 0;
}

// The candidate of each visit: `rounds` rounds over `candidates`, forward
// then backward.
std::vector<size_t> trialOrder(size_t candidates, int rounds);

// The candidate to keep, from each candidate's timed steps (seconds; empty:
// none timed). `why` (may be null) gets a line for the log.
size_t chooseTrial(const std::vector<std::vector<double>>& samples, double margin, std::string* why);

// Rank 0's `*choice` (an index below `candidates`) to every rank: the one
// collective of a trial's end. Not OK (a failed broadcast, or a corrupt
// index) leaves *choice 0, the first candidate, on this rank.
Status broadcastTrialChoice(Communicator& comm, size_t candidates, size_t* choice);

// The same choice with the standard error in place of the spread: the
// fastest mean replaces the first if its gain exceeds the margin and `z`
// standard errors of the difference of the two means (each candidate with
// at least 2 samples). For candidates that change only how fast a step
// runs, never what it computes (dense fusion thresholds): a needless switch
// between equals costs nothing, and the range of 4 samples, unlike that of
// 2, grows with the samples, so the spread rule kept the first plan where
// 16 emulated hosts ran others 3-8 % faster.
size_t chooseTrialByError(const std::vector<std::vector<double>>& samples, double margin, double z, std::string* why);

}  // namespace mgs
