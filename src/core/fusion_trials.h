// Dense jobs' fusion threshold, chosen by measurement (MGS_FUSION_TRIALS).
//
// A job without a compressor gets no merge plan: its small dense allreduces
// are fused as they become ready, per coordinator cycle, up to a threshold
// (fusion.h). Which threshold is fastest depends on the model, the link and
// the world size (docs/benchmarks.md: 4 MB to 128 MB were best in different
// cells, Horovod's 64 MiB in few). So after kFusionTrialStartStep steps the
// job runs the threshold MGS_FUSION_THRESHOLD_BYTES = T and T/4, T/16 and 2T
// on trial, the way the sparse plan's candidates run (plan_trials.h: visits
// of kTrialVisitSteps steps in rounds of alternating order; here every step
// of a visit is timed), and keeps the one with the shortest mean step on
// rank 0's clock, by any gain (chooseFastest: a switch between equals
// changes no sum).
// Candidates that cannot fuse differently (at or above the step's fusable
// bytes: every one of them fuses whatever a cycle holds) run once.
//
// Steps are found from the negotiated allreduces themselves: a step ends
// when a tensor name seen in it comes again. The negotiated list is the same
// on every rank, and so is every decision made from it; rank 0's choice is
// broadcast.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/plan_trials.h"
#include "core/request.h"

namespace mgs {

// Steps run on T before the trials start (the first steps allocate, fault
// pages in and fill caches).
constexpr uint64_t kFusionTrialStartStep = 5;

// Candidate thresholds for T, in trial order (T first: it is kept unless
// another runs faster). `fusable_bytes`: a step's bytes of fusable
// allreduces. Candidates at or above it fuse alike; only the first of them
// is kept. Fewer than two candidates: nothing to try.
std::vector<int64_t> fusionCandidates(int64_t threshold, uint64_t fusable_bytes);

class FusionTrials {
 public:
  // Enabled for a job without a compressor, with MGS_FUSION_TRIALS=1,
  // MGS_PLAN_TRIAL_STEPS >= 2 and a threshold > 0.
  FusionTrials(Communicator& comm, const Config& config);

  // One coordinator cycle's negotiated allreduces (in negotiated order; the
  // same on every rank): names and wire bytes, and whether each could be
  // fused. Advances the steps and the trials; returns the threshold to fuse
  // this cycle with.
  int64_t onCycle(const std::vector<const std::string*>& names, const std::vector<size_t>& bytes,
                  const std::vector<char>& fusable);

  int64_t threshold() const { return threshold_; }
  uint64_t trials() const { return visits_.started(); }  // candidates run on trial
  // Off, or the trials have ended: threshold() is final.
  bool done() const { return done_; }
  // A candidate other than the settled threshold may be running: the
  // trials have started and not ended.
  bool trying() const { return visits_.active(); }

 private:
  void boundary();
  void start();
  void finish();

  Communicator& comm_;
  const int rounds_;
  int64_t threshold_;
  const int64_t base_;
  uint64_t steps_ = 0;
  std::unordered_set<std::string> seen_;  // names in the current step
  uint64_t fusable_bytes_ = 0;            // the current step's fusable bytes
  uint64_t fusable_count_ = 0;            // ... and allreduces
  bool done_;                             // off, or the trials ran (or were skipped)
  std::vector<int64_t> candidates_;
  TrialVisits visits_;
};

}  // namespace mgs
