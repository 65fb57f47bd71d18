// The greedy planners reproduce the authors' rules (algorithms.md §4.2, §5.2,
// §12.3). The references below are literal transcriptions of the released
// array code, in forward order, recomputing every array after each merge;
// the library streams the same decisions in backward order.
#include <catch2/catch.hpp>

#include "plan/planners.h"
#include "plan_test_util.h"

namespace mgs::plan {
namespace {

// Forward-order arrays from backward-order layers.
struct Arrays {
  std::vector<double> tb;
  std::vector<int64_t> p;
  explicit Arrays(const std::vector<LayerInfo>& layers) {
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) tb.push_back(it->backward_s), p.push_back(it->elements);
  }
};

// Forward-index groups (each listed L-1 first) to backward-order lengths.
std::vector<int> lengthsOf(const std::vector<std::vector<int>>& groups) {
  std::vector<int> lengths;
  for (const auto& g : groups) lengths.push_back(static_cast<int>(g.size()));
  return lengths;
}

// MW _generate_groups_mgwfbp; `single_test` swaps in B-Caffe's one inequality.
std::vector<int> mwReference(const std::vector<LayerInfo>& layers, const ElementCost& T, double a, bool single_test) {
  Arrays ar(layers);
  const int L = static_cast<int>(ar.tb.size());
  std::vector<double> taob(L), tc(L), taoc(L);
  taob[L - 1] = 0;
  for (int l = L - 2; l >= 0; --l) taob[l] = taob[l + 1] + ar.tb[l + 1];
  for (int l = 0; l < L; ++l) tc[l] = T(ar.p[l]);
  auto recompute = [&] {
    taoc[L - 1] = taob[L - 1] + ar.tb[L - 1];
    for (int l = L - 2; l >= 0; --l) taoc[l] = std::max(taoc[l + 1] + tc[l + 1], taob[l] + ar.tb[l]);
  };
  recompute();
  std::vector<std::vector<int>> groups;
  std::vector<int> group;
  for (int l = L - 1; l >= 1; --l) {
    group.push_back(l);
    const double ready_prev = taob[l - 1] + ar.tb[l - 1];
    bool merge = false;
    if (single_test) {
      merge = ready_prev - taoc[l] < a;
    } else if (ready_prev < taoc[l] + tc[l]) {
      merge = taoc[l] > ready_prev || ready_prev - taoc[l] < a;
    }
    if (merge) {
      tc[l] = 0;
      ar.p[l - 1] += ar.p[l];
      ar.p[l] = 0;
      tc[l - 1] = T(ar.p[l - 1]);
      recompute();
    } else {
      groups.push_back(group), group.clear();
    }
  }
  group.push_back(0);
  groups.push_back(group);
  return lengthsOf(groups);
}

// OM _generate_groups_mgs, fixed loop (L-1..1) or released (L-1 pre-inserted).
std::vector<int> omReference(const std::vector<LayerInfo>& layers, const ElementCost& tag, const ElementCost& tsf,
                             bool released) {
  Arrays ar(layers);
  const int L = static_cast<int>(ar.tb.size());
  std::vector<double> ts(L), tc(L), taob(L), taos(L), taoc(L);
  for (int l = 0; l < L; ++l) ts[l] = tsf(ar.p[l]), tc[l] = tag(ar.p[l]);
  auto recompute = [&] {
    taob[L - 1] = 0;
    taos[L - 1] = ar.tb[L - 1];
    for (int l = L - 2; l >= 0; --l) taob[l] = taos[l + 1] + ts[l + 1], taos[l] = taob[l] + ar.tb[l];
    taoc[L - 1] = taos[L - 1] + ts[L - 1];
    for (int l = L - 2; l >= 0; --l) taoc[l] = std::max(taoc[l + 1] + tc[l + 1], taos[l] + ts[l]);
  };
  recompute();
  std::vector<std::vector<int>> groups;
  std::vector<int> group;
  if (released) group.push_back(L - 1);
  for (int l = released ? L - 2 : L - 1; l >= 1; --l) {
    group.push_back(l);
    const double tw = ar.tb[l - 1] + tsf(ar.p[l] + ar.p[l - 1]) - ts[l] - ts[l - 1] - (taoc[l] - (taos[l] + ts[l]));
    const double tsave = tc[l] + tc[l - 1] - tag(ar.p[l] + ar.p[l - 1]);
    if (tw < tsave) {
      ar.tb[l - 1] += ar.tb[l], ar.tb[l] = 0;
      ar.p[l - 1] += ar.p[l], ar.p[l] = 0;
      ts[l] = tc[l] = 0;
      ts[l - 1] = tsf(ar.p[l - 1]), tc[l - 1] = tag(ar.p[l - 1]);
      recompute();
    } else {
      groups.push_back(group), group.clear();
    }
  }
  group.push_back(0);
  groups.push_back(group);
  return lengthsOf(groups);
}

TEST_CASE("mgwfbp-greedy equals the authors' recompute code and B-Caffe's test", "[plan][greedy]") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> ua(0.05, 3.0), ub(1e-4, 2e-3);
  for (int t = 0; t < 500; ++t) {
    const double a = ua(rng), b = ub(rng);
    const ElementCost T = [a, b](int64_t n) { return n > 0 ? a + b * n : 0.0; };
    const auto layers = test::randomLayers(rng, std::uniform_int_distribution<int>(2, 30)(rng));
    const auto lengths = groupLengths(planMgwfbpGreedy(layers, T, a).groups);
    REQUIRE(lengths == mwReference(layers, T, a, false));
    REQUIRE(lengths == mwReference(layers, T, a, true));
  }
}

TEST_CASE("mgs-greedy equals the authors' recompute code, fixed and released", "[plan][greedy]") {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> ua(0.05, 3.0), ub(1e-4, 2e-3), uc(1e-4, 2e-3);
  for (int t = 0; t < 500; ++t) {
    const double a = ua(rng), b = ub(rng);
    const SparsifyModel sm{SparsifyModel::Kind::kNLogN, uc(rng)};
    const ElementCost ag = [a, b](int64_t n) { return n > 0 ? a + b * n : 0.0; };
    const ElementCost ts = [sm](int64_t n) { return sm.seconds(n); };
    const auto layers = test::randomLayers(rng, std::uniform_int_distribution<int>(2, 30)(rng));
    REQUIRE(groupLengths(planMgsGreedy(layers, ag, ts).groups) == omReference(layers, ag, ts, false));
    REQUIRE(groupLengths(planMgsGreedy(layers, ag, ts, true).groups) == omReference(layers, ag, ts, true));
  }
}

TEST_CASE("greedy planners report their plan's objective", "[plan][greedy]") {
  std::mt19937_64 rng(13);
  const ElementCost ag = [](int64_t n) { return n > 0 ? 1.0 + 1e-3 * n : 0.0; };
  const ElementCost ts = [](int64_t n) { return 2e-4 * n; };
  for (int t = 0; t < 50; ++t) {
    const auto layers = test::randomLayers(rng, 20);
    const auto g = planMgsGreedy(layers, ag, ts);
    CHECK(g.predicted_s == sparseTime(layers, g.groups, ag, ts));
    const auto w = planMgwfbpGreedy(layers, ag, 1.0);
    CHECK(w.predicted_s == denseTime(layers, w.groups, ag));
  }
}

}  // namespace
}  // namespace mgs::plan
