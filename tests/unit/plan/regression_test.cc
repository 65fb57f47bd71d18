// Regression vectors of algorithms.md §12.2 and the cost-model examples of
// §12.4. Layers are written in the papers' forward order and converted.
#include <catch2/catch.hpp>

#include "plan/plan.h"
#include "plan_test_util.h"

namespace mgs::plan {
namespace {

using test::fromForward;

// Paper indices {3},{2,1,0} of L = 4 are backward groups {0},{1,2,3}.
const std::vector<LayerInfo> kV1 = fromForward({1, 3, 3, 3}, {7, 5, 2, 7});
const ElementCost kV1Allreduce = [](int64_t n) { return n > 0 ? 4.0 + n : 0.0; };

const std::vector<LayerInfo> kV2 = fromForward({1, 2, 1}, {7, 2, 5});
const ElementCost kV2Allgather = [](int64_t n) { return n > 0 ? 2.0 + n : 0.0; };
const ElementCost kV2Select = [](int64_t n) { return n * n / 8.0; };

TEST_CASE("V1: MG-WFBP optimum 32, greedy 35, no merge 40", "[plan][regression]") {
  const auto dp = planMgwfbp(kV1, kV1Allreduce);
  CHECK(dp.predicted_s == 32.0);
  CHECK(dp.groups == Groups{{0}, {1, 2, 3}});
  const auto greedy = planMgwfbpGreedy(kV1, kV1Allreduce, 4.0);
  CHECK(greedy.predicted_s == 35.0);
  CHECK(greedy.groups == Groups{{0, 1, 2, 3}});
  CHECK(denseTime(kV1, planLayerwise(4), kV1Allreduce) == 40.0);
}

TEST_CASE("V1 timeline: comm of layer 3 runs 3..14, group {2,1,0} 14..32", "[plan][regression]") {
  const auto t = denseTimeline(kV1, {{0}, {1, 2, 3}}, kV1Allreduce);
  REQUIRE(t.size() == 2);
  CHECK(t[0].comm_start_s == 3.0);
  CHECK(t[0].comm_end_s == 14.0);
  CHECK(t[1].ready_s == 10.0);
  CHECK(t[1].elements == 14);
  CHECK(t[1].comm_start_s == 14.0);
  CHECK(t[1].comm_end_s == 32.0);
}

TEST_CASE("V2: MGS optimum 24.125, fixed greedy 28.25, released 44.5", "[plan][regression]") {
  const auto dp = planMgs(kV2, kV2Allgather, kV2Select);
  CHECK(dp.predicted_s == 24.125);
  CHECK(dp.groups == Groups{{0}, {1}, {2}});
  const auto fixed = planMgsGreedy(kV2, kV2Allgather, kV2Select);
  CHECK(fixed.predicted_s == 28.25);
  CHECK(fixed.groups == Groups{{0}, {1, 2}});
  const auto released = planMgsGreedy(kV2, kV2Allgather, kV2Select, /*released=*/true);
  CHECK(released.predicted_s == 44.5);
  CHECK(released.groups == Groups{{0, 1, 2}});
}

TEST_CASE("worked example: GK allgather model, P = 16, ResNet-50 size = 0.05981 s", "[plan][regression][cost]") {
  CostModel m;
  m.density = 0.001;
  REQUIRE(costModelPreset("gk-1gbe-P16", &m).ok());
  CHECK(m.density == 0.001);
  CHECK(m.workers == 16);
  CHECK(m.allgatherSeconds(25557032) == Approx(0.05981).epsilon(1e-4));
  // Below the 1 MiB (values) switch the small table applies.
  CHECK(m.allgatherSeconds(1000000) == Approx(2 * (1.7e-3 + 1.7e-8 * 1000 * 16 * 4)));
}

TEST_CASE("t_s = c*n*log2(n) reproduces the §2.3 table", "[plan][regression][cost]") {
  const SparsifyModel ts{SparsifyModel::Kind::kNLogN, 2.18896957e-10};
  CHECK(ts.seconds(1000000) == Approx(4.36e-3).epsilon(2e-3));
  CHECK(ts.seconds(10000000) == Approx(50.9e-3).epsilon(2e-3));
  CHECK(ts.seconds(25557032) == Approx(137.7e-3).epsilon(2e-3));
  CHECK(ts.seconds(100000000) == Approx(581.7e-3).epsilon(2e-3));
  CHECK(ts.seconds(1) == 0.0);
  CHECK(ts.seconds(0) == 0.0);
}

TEST_CASE("computePlan names reproduce V1 and V2 through the CostModel", "[plan][regression]") {
  PlanInput in;
  in.cost.bytes_per_element = 1;
  in.cost.workers = 1;
  in.cost.density = 1.0;  // k = n, so allgather bytes = n*(1+4): scale beta to match V2
  in.cost.allreduce = CommModel::linear(4.0, 1.0);
  in.layers = kV1;
  Plan plan;
  REQUIRE(computePlan("mgwfbp", in, &plan).ok());
  CHECK(plan.predicted_s == 32.0);
  CHECK_FALSE(plan.sparse);
  REQUIRE(computePlan("mgwfbp-greedy", in, &plan).ok());
  CHECK(plan.predicted_s == 35.0);

  // V2 with a linear t_s is a different instance; check the model plumbing:
  // T_ag(n) = 2 + n needs beta = 1/5 per byte of n*(1 value + 4 index) bytes.
  in.layers = kV2;
  in.cost.allgather = CommModel::linear(2.0, 0.2);
  in.cost.sparsify = {SparsifyModel::Kind::kLinear, 0.0};
  REQUIRE(computePlan("mgs", in, &plan).ok());
  double brute = test::bruteForce(
                     kV2, kV2Allgather, [](int64_t) { return 0.0; }, true)
                     .best;
  CHECK(plan.predicted_s == Approx(brute));
  CHECK(plan.sparse);
}

}  // namespace
}  // namespace mgs::plan
