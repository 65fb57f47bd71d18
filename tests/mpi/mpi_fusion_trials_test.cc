// Dense jobs' fusion threshold trials under mpirun (core/fusion_trials.h):
//   mpirun -np {2,4} mgs_mpi_fusion_trials_test
// with MGS_FUSION_THRESHOLD_BYTES=4096 set by ctest. Each step averages 12
// dense float tensors of 1 KiB (12 KiB a step, all fusable), so the
// candidates are 4096, 1024, 256 and 8192 bytes. A step that ran on T = 4096
// pauses 40 ms afterwards (a threshold slower in a way no model sees), so
// the trials must keep another one. Asserted on every rank:
//   - the threshold in use (mgs_stats_t.fusion_threshold_bytes, read after
//     each step) and the trial count are the same on every rank at every
//     step: every rank switches at the same boundary;
//   - the first kFusionTrialStartStep steps run T, then all four candidates
//     run, and the job ends on one that is not T;
//   - every output is the exact average of the ranks' inputs at every step.
// With MGS_FUSION_TRIALS=0 (argument "off") every step runs T, untried.
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mpi_harness.h"

using mpitest::cpuTensor;
using mpitest::g_rank;
using mpitest::gatherAll;

namespace {

constexpr int kSteps = 32, kTensors = 12, kElems = 256, kStartStep = 5;
constexpr uint64_t kT = 4096;

float input(int rank, int step, int t, int i) { return static_cast<float>(rank + 1) * 0.5f + step + t * 0.01f + i; }

void run(bool trials_on) {
  int size = 0;
  mgs_size(&size);
  std::vector<float> threshold_after(kSteps), trials_after(kSteps);
  std::vector<std::vector<float>> x(kTensors, std::vector<float>(kElems)), out = x;
  int bad = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<mgs_handle_t> h(kTensors);
    const std::vector<int64_t> shape = {kElems};
    for (int t = 0; t < kTensors; ++t) {
      for (int i = 0; i < kElems; ++i) x[t][i] = input(g_rank, step, t, i);
      mgs_tensor_t in = cpuTensor(x[t].data(), MGS_FLOAT32, shape);
      mgs_tensor_t o = cpuTensor(out[t].data(), MGS_FLOAT32, shape);
      EXPECT_OK(
          mgs_allreduce_async(("dense." + std::to_string(t)).c_str(), &in, &o, MGS_REDUCE_AVERAGE, 1, 1, 0, &h[t]));
    }
    for (int t = 0; t < kTensors; ++t) {
      EXPECT_OK(mgs_wait(h[t]));
      mgs_release(h[t]);
    }
    for (int t = 0; t < kTensors; ++t)
      for (int i = 0; i < kElems; ++i) {
        double ref = 0;
        for (int r = 0; r < size; ++r) ref += input(r, step, t, i);
        ref /= size;
        bad += std::fabs(out[t][i] - ref) > 1e-5 * std::max(1.0, std::fabs(ref));
      }
    mgs_stats_t st{};
    EXPECT_OK(mgs_get_stats(&st, sizeof st));
    threshold_after[step] = static_cast<float>(st.fusion_threshold_bytes);
    trials_after[step] = static_cast<float>(st.fusion_trials);
    if (st.fusion_threshold_bytes == kT) std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  EXPECT(bad == 0, "%d outputs differ from the average of the ranks' inputs", bad);
  const std::vector<float> all_t = gatherAll("threshold", threshold_after);
  const std::vector<float> all_n = gatherAll("trials", trials_after);
  int differ = 0;
  for (int r = 1; r < size; ++r)
    for (int s = 0; s < kSteps; ++s)
      differ += all_t[r * kSteps + s] != threshold_after[s] || all_n[r * kSteps + s] != trials_after[s];
  EXPECT(differ == 0, "%d per-step fusion thresholds or trial counts differ across ranks", differ);
  std::set<float> seen(threshold_after.begin(), threshold_after.end());
  std::string list;
  for (float t : threshold_after) list += std::to_string(static_cast<long long>(t)) + " ";
  if (g_rank == 0) std::printf("thresholds by step: %s; %.0f tried\n", list.c_str(), trials_after[kSteps - 1]);
  if (!trials_on) {
    EXPECT(seen.size() == 1 && *seen.begin() == kT && trials_after[kSteps - 1] == 0,
           "MGS_FUSION_TRIALS=0, but the thresholds were %s and %.0f tried", list.c_str(), trials_after[kSteps - 1]);
    return;
  }
  for (int s = 0; s < kStartStep; ++s)
    EXPECT(threshold_after[s] == kT, "step %d ran threshold %.0f before the trials", s, threshold_after[s]);
  EXPECT(seen == (std::set<float>{4096, 1024, 256, 8192}), "thresholds run: %s", list.c_str());
  EXPECT(trials_after[kSteps - 1] == 4, "%.0f thresholds tried, not 4", trials_after[kSteps - 1]);
  EXPECT(threshold_after[kSteps - 1] != kT,
         "the job ended on T = %llu, though every step on it paused 40 ms (thresholds: %s)", (unsigned long long)kT,
         list.c_str());
  // After the trials the kept threshold runs on.
  EXPECT(threshold_after[kSteps - 1] == threshold_after[kSteps - 4], "the threshold moved after the trials: %s",
         list.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init failed: %s\n", mgs_last_error());
    return 1;
  }
  mgs_rank(&g_rank);
  run(!(argc > 1 && std::strcmp(argv[1], "off") == 0));
  const int rc = mpitest::finish();
  mgs_shutdown();
  return rc;
}
