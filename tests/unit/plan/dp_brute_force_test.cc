// Both exact planners against the brute-force oracle over all 2^(L-1) plans
// (algorithms.md §12.1), on random instances with L <= 14.
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>

#include "plan/planners.h"
#include "plan_test_util.h"

namespace mgs::plan {
namespace {

using test::bruteForce;
using test::randomLayers;
using test::relClose;

constexpr int kInstances = 1000;

// Half the instances are near the top of the range, where fronts are larger.
int randomLength(std::mt19937_64& rng) {
  const bool large = std::bernoulli_distribution(0.5)(rng);
  return std::uniform_int_distribution<int>(large ? 11 : 1, 14)(rng);
}

// Runs the DP, checks it against the oracle and against the objective
// evaluated on its own groups. Returns how many instances had a greedy plan
// strictly worse than the optimum (the DP must never be beaten).
template <typename Planner, typename Greedy>
int checkAgainstOracle(std::mt19937_64& rng, bool sparse, const ElementCost& comm, const ElementCost& select,
                       Planner plan, Greedy greedy, Selection selection = Selection::kCompute) {
  int greedy_worse = 0;
  for (int t = 0; t < kInstances; ++t) {
    const auto layers = randomLayers(rng, randomLength(rng));
    const PlannerResult r = plan(layers);
    const auto oracle = bruteForce(layers, comm, select, sparse, selection);
    INFO("instance " << t << ", L = " << layers.size());
    REQUIRE(validateGroups(r.groups, static_cast<int>(layers.size())).ok());
    REQUIRE(relClose(r.predicted_s, oracle.best));
    const double own =
        sparse ? sparseTime(layers, r.groups, comm, select, selection) : denseTime(layers, r.groups, comm);
    REQUIRE(relClose(own, r.predicted_s));
    REQUIRE_FALSE(r.front_capped);
    const PlannerResult g = greedy(layers);
    REQUIRE(g.predicted_s >= oracle.best * (1 - 1e-12));
    if (g.predicted_s > oracle.best * (1 + 1e-9)) ++greedy_worse;
  }
  return greedy_worse;
}

TEST_CASE("mgwfbp DP equals brute force, linear allreduce", "[plan][dp]") {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> ua(0.05, 3.0), ub(1e-4, 2e-3);
  const double a = ua(rng), b = ub(rng);
  const ElementCost ar = [a, b](int64_t n) { return n > 0 ? a + b * n : 0.0; };
  const ElementCost none = [](int64_t) { return 0.0; };
  const int worse = checkAgainstOracle(
      rng, false, ar, none, [&](const auto& l) { return planMgwfbp(l, ar); },
      [&](const auto& l) { return planMgwfbpGreedy(l, ar, a); });
  // The authors' rule is not optimal (§4.3); random instances expose it.
  CHECK(worse > 0);
}

TEST_CASE("mgwfbp DP equals brute force, random cost per instance", "[plan][dp]") {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> ua(0.05, 3.0), ub(1e-4, 2e-3);
  for (int rep = 0; rep < 2; ++rep) {
    // rep 0: a new linear model every 50 instances; rep 1: tables.
    for (int block = 0; block < 20; ++block) {
      const double a = ua(rng), b = ub(rng);
      const CommModel table = test::randomTable(rng);
      const ElementCost ar = rep == 0 ? ElementCost([a, b](int64_t n) { return n > 0 ? a + b * n : 0.0; })
                                      : ElementCost([table](int64_t n) { return table.seconds(n); });
      for (int t = 0; t < kInstances / 20; ++t) {
        const auto layers = randomLayers(rng, randomLength(rng));
        const auto r = planMgwfbp(layers, ar);
        const auto oracle = bruteForce(layers, ar, nullptr, false);
        REQUIRE(relClose(r.predicted_s, oracle.best));
        REQUIRE(relClose(denseTime(layers, r.groups, ar), oracle.best));
      }
    }
  }
}

TEST_CASE("mgs DP equals brute force, c*n*log2(n) selection, linear allgather", "[plan][dp]") {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> ua(0.05, 3.0), ub(1e-4, 2e-3), uc(1e-4, 2e-3);
  const double a = ua(rng), b = ub(rng);
  const SparsifyModel ts{SparsifyModel::Kind::kNLogN, uc(rng)};
  const ElementCost ag = [a, b](int64_t n) { return n > 0 ? a + b * n : 0.0; };
  const ElementCost sel = [ts](int64_t n) { return ts.seconds(n); };
  const int worse = checkAgainstOracle(
      rng, true, ag, sel, [&](const auto& l) { return planMgs(l, ag, sel); },
      [&](const auto& l) { return planMgsGreedy(l, ag, sel); });
  CHECK(worse > 0);  // §5.3: the fixed rule loses on many instances
}

TEST_CASE("mgs DP, separate selection, equals brute force, c*n*log2(n) selection", "[plan][dp][selection]") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> ua(0.05, 3.0), ub(1e-4, 2e-3), uc(1e-4, 2e-3);
  const double a = ua(rng), b = ub(rng);
  const SparsifyModel ts{SparsifyModel::Kind::kNLogN, uc(rng)};
  const ElementCost ag = [a, b](int64_t n) { return n > 0 ? a + b * n : 0.0; };
  const ElementCost sel = [ts](int64_t n) { return ts.seconds(n); };
  const Selection sep = Selection::kSeparate;
  const int worse = checkAgainstOracle(
      rng, true, ag, sel, [&](const auto& l) { return planMgs(l, ag, sel, kDefaultFrontCap, sep); },
      [&](const auto& l) { return planMgsGreedy(l, ag, sel, false, sep); }, sep);
  // The greedy decides on the compute-stream model: no match for this one.
  CHECK(worse > 0);
}

// kInstances with linear selection, then kInstances with c*n*log2(n), on
// random allgather tables, a new cost model every 50 instances.
void tableInstances(std::mt19937_64& rng, Selection selection) {
  std::uniform_real_distribution<double> uc(1e-4, 2e-3);
  for (int block = 0; block < 40; ++block) {
    const CommModel table = test::randomTable(rng);
    const auto kind = block < 20 ? SparsifyModel::Kind::kLinear : SparsifyModel::Kind::kNLogN;
    const SparsifyModel ts{kind, uc(rng)};
    const ElementCost ag = [table](int64_t n) { return table.seconds(n); };
    const ElementCost sel = [ts](int64_t n) { return ts.seconds(n); };
    for (int t = 0; t < kInstances / 20; ++t) {
      const auto layers = randomLayers(rng, randomLength(rng));
      const auto r = planMgs(layers, ag, sel, kDefaultFrontCap, selection);
      const auto oracle = bruteForce(layers, ag, sel, true, selection);
      REQUIRE(relClose(r.predicted_s, oracle.best));
      REQUIRE(relClose(sparseTime(layers, r.groups, ag, sel, selection), oracle.best));
      REQUIRE_FALSE(r.front_capped);
    }
  }
}

TEST_CASE("mgs DP equals brute force, table allgather, both selection kinds", "[plan][dp]") {
  std::mt19937_64 rng(4);
  tableInstances(rng, Selection::kCompute);
}

TEST_CASE("mgs DP, separate selection, equals brute force, table allgather", "[plan][dp][selection]") {
  std::mt19937_64 rng(8);
  tableInstances(rng, Selection::kSeparate);
}

TEST_CASE("both DPs stay exact for a non-monotone cost (GK's table switch)", "[plan][dp]") {
  // GK's P=8 allgather is cheaper just above its 1 MiB switch than just
  // below it. Optimal substructure does not need monotone costs.
  const CommModel gk = CommModel::switched(3000, 4.0, 1.5e-3, 2.0, 8.2e-4);
  const ElementCost comm = [&gk](int64_t n) { return gk.seconds(n); };
  const ElementCost sel = [](int64_t n) { return 1e-4 * n; };
  std::mt19937_64 rng(5);
  for (int t = 0; t < 300; ++t) {
    const auto layers = randomLayers(rng, randomLength(rng));
    REQUIRE(relClose(planMgwfbp(layers, comm).predicted_s, bruteForce(layers, comm, sel, false).best));
    REQUIRE(relClose(planMgs(layers, comm, sel).predicted_s, bruteForce(layers, comm, sel, true).best));
    REQUIRE(relClose(planMgs(layers, comm, sel, kDefaultFrontCap, Selection::kSeparate).predicted_s,
                     bruteForce(layers, comm, sel, true, Selection::kSeparate).best));
  }
}

// The §5.4 pseudocode as written: every candidate, sorted, then filtered.
// No bounds, no early exits, no cap: the reference for L beyond brute force.
// Under kSeparate, T is the end of the selection stage.
double plainParetoDp(const std::vector<LayerInfo>& layers, const ElementCost& ag, const ElementCost& ts,
                     Selection selection = Selection::kCompute) {
  const int n = static_cast<int>(layers.size());
  std::vector<double> ready(n + 1, 0.0);
  for (int i = 0; i < n; ++i) ready[i + 1] = ready[i] + layers[i].backward_s;
  std::vector<std::vector<std::pair<double, double>>> front(n + 1);
  front[0] = {{0.0, 0.0}};
  for (int e = 1; e <= n; ++e) {
    std::vector<std::pair<double, double>> cand;
    int64_t S = 0;
    double B = 0;
    for (int s = e - 1; s >= 0; --s) {
      S += layers[s].elements;
      B += layers[s].backward_s;
      for (const auto& [T, C] : front[s]) {
        const double T2 = selection == Selection::kCompute ? T + B + ts(S) : std::max(T, ready[e]) + ts(S);
        cand.push_back({T2, std::max(C, T2) + ag(S)});
      }
    }
    std::sort(cand.begin(), cand.end());
    double best = std::numeric_limits<double>::infinity();
    for (const auto& c : cand)
      if (c.second < best) front[e].push_back(c), best = c.second;
  }
  return front[n].back().second;
}

// Returns the largest front the bounded DP kept.
int checkAgainstPlainDp(std::mt19937_64& rng, Selection selection) {
  std::uniform_real_distribution<double> ua(0.05, 3.0), ub(1e-4, 2e-3), uc(1e-5, 3e-4);
  int largest_front = 0;
  for (int t = 0; t < 150; ++t) {
    const double a = ua(rng), b = ub(rng);
    const SparsifyModel sm{SparsifyModel::Kind::kNLogN, uc(rng)};
    const ElementCost ag = [a, b](int64_t n) { return n > 0 ? a + b * n : 0.0; };
    const ElementCost ts = [sm](int64_t n) { return sm.seconds(n); };
    const auto layers = randomLayers(rng, std::uniform_int_distribution<int>(15, 60)(rng));
    const auto r = planMgs(layers, ag, ts, 1 << 20, selection);
    REQUIRE_FALSE(r.front_capped);
    REQUIRE(relClose(r.predicted_s, plainParetoDp(layers, ag, ts, selection)));
    REQUIRE(relClose(sparseTime(layers, r.groups, ag, ts, selection), r.predicted_s));
    largest_front = std::max(largest_front, r.max_front);
  }
  return largest_front;
}

TEST_CASE("mgs DP with its bounds equals the plain Pareto DP up to L = 60", "[plan][dp]") {
  std::mt19937_64 rng(6);
  CHECK(checkAgainstPlainDp(rng, Selection::kCompute) > 1);  // the instances do exercise the Pareto fronts
}

TEST_CASE("mgs DP, separate selection, equals the plain Pareto DP up to L = 60", "[plan][dp][selection]") {
  std::mt19937_64 rng(9);
  CHECK(checkAgainstPlainDp(rng, Selection::kSeparate) > 1);
}

}  // namespace
}  // namespace mgs::plan
