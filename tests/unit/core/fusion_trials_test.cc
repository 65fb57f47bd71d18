// Dense jobs' fusion threshold trials (core/fusion_trials.h): the candidate
// thresholds, and the trials themselves over thread "ranks", which must
// switch at the same step boundaries and keep the same threshold.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/fake/thread_communicator.h"
#include "core/fusion_trials.h"
#include "core/plan_trials.h"

using namespace mgs;

namespace {
constexpr int64_t kMiB = 1 << 20;
}

TEST_CASE("fusion trials: candidates are T, T/4, T/16 and 2T, alike ones once", "[core][fusion_trials]") {
  const int64_t T = 64 * kMiB;
  REQUIRE(fusionCandidates(T, 1024ull * kMiB) == std::vector<int64_t>{T, T / 4, T / 16, 2 * T});
  // 10 MiB of fusable allreduces a step: T, T/4 and 2T each fuse all of
  // whatever a cycle holds; T stands for them.
  REQUIRE(fusionCandidates(T, 10 * kMiB) == std::vector<int64_t>{T, T / 16});
  // 20 MiB: T/4 (16 MiB) cuts, 2T does not.
  REQUIRE(fusionCandidates(T, 20 * kMiB) == std::vector<int64_t>{T, T / 4, T / 16});
  REQUIRE(fusionCandidates(T, kMiB).size() == 1);
  REQUIRE(fusionCandidates(0, kMiB).empty());
  REQUIRE(fusionCandidates(8, kMiB) == std::vector<int64_t>{8, 2, 16});  // 8/16 rounds to 0: left out
  // The largest T the variable takes: 2T saturates instead of overflowing,
  // and fuses all, like T.
  const int64_t big = INT64_MAX;
  REQUIRE(fusionCandidates(big, uint64_t{1} << 62) == std::vector<int64_t>{big, big / 4, big / 16});
  REQUIRE(fusionCandidates(big / 2 + 1, UINT64_MAX) ==
          std::vector<int64_t>{big / 2 + 1, (big / 2 + 1) / 4, (big / 2 + 1) / 16, big});
}

namespace {

// P thread ranks run `steps` steps of `tensors` allreduces of 1 KiB, one
// cycle each; a step lasts step_ms(threshold in use). Returns each rank's
// threshold at every step and its trial count at the end.
struct Run {
  std::vector<std::vector<int64_t>> thresholds;
  std::vector<uint64_t> trials;
};

Run runTrials(int P, const Config& config, int steps, int tensors, int64_t (*step_ms)(int64_t)) {
  auto world = std::make_shared<ThreadWorld>(P);
  Run run;
  run.thresholds.assign(P, {});
  run.trials.assign(P, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(world, r);
      FusionTrials trials(comm, config);
      std::vector<std::string> names;
      for (int t = 0; t < tensors; ++t) names.push_back("grad." + std::to_string(t));
      std::vector<const std::string*> ptrs;
      for (const auto& n : names) ptrs.push_back(&n);
      const std::vector<size_t> bytes(tensors, 1024);
      const std::vector<char> fusable(tensors, 1);
      for (int s = 0; s < steps; ++s) {
        const int64_t t = trials.onCycle(ptrs, bytes, fusable);
        run.thresholds[r].push_back(t);
        std::this_thread::sleep_for(std::chrono::milliseconds(step_ms(t)));
      }
      run.trials[r] = trials.trials();
    });
  for (auto& t : threads) t.join();
  return run;
}

Config denseConfig() {
  Config c;
  c.fusion_threshold_bytes = 4096;  // candidates 4096, 1024, 256, 8192 for 8 KiB of allreduces a step
  return c;
}

}  // namespace

TEST_CASE("fusion trials: every rank tries the thresholds at the same steps and keeps the fastest",
          "[core][fusion_trials]") {
  const Config c = denseConfig();
  const int steps = 40;
  // T/16 makes the step 5x shorter than the rest: the trials must keep it.
  const Run run = runTrials(3, c, steps, 8, [](int64_t t) -> int64_t { return t == 256 ? 4 : 20; });
  for (int r = 1; r < 3; ++r) REQUIRE(run.thresholds[r] == run.thresholds[0]);
  REQUIRE(run.trials[0] == 4);
  // The first steps run T, then the candidates; the job ends on the kept one.
  for (int s = 0; s <= static_cast<int>(kFusionTrialStartStep) - 1; ++s) REQUIRE(run.thresholds[0][s] == 4096);
  REQUIRE(run.thresholds[0].back() == 256);
  std::vector<int64_t> distinct;
  for (int64_t t : run.thresholds[0])
    if (std::find(distinct.begin(), distinct.end(), t) == distinct.end()) distinct.push_back(t);
  REQUIRE(distinct == std::vector<int64_t>{4096, 1024, 256, 8192});
  // Every candidate ran 2 visits of kTrialVisitSteps steps.
  for (int64_t t : distinct) {
    if (t == 4096 || t == 256) continue;  // T also before and 256 after the trials
    REQUIRE(std::count(run.thresholds[0].begin(), run.thresholds[0].end(), t) == 2 * kTrialVisitSteps);
  }
}

TEST_CASE("fusion trials: T is kept when it runs fastest", "[core][fusion_trials]") {
  const Run run = runTrials(2, denseConfig(), 30, 8, [](int64_t t) -> int64_t { return t == 4096 ? 10 : 30; });
  REQUIRE(run.thresholds[1] == run.thresholds[0]);
  REQUIRE(run.trials[0] == 4);
  REQUIRE(run.thresholds[0].back() == 4096);
}

TEST_CASE("fusion trials: off without trials, with a compressor, with nothing to fuse", "[core][fusion_trials]") {
  auto flat = [](int64_t) -> int64_t { return 1; };
  Config off = denseConfig();
  off.fusion_trials = false;
  Config untried = denseConfig();
  untried.plan_trial_steps = 1;
  Config sparse = denseConfig();
  sparse.compressor = "gaussiank";
  Config none = denseConfig();
  none.fusion_threshold_bytes = 0;
  for (const Config& c : {off, untried, sparse, none}) {
    const Run run = runTrials(2, c, 25, 8, flat);
    REQUIRE(run.trials[0] == 0);
    for (int64_t t : run.thresholds[0]) REQUIRE(t == c.fusion_threshold_bytes);
  }
  // One allreduce a step: fusion cannot differ.
  const Run one = runTrials(2, denseConfig(), 25, 1, flat);
  REQUIRE(one.trials[0] == 0);
  for (int64_t t : one.thresholds[0]) REQUIRE(t == 4096);
}

TEST_CASE("trial choice: rank 0's index reaches every rank; one out of range is refused on every rank",
          "[core][fusion_trials][plan_trials]") {
  for (size_t sent : {size_t{2}, size_t{7}}) {
    auto world = std::make_shared<ThreadWorld>(3);
    std::vector<size_t> got(3, 99);
    std::vector<std::string> errors(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        ThreadCommunicator comm(world, r);
        size_t choice = r == 0 ? sent : 5;  // other ranks' own values are ignored
        const Status st = broadcastTrialChoice(comm, 4, &choice);
        got[r] = choice;
        if (!st.ok()) errors[r] = st.message();
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; ++r) {
      INFO("rank " << r << ", sent " << sent);
      REQUIRE(got[r] == (sent < 4 ? sent : 0));
      REQUIRE(errors[r].empty() == (sent < 4));
      if (sent >= 4) REQUIRE(errors[r].find("'7'") != std::string::npos);
    }
  }
}
