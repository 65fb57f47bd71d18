// Counters of the sparse pipeline, published through the C ABI (the sparse_*
// fields of mgs_stats_t).
#pragma once

#include <cstdint>
#include <vector>

namespace mgs {

// One bucket of the plan that runs, predicted against measured (the online
// check's compared steps; mgs_get_plan_buckets). Times from the step's first
// gradient, microseconds.
struct PlanBucketStat {
  uint64_t tensors = 0, elements = 0;
  int64_t predicted_end_us = -1;     // the plan's end of its exchange; -1: not known
  uint64_t measured_end_us = 0;      // the last compared step: outputs written, mean over ranks
  uint64_t measured_end_sum_us = 0;  // summed over `checks`
  uint64_t checks = 0;               // compared steps in which every rank finished it
  int64_t predicted_ready_us = -1;   // the plan's round that declares it ready everywhere; -1: not known
  uint64_t measured_ready_us = 0;    // the last compared step: when it was declared ready, mean over ranks
  uint64_t measured_ready_sum_us = 0;
};

struct SparseStats {
  uint64_t steps = 0;           // completed steps
  uint64_t buckets = 0;         // buckets exchanged sparsely
  uint64_t agreed_buckets = 0;  // of those, by the agreed-index exchange (exchange_agreed.cc)
  uint64_t hierarchical_buckets = 0;  // of those, by the hierarchical exchange (exchange_hierarchical.cc)
  uint64_t dense_buckets = 0;   // buckets the cost model sent dense
  uint64_t selected = 0;        // entries this rank sent
  uint64_t target = 0;          // k summed over sparse buckets
  uint64_t bytes_sent = 0;      // values + indices this rank sent (dense buckets: the payload)
  uint64_t dense_bytes = 0;     // what a dense allreduce would have sent
  uint64_t plan_buckets = 0;    // buckets in the current plan (0: profiling)
  uint64_t plans = 0;           // plans computed
  uint64_t plan_trials = 0;     // candidate plans run on trial (MGS_PLAN_TRIAL_STEPS)
  uint64_t plan_trial_running = 0;  // 1 while candidates run on trial (a run-off included), else 0
  uint64_t replans_rejected = 0;  // online re-plans whose plan lost its trial against the running plan
  uint64_t in_flight_max = 0;   // most buckets in flight at once
  uint64_t warmup_steps = 0;    // MGS_WARMUP_STEPS as resolved ('auto': by density; 0: none)
  // Rank 0: the negotiation round the last plan was priced at (us) and the
  // timed rounds it is the mean of (0: the calibration's).
  uint64_t plan_round_us = 0, plan_rounds_timed = 0;
  // Which path each finished bucket (sparse or dense) took, and the bytes
  // this rank sent on it (BucketPath). Their sums are buckets + dense_buckets
  // and bytes_sent.
  uint64_t path_buckets[4] = {0, 0, 0, 0};
  uint64_t path_bytes[4] = {0, 0, 0, 0};
  // The online check of the plan (MGS_REPLAN_TOLERANCE): steps compared, and
  // the last one's span predicted by the plan and measured (mean over ranks,
  // the same on every rank), in microseconds.
  uint64_t span_checks = 0;
  uint64_t span_predicted_us = 0, span_measured_us = 0;
  // Over the compared steps of the plan that runs now (reset when one is chosen).
  uint64_t span_plan_checks = 0, span_predicted_sum_us = 0, span_measured_sum_us = 0;
  // Over every compared step of the job (span_checks of them), whichever plan ran.
  uint64_t span_predicted_total_us = 0, span_measured_total_us = 0;
  // Per bucket of the plan that runs (empty while profiling, or a plan file's).
  std::vector<PlanBucketStat> plan_bucket;
};

// Where a bucket's gradients lived while it was fused, selected and exchanged.
enum class BucketPath : int {
  kHost = 0,      // host tensors, host selection, MPI
  kStaged = 1,    // CUDA tensors copied to host memory, host selection, MPI (the slow fallback)
  kResident = 2,  // CUDA tensors selected on their GPU; only the compact block crossed to the host for MPI
  kDevice = 3,    // the whole bucket on the GPU: selection, NCCL exchange and scatter (no host copy, no sync)
};
inline const char* bucketPathName(BucketPath p) {
  switch (p) {
    case BucketPath::kHost: return "host";
    case BucketPath::kStaged: return "staged";
    case BucketPath::kResident: return "resident";
    case BucketPath::kDevice: return "device";
  }
  return "?";
}

}  // namespace mgs
