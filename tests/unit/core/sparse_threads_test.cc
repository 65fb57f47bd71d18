// The sparse pipeline with ranks as threads: reference equality, dense
// fallback, re-planning on a new tensor set, and partially submitted buckets.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "thread_ranks.h"

using namespace mgs;
using mgs::test::cpuDesc;
using mgs::test::laplace;
using mgs::test::runRanks;
using mgs::test::waitRelease;

namespace {

Config sparseConfig(const std::string& compressor, double density) {
  Config c;
  c.compressor = compressor;
  c.density = density;
  c.profile_steps = 2;
  c.min_sparse_elements = 1000;
  c.calibration = "off";
  return c;
}

struct RankStep {
  std::vector<std::vector<float>> sent, out;
};

// Runs `steps` steps of `sizes` tensors on P thread ranks; records what each
// rank sent (input + residual before - residual after) and received.
std::vector<std::vector<RankStep>> run(int P, const Config& config, const std::vector<int64_t>& sizes, int steps,
                                       std::vector<SparseStats>* stats = nullptr) {
  std::vector<std::vector<RankStep>> rec(P, std::vector<RankStep>(steps));
  std::vector<int> failed(P, 0);  // ops that completed with an error (checked after the threads)
  if (stats) stats->assign(P, SparseStats{});
  runRanks(P, config, [&](Runtime& rt, int rank) {
    std::mt19937 rng(rank * 7919 + 1);
    for (int s = 0; s < steps; ++s) {
      const size_t L = sizes.size();
      std::vector<std::vector<float>> x(L), before(L), out(L);
      std::vector<uint64_t> ids(L);
      for (size_t t = 0; t < L; ++t) {
        x[t].resize(sizes[t]);
        for (auto& v : x[t]) v = laplace(rng);
        before[t].resize(sizes[t]);
        rt.residuals().read("t" + std::to_string(t), before[t].data(), sizes[t]);
        out[t].assign(sizes[t], 0.0f);
      }
      for (size_t j = 0; j < L; ++j) {
        const size_t t = (rank % 2) ? L - 1 - j : j;
        TensorDesc in = cpuDesc(x[t].data(), MGS_FLOAT32, {sizes[t]});
        TensorDesc o = cpuDesc(out[t].data(), MGS_FLOAT32, {sizes[t]});
        if (!rt.enqueueAllreduce("t" + std::to_string(t), in, o, MGS_REDUCE_AVERAGE, 1, 1, MGS_FLAG_SPARSE_OK, &ids[t])
                 .ok())
          return;
      }
      for (size_t t = 0; t < L; ++t) failed[rank] += !waitRelease(rt, ids[t]).ok();
      for (size_t t = 0; t < L; ++t) {
        std::vector<float> after(sizes[t]);
        rt.residuals().read("t" + std::to_string(t), after.data(), sizes[t]);
        std::vector<float> sent(sizes[t]);
        for (int64_t i = 0; i < sizes[t]; ++i) sent[i] = (x[t][i] + before[t][i]) - after[i];
        rec[rank][s].sent.push_back(std::move(sent));
        rec[rank][s].out.push_back(std::move(out[t]));
      }
    }
    if (stats) (*stats)[rank] = rt.sparseStats();
  });
  CHECK(failed == std::vector<int>(P, 0));
  return rec;
}

// Max |result - average of what the ranks sent| over all steps, tensors, ranks.
float referenceError(const std::vector<std::vector<RankStep>>& rec, int P) {
  float worst = 0;
  for (size_t s = 0; s < rec[0].size(); ++s)
    for (size_t t = 0; t < rec[0][s].out.size(); ++t)
      for (size_t i = 0; i < rec[0][s].out[t].size(); ++i) {
        float ref = 0.0f;
        for (int r = 0; r < P; ++r) ref += rec[r][s].sent[t][i];
        ref *= static_cast<float>(1.0 / P);
        for (int r = 0; r < P; ++r) worst = std::max(worst, std::fabs(rec[r][s].out[t][i] - ref));
      }
  return worst;
}

}  // namespace

TEST_CASE("sparse results equal the average of the selected pairs, for every selector", "[sparse]") {
  for (const char* sel : {"topk", "gaussiank", "ldte", "dgc", "randomk"}) {
    for (int P : {1, 2, 3}) {
      INFO(sel << " P=" << P);
      std::vector<SparseStats> stats;
      auto rec = run(P, sparseConfig(sel, 0.01), {3000, 1200, 5000}, 5, &stats);
      CHECK(referenceError(rec, P) == 0.0f);
      for (int r = 0; r < P; ++r) {
        CHECK(stats[r].plans == 1);  // planned after 2 profile steps
        CHECK(stats[r].plan_buckets >= 1);
        CHECK(stats[r].plan_buckets == stats[0].plan_buckets);
        // Published after each cycle, so it may trail the last completion by one step.
        CHECK(stats[r].steps >= 3);
        CHECK(stats[r].steps <= 4);
        if (P > 1 && stats[r].buckets > 0) CHECK(stats[r].bytes_sent < stats[r].dense_bytes);
      }
      // Every rank received exactly the same bits.
      for (int r = 1; r < P; ++r)
        for (size_t s = 0; s < rec[0].size(); ++s)
          for (size_t t = 0; t < rec[0][s].out.size(); ++t)
            CHECK(std::memcmp(rec[r][s].out[t].data(), rec[0][s].out[t].data(), rec[0][s].out[t].size() * 4) == 0);
    }
  }
}

TEST_CASE("candidate merge plans run on trial at the same steps everywhere, and every rank keeps the same one",
          "[sparse][trials]") {
  const std::vector<int64_t> sizes = {3000, 1200, 5000, 2500, 4000, 1800, 2200};
  for (int P : {2, 3}) {
    INFO("P=" << P);
    Config config = sparseConfig("gaussiank", 0.01);
    config.plan_trial_steps = 2;
    config.warmup_steps = 0;  // trials wait for the density warm-up's end
    // 2 profile steps, at most 5 candidates x 2 steps, then the kept plan.
    std::vector<SparseStats> stats;
    auto rec = run(P, config, sizes, 15, &stats);
    // Switching plans between steps loses nothing and keeps the ranks in step.
    CHECK(referenceError(rec, P) == 0.0f);
    for (int r = 1; r < P; ++r)
      for (size_t s = 0; s < rec[0].size(); ++s)
        for (size_t t = 0; t < rec[0][s].out.size(); ++t)
          CHECK(std::memcmp(rec[r][s].out[t].data(), rec[0][s].out[t].data(), rec[0][s].out[t].size() * 4) == 0);
    for (int r = 0; r < P; ++r) {
      CHECK(stats[r].plans == 1);        // one planner run ...
      CHECK(stats[r].plan_trials >= 2);  // ... whose candidates (DP plan, uniform cuts) ran on trial
      CHECK(stats[r].plan_trials == stats[0].plan_trials);
      CHECK(stats[r].plan_buckets >= 1);
      CHECK(stats[r].plan_buckets == stats[0].plan_buckets);
    }
  }
}

TEST_CASE("plan trials wait for the density warm-up's end; the plan runs untried until then", "[sparse][trials]") {
  const std::vector<int64_t> sizes = {3000, 1200, 5000, 2500, 4000, 1800, 2200};
  const int P = 2;
  Config config = sparseConfig("gaussiank", 0.01);
  config.plan_trial_steps = 2;
  config.profile_steps = 2;
  for (int64_t warmup : {40, 8}) {
    INFO("warm-up " << warmup);
    config.warmup_steps = warmup;
    // 30 steps: the profile ends at step 2, inside both warm-ups; the trials
    // (at most 5 candidates x 2 steps) fit after a warm-up of 8, not of 40.
    std::vector<SparseStats> stats;
    auto rec = run(P, config, sizes, 30, &stats);
    CHECK(referenceError(rec, P) == 0.0f);
    for (int r = 0; r < P; ++r) {
      CHECK(stats[r].plans == 1);  // the trials after the warm-up are the same plan's, not a new one
      if (warmup == 40)
        CHECK(stats[r].plan_trials == 0);  // still inside the warm-up: the DP's plan, untried
      else
        CHECK(stats[r].plan_trials >= 2);
      CHECK(stats[r].plan_trials == stats[0].plan_trials);
      CHECK(stats[r].plan_buckets == stats[0].plan_buckets);
    }
  }
}

TEST_CASE("MGS_PLAN_TRIAL_STEPS=0, or a planner other than mgs, keeps the plan untried", "[sparse][trials]") {
  for (const char* planner : {"mgs", "fusion"}) {
    INFO(planner);
    Config config = sparseConfig("gaussiank", 0.01);
    config.planner = planner;
    if (std::string(planner) == "mgs") config.plan_trial_steps = 0;
    std::vector<SparseStats> stats;
    auto rec = run(2, config, {3000, 1200, 5000, 2500}, 5, &stats);
    CHECK(referenceError(rec, 2) == 0.0f);
    for (int r = 0; r < 2; ++r) {
      CHECK(stats[r].plans == 1);
      CHECK(stats[r].plan_trials == 0);
    }
  }
}

TEST_CASE("a bucket falls back to dense when density x P >= 1, keeping nothing", "[sparse]") {
  std::vector<SparseStats> stats;
  auto rec = run(2, sparseConfig("topk", 0.6), {2000, 4000}, 3, &stats);
  CHECK(referenceError(rec, 2) <= 1e-6f);
  for (int r = 0; r < 2; ++r) {
    CHECK(stats[r].dense_buckets > 0);
    CHECK(stats[r].buckets == 0);
    // Dense buckets send everything: what was sent equals the whole input.
    for (const auto& step : rec[r])
      for (const auto& sent : step.sent)
        CHECK(std::none_of(sent.begin(), sent.end(), [](float v) { return v == 0.0f; }));
  }
}

TEST_CASE("a new tensor set drops the plan and plans again after profiling", "[sparse]") {
  const int P = 2;
  std::vector<SparseStats> stats(P);
  Config config = sparseConfig("gaussiank", 0.01);
  std::vector<int> failed(P, 0);
  runRanks(P, config, [&](Runtime& rt, int rank) {
    std::vector<float> a(2000, 1.0f), b(3000, 2.0f), c(1500, 3.0f);
    auto step = [&](bool with_c) {
      std::vector<uint64_t> ids;
      for (auto* v : {&a, &b, &c}) {
        if (v == &c && !with_c) continue;
        const std::string name = v == &a ? "a" : v == &b ? "b" : "c";
        TensorDesc d = cpuDesc(v->data(), MGS_FLOAT32, {static_cast<int64_t>(v->size())});
        uint64_t id;
        if (rt.enqueueAllreduce(name, d, d, MGS_REDUCE_SUM, 1, 1, MGS_FLAG_SPARSE_OK, &id).ok()) ids.push_back(id);
      }
      for (auto id : ids) failed[rank] += !waitRelease(rt, id).ok();
    };
    for (int s = 0; s < 4; ++s) step(false);  // profile 2 steps, plan, 2 planned steps
    for (int s = 0; s < 5; ++s) step(true);   // "c" is new: re-profile, re-plan
    stats[rank] = rt.sparseStats();
  });
  CHECK(failed == std::vector<int>(P, 0));
  for (int r = 0; r < P; ++r) {
    CHECK(stats[r].plans == 2);
    CHECK(stats[r].plan_buckets >= 1);
  }
}

TEST_CASE("a bucket whose member is not submitted still completes", "[sparse]") {
  const int P = 2;
  std::vector<int> completed(P, 0);
  Config config = sparseConfig("topk", 0.01);
  config.planner = "single";  // one bucket holding every tensor
  runRanks(P, config, [&](Runtime& rt, int rank) {
    std::vector<float> a(2000, 1.0f), b(3000, 2.0f);
    for (int s = 0; s < 5; ++s) {
      const bool skip_b = s == 4;  // after planning, no rank submits "b"
      uint64_t ia = 0, ib = 0;
      TensorDesc da = cpuDesc(a.data(), MGS_FLOAT32, {2000}), db = cpuDesc(b.data(), MGS_FLOAT32, {3000});
      if (!rt.enqueueAllreduce("a", da, da, MGS_REDUCE_SUM, 1, 1, MGS_FLAG_SPARSE_OK, &ia).ok()) return;
      if (!skip_b && !rt.enqueueAllreduce("b", db, db, MGS_REDUCE_SUM, 1, 1, MGS_FLAG_SPARSE_OK, &ib).ok()) return;
      if (waitRelease(rt, ia).ok()) ++completed[rank];
      if (!skip_b && waitRelease(rt, ib).ok()) ++completed[rank];
    }
  });
  CHECK(completed == std::vector<int>{9, 9});  // 5 of "a", 4 of "b"
}

TEST_CASE("buckets that one round declares ready run in plan order, not in the order the round lists them",
          "[sparse]") {
  // Layer-wise: a bucket per tensor, in the order rank 0 enqueued them (the
  // plan's order). The names are enqueued against their alphabetical order
  // and all at once, so one negotiation round declares several buckets, and
  // lists them in its own (name) order. The pipeline finishes exchanges in
  // the order it started them, so the buckets' measured ends must follow
  // the plan's order.
  const int P = 2;
  Config config = sparseConfig("topk", 0.01);
  config.planner = "layerwise";
  config.warmup_steps = 0;
  const std::vector<std::string> names = {"f", "e", "d", "c", "b", "a"};
  const int steps = 8;
  std::vector<SparseStats> stats(P);
  std::vector<int> failed(P, 0);
  runRanks(P, config, [&](Runtime& rt, int rank) {
    std::mt19937 rng(rank + 11);
    const int64_t n = 4000;
    for (int s = 0; s < steps; ++s) {
      std::vector<std::vector<float>> x(names.size(), std::vector<float>(n)), out(names.size(), std::vector<float>(n));
      std::vector<uint64_t> ids(names.size());
      for (size_t t = 0; t < names.size(); ++t) {
        for (auto& v : x[t]) v = laplace(rng);
        TensorDesc in = cpuDesc(x[t].data(), MGS_FLOAT32, {n});
        TensorDesc o = cpuDesc(out[t].data(), MGS_FLOAT32, {n});
        if (!rt.enqueueAllreduce(names[t], in, o, MGS_REDUCE_AVERAGE, 1, 1, MGS_FLAG_SPARSE_OK, &ids[t]).ok()) return;
      }
      for (size_t t = 0; t < names.size(); ++t) failed[rank] += !waitRelease(rt, ids[t]).ok();
    }
    stats[rank] = rt.sparseStats();
  });
  CHECK(failed == std::vector<int>(P, 0));
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r);
    const auto& b = stats[r].plan_bucket;
    REQUIRE(b.size() == names.size());
    int compared = 0;
    for (size_t g = 0; g + 1 < b.size(); ++g) {
      if (b[g].checks == 0 || b[g + 1].checks == 0) continue;
      ++compared;
      INFO("bucket " << g << " ended at " << b[g].measured_end_sum_us / b[g].checks << " us on average, bucket "
                     << g + 1 << " at " << b[g + 1].measured_end_sum_us / b[g + 1].checks);
      CHECK(b[g].measured_end_sum_us * b[g + 1].checks <= b[g + 1].measured_end_sum_us * b[g].checks);
    }
    CHECK(compared >= 3);
  }
}
