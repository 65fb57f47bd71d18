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
// The fusion bound (mgs_stats_t.fusion_max_tensor_bytes) is the same on
// every rank, at least 64 KiB, and 64 KiB under MGS_CALIBRATION=off.
// With MGS_TIMELINE set, rank 0 reads its timeline after mgs_shutdown: every
// ALLREDUCE span of the job's tensors names the threshold it was fused under
// and whether that was a trial candidate, and those agree with the stats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi_harness.h"

using mpitest::cpuTensor;
using mpitest::g_rank;
using mpitest::gatherAll;

namespace {

constexpr int kSteps = 32, kTensors = 12, kElems = 256, kStartStep = 5;
constexpr uint64_t kT = 4096;

float input(int rank, int step, int t, int i) { return static_cast<float>(rank + 1) * 0.5f + step + t * 0.01f + i; }

std::vector<float> threshold_after(kSteps), trials_after(kSteps);

void run(bool trials_on) {
  int size = 0;
  mgs_size(&size);
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
  {
    // The fusion bound (calibration.h): measured at init from timings
    // max-reduced over ranks, so the same everywhere; never below 64 KiB;
    // exactly 64 KiB when nothing was measured.
    mgs_stats_t st{};
    EXPECT_OK(mgs_get_stats(&st, sizeof st));
    const auto bound = static_cast<float>(st.fusion_max_tensor_bytes);
    const std::vector<float> all = gatherAll("fusion bound", std::vector<float>{bound});
    for (float b : all) EXPECT(b == bound, "fusion bounds differ across ranks: %.0f and %.0f", b, bound);
    EXPECT(bound >= 65536, "fusion bound %.0f below 64 KiB", bound);
    const char* cal = std::getenv("MGS_CALIBRATION");
    if (cal && std::strcmp(cal, "off") == 0) EXPECT(bound == 65536, "MGS_CALIBRATION=off, fusion bound %.0f", bound);
    if (g_rank == 0) std::printf("fusion bound: %.0f bytes\n", bound);
  }
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

// The ALLREDUCE spans of "dense.*" in rank 0's timeline against the
// thresholds the stats reported; returns the failures.
int checkTimeline(const char* path, bool trials_on) {
  int failures = 0;
  auto fail = [&](const std::string& what) {
    ++failures;
    std::fprintf(stderr, "[rank 0] timeline %s: %s\n", path, what.c_str());
  };
  std::FILE* f = std::fopen(path, "r");
  if (!f) {
    fail("cannot open");
    return failures;
  }
  std::string text;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  const nlohmann::json events = nlohmann::json::parse(text, nullptr, false);
  if (!events.is_array()) {
    fail("not a JSON array");
    return failures;
  }
  std::set<int> tracks;  // tids of the job's tensors
  for (const auto& e : events)
    if (e.value("ph", "") == "M" && e.contains("args") && e["args"].value("name", "").rfind("dense.", 0) == 0)
      tracks.insert(e.value("tid", 0));
  struct Span {
    double ts;
    int64_t threshold;
    bool trial;
  };
  std::vector<Span> spans;
  for (const auto& e : events) {
    if (e.value("ph", "") != "X" || e.value("name", "") != "ALLREDUCE" || !tracks.count(e.value("tid", 0))) continue;
    const auto& a = e.contains("args") ? e["args"] : nlohmann::json::object();
    if (!a.contains("fusion_threshold") || !a.contains("fusion_trial") || !a.contains("tensors") ||
        !a.contains("bytes")) {
      fail("an ALLREDUCE span without its fusion args: " + e.dump());
      continue;
    }
    const int64_t t = a["fusion_threshold"].get<int64_t>(), bytes = a["bytes"].get<int64_t>();
    // Fused groups stay under the threshold they were fused with.
    if (a["tensors"].get<int>() > 1 && bytes > t)
      fail("a group of " + a["tensors"].dump() + " over its threshold: " + a.dump());
    spans.push_back({e.value("ts", 0.0), t, a["fusion_trial"].get<bool>()});
  }
  if (spans.size() != static_cast<size_t>(kSteps * kTensors))
    fail(std::to_string(spans.size()) + " ALLREDUCE spans of the job's tensors, not " +
         std::to_string(kSteps * kTensors));
  if (spans.empty()) return failures;
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.ts < b.ts; });
  std::set<float> in_timeline, in_stats(threshold_after.begin(), threshold_after.end());
  size_t trial = 0;
  for (const Span& s : spans) {
    in_timeline.insert(static_cast<float>(s.threshold));
    trial += s.trial;
  }
  if (in_timeline != in_stats) fail("the thresholds in the timeline are not those the stats reported");
  if (spans.front().threshold != static_cast<int64_t>(kT) || spans.front().trial)
    fail("the first allreduce did not run T untried");
  if (spans.back().threshold != static_cast<int64_t>(threshold_after[kSteps - 1]) || spans.back().trial)
    fail("the last allreduce did not run the kept threshold untried");
  if (trials_on ? trial == 0 : trial != 0)
    fail(std::to_string(trial) + " spans marked as fusion trials with the trials " + (trials_on ? "on" : "off"));
  if (failures == 0)
    std::printf("timeline: %zu ALLREDUCE spans, %zu on trial, %zu thresholds, all as the stats say\n", spans.size(),
                trial, in_timeline.size());
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init failed: %s\n", mgs_last_error());
    return 1;
  }
  mgs_rank(&g_rank);
  const bool trials_on = !(argc > 1 && std::strcmp(argv[1], "off") == 0);
  run(trials_on);
  int rc = mpitest::finish();
  mgs_shutdown();  // closes the timeline
  const char* timeline = std::getenv("MGS_TIMELINE");
  if (g_rank == 0 && timeline && *timeline && checkTimeline(timeline, trials_on) != 0) rc = 1;
  return rc;
}
