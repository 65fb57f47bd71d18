// Selection placement (timeline.h): the MGS paper's compute-stream model
// against the runtime's separate selection stage. Hand-computed vectors, the
// two models choosing different plans, and the option through computePlan.
#include <catch2/catch.hpp>

#include "plan/plan.h"
#include "plan/planners.h"
#include "plan_test_util.h"

namespace mgs::plan {
namespace {

using test::relClose;

// Backward order: tb = 4, 4, 1; sizes 4, 3, 2; t_s(n) = n^2/4;
// T_ag(n) = 2 + n. Every time below is exact in binary.
std::vector<LayerInfo> smallLayers() { return {{"a", 4, 4.0}, {"b", 3, 4.0}, {"c", 2, 1.0}}; }
const ElementCost kSelect = [](int64_t n) { return n * n / 4.0; };
const ElementCost kGather = [](int64_t n) { return 2.0 + n; };

TEST_CASE("separate selection timeline, hand-computed", "[plan][selection]") {
  // Layer-wise. Backward untouched: ready at 4, 8, 9.
  //   g0: selects 4 -> 8 (t_s 4), allgathers 8 -> 14 (6).
  //   g1: ready 8, selects 8 -> 10.25 (2.25), waits for g0's allgather: 14 -> 19.
  //   g2: ready 9 but the selection stage is busy until 10.25: selects
  //       10.25 -> 11.25, allgathers 19 -> 23.
  const auto t = sparseTimeline(smallLayers(), planLayerwise(3), kGather, kSelect, Selection::kSeparate);
  REQUIRE(t.size() == 3);
  const double want[3][5] = {{4, 4, 8, 8, 14}, {8, 8, 10.25, 14, 19}, {9, 10.25, 11.25, 19, 23}};
  for (int g = 0; g < 3; ++g) {
    INFO("group " << g);
    CHECK(t[g].first == g);
    CHECK(t[g].last == g);
    CHECK(t[g].ready_s == want[g][0]);
    CHECK(t[g].select_start_s == want[g][1]);
    CHECK(t[g].sparsified_s == want[g][2]);
    CHECK(t[g].comm_start_s == want[g][3]);
    CHECK(t[g].comm_end_s == want[g][4]);
  }
  // The same plan on the compute stream: selection delays backward.
  //   g0: T = 4 + 4 = 8, 8 -> 14; g1: T = 8 + 4 + 2.25 = 14.25, 14.25 -> 19.25;
  //   g2: T = 14.25 + 1 + 1 = 16.25, 19.25 -> 23.25.
  const auto c = sparseTimeline(smallLayers(), planLayerwise(3), kGather, kSelect);
  REQUIRE(c.size() == 3);
  CHECK(c[1].ready_s == 12.0);
  CHECK(c[1].select_start_s == 12.0);
  CHECK(c[1].sparsified_s == 14.25);
  CHECK(c[2].ready_s == 15.25);
  CHECK(c[2].comm_end_s == 23.25);
  CHECK(sparseTime(smallLayers(), planLayerwise(3), kGather, kSelect) == 23.25);
  CHECK(sparseTime(smallLayers(), planLayerwise(3), kGather, kSelect, Selection::kSeparate) == 23.0);
}

TEST_CASE("the two selection models choose different plans", "[plan][selection]") {
  // All four plans (lengths): compute model / separate model.
  //   {3}       40.25 / 40.25
  //   {1, 2}    26.25 / 22.25   (g1: ready 9, selects 9 -> 15.25, 15.25 -> 22.25)
  //   {2, 1}    33.25 / 33.25
  //   {1, 1, 1} 23.25 / 23.0
  const auto layers = smallLayers();
  const PlannerResult compute = planMgs(layers, kGather, kSelect);
  CHECK(compute.groups == planLayerwise(3));
  CHECK(compute.predicted_s == 23.25);
  const PlannerResult separate = planMgs(layers, kGather, kSelect, kDefaultFrontCap, Selection::kSeparate);
  CHECK(separate.groups == groupsFromLengths({1, 2}));
  CHECK(separate.predicted_s == 22.25);
  CHECK(sparseTime(layers, separate.groups, kGather, kSelect) == 26.25);
  // Both agree with the oracle.
  CHECK(test::bruteForce(layers, kGather, kSelect, true).lengths == std::vector<int>{1, 1, 1});
  CHECK(test::bruteForce(layers, kGather, kSelect, true, Selection::kSeparate).lengths == std::vector<int>{1, 2});
}

TEST_CASE("a separate selection stage never ends later than the compute stream", "[plan][selection]") {
  // sel_end_g <= compute_g by induction (compute_g >= ready_g + t_s and
  // >= compute_{g-1} + t_s), hence every comm end too, for any plan.
  std::mt19937_64 rng(31);
  const SparsifyModel ts{SparsifyModel::Kind::kNLogN, 5e-4};
  const ElementCost sel = [ts](int64_t n) { return ts.seconds(n); };
  const ElementCost ag = [](int64_t n) { return n > 0 ? 0.5 + 1e-3 * n : 0.0; };
  for (int t = 0; t < 200; ++t) {
    const auto layers = test::randomLayers(rng, 1 + t % 12);
    const auto oracle = test::bruteForce(layers, ag, sel, true, Selection::kCompute);
    const auto lengths = oracle.lengths;
    const auto c = sparseTimeline(layers, groupsFromLengths(lengths), ag, sel);
    const auto s = sparseTimeline(layers, groupsFromLengths(lengths), ag, sel, Selection::kSeparate);
    for (size_t g = 0; g < c.size(); ++g) {
      CHECK(s[g].sparsified_s <= c[g].sparsified_s * (1 + 1e-12));
      CHECK(s[g].comm_end_s <= c[g].comm_end_s * (1 + 1e-12));
    }
    CHECK(planMgs(layers, ag, sel, kDefaultFrontCap, Selection::kSeparate).predicted_s <= oracle.best * (1 + 1e-12));
  }
}

PlanInput randomInput(uint64_t seed, int n, Selection selection) {
  PlanInput in = test::randomInput(seed, n);
  in.selection = selection;
  return in;
}

TEST_CASE("PlanInput::selection reaches every sparse planner and the evaluation", "[plan][selection]") {
  int differ = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const PlanInput sep = randomInput(300 + seed, 50, Selection::kSeparate);
    PlanInput com = sep;
    com.selection = Selection::kCompute;
    Plan best;
    REQUIRE(computePlan("mgs", sep, &best).ok());
    CHECK(best.selection == Selection::kSeparate);
    for (const auto& name : plannerNames()) {
      INFO(name << ", seed " << seed);
      Plan p;
      REQUIRE(computePlan(name, sep, &p).ok());
      double again = 0;
      REQUIRE(evaluatePlan(sep, p.groups, p.sparse, &again).ok());
      CHECK(relClose(again, p.predicted_s));  // predicted on the separate model
      double s = 0;
      REQUIRE(evaluatePlan(sep, p.groups, true, &s).ok());
      CHECK(best.predicted_s <= s * (1 + 1e-12));  // the DP is optimal on it
    }
    Plan c;
    REQUIRE(computePlan("mgs", com, &c).ok());
    CHECK(best.predicted_s <= c.predicted_s * (1 + 1e-12));
    if (c.groups != best.groups) ++differ;
    // The dense planners ignore the option.
    Plan d1, d2;
    REQUIRE(computePlan("mgwfbp", sep, &d1).ok());
    REQUIRE(computePlan("mgwfbp", com, &d2).ok());
    CHECK(d1.groups == d2.groups);
    CHECK(d1.predicted_s == d2.predicted_s);
  }
  CHECK(differ > 0);
}

TEST_CASE("the default stays the compute stream", "[plan][selection]") {
  const PlanInput in;
  CHECK(in.selection == Selection::kCompute);
  const PlanInput com = randomInput(7, 30, Selection::kCompute);
  Plan p;
  REQUIRE(computePlan("mgs", com, &p).ok());
  const ElementCost ag = [&com](int64_t n) { return com.cost.allgatherSeconds(n); };
  const ElementCost sel = [&com](int64_t n) { return com.cost.sparsifySeconds(n); };
  const PlannerResult r = planMgs(com.layers, ag, sel, com.front_cap);
  CHECK(p.groups == r.groups);
  CHECK(p.predicted_s == r.predicted_s);
}

TEST_CASE("selection names and validation", "[plan][selection]") {
  Selection s = Selection::kCompute;
  CHECK(parseSelection("separate", &s));
  CHECK(s == Selection::kSeparate);
  CHECK(std::string(selectionName(s)) == "separate");
  CHECK(parseSelection("compute", &s));
  CHECK(s == Selection::kCompute);
  CHECK(std::string(selectionName(s)) == "compute");
  CHECK_FALSE(parseSelection("side", &s));
  CHECK(s == Selection::kCompute);
  PlanInput in = randomInput(8, 4, Selection::kCompute);
  in.selection = static_cast<Selection>(7);
  Plan p;
  CHECK(computePlan("mgs", in, &p).code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace mgs::plan
