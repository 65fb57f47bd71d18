// computePlan: names, validation, determinism, baselines and the front cap.
#include "plan/plan.h"

#include <catch2/catch.hpp>

#include "plan_test_util.h"

namespace mgs::plan {
namespace {

using test::randomInput;

TEST_CASE("every planner name gives a valid plan with its own objective", "[plan]") {
  const PlanInput in = randomInput(21, 40);
  for (const auto& name : plannerNames()) {
    INFO(name);
    Plan plan;
    REQUIRE(computePlan(name, in, &plan).ok());
    CHECK(plan.planner == name);
    REQUIRE(validateGroups(plan.groups, 40).ok());
    double again = 0;
    REQUIRE(evaluatePlan(in, plan.groups, plan.sparse, &again).ok());
    CHECK(test::relClose(again, plan.predicted_s));
  }
}

TEST_CASE("the DPs beat or tie every other planner on their own model", "[plan]") {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const PlanInput in = randomInput(100 + seed, 60);
    Plan mgs, mgwfbp, other;
    REQUIRE(computePlan("mgs", in, &mgs).ok());
    REQUIRE(computePlan("mgwfbp", in, &mgwfbp).ok());
    for (const auto& name : plannerNames()) {
      REQUIRE(computePlan(name, in, &other).ok());
      double sparse = 0, dense = 0;
      REQUIRE(evaluatePlan(in, other.groups, true, &sparse).ok());
      REQUIRE(evaluatePlan(in, other.groups, false, &dense).ok());
      CHECK(mgs.predicted_s <= sparse * (1 + 1e-12));
      CHECK(mgwfbp.predicted_s <= dense * (1 + 1e-12));
    }
  }
}

TEST_CASE("planners are deterministic", "[plan]") {
  const PlanInput in = randomInput(22, 120);
  for (const auto& name : plannerNames()) {
    Plan a, b;
    REQUIRE(computePlan(name, in, &a).ok());
    REQUIRE(computePlan(name, in, &b).ok());
    CHECK(a.groups == b.groups);
    CHECK(a.predicted_s == b.predicted_s);
  }
}

TEST_CASE("ties break toward the shorter last group", "[plan]") {
  // Free communication: every plan ends when backward ends.
  PlanInput in = randomInput(23, 6);
  in.cost.allreduce = CommModel::linear(0.0, 0.0);
  Plan plan;
  REQUIRE(computePlan("mgwfbp", in, &plan).ok());
  CHECK(plan.groups == planLayerwise(6));
}

TEST_CASE("unknown planner and invalid input are errors", "[plan]") {
  PlanInput in = randomInput(24, 5);
  Plan plan;
  const Status st = computePlan("optimal", in, &plan);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message().find("mgwfbp-greedy") != std::string::npos);
  in.cost.density = 0;
  CHECK(computePlan("mgs", in, &plan).code() == Code::kInvalidArgument);
  in = randomInput(24, 5);
  in.layers[2].backward_s = -1;
  CHECK(computePlan("mgs", in, &plan).code() == Code::kInvalidArgument);
  in = randomInput(24, 5);
  in.cost.workers = 0;
  CHECK(computePlan("layerwise", in, &plan).code() == Code::kInvalidArgument);
}

TEST_CASE("bad groups are rejected when evaluating", "[plan]") {
  const PlanInput in = randomInput(25, 4);
  double t = 0;
  CHECK(evaluatePlan(in, {{0, 1}, {3}}, true, &t).code() == Code::kInvalidArgument);
  CHECK(evaluatePlan(in, {{0, 1}, {2}}, true, &t).code() == Code::kInvalidArgument);
  CHECK(evaluatePlan(in, {{0}, {}, {1, 2, 3}}, true, &t).code() == Code::kInvalidArgument);
  CHECK(evaluatePlan(in, {{1, 0}, {2, 3}}, true, &t).code() == Code::kInvalidArgument);
  CHECK(evaluatePlan(in, {{0, 1}, {2, 3}}, true, &t).ok());
}

TEST_CASE("fusion closes a group once it reaches the threshold", "[plan]") {
  std::vector<LayerInfo> layers = {{"a", 10, 1}, {"b", 20, 1}, {"c", 5, 1}, {"d", 40, 1}, {"e", 1, 1}};
  CHECK(planFusion(layers, 120, 4) == Groups{{0, 1}, {2, 3}, {4}});
  CHECK(planFusion(layers, 0, 4) == planLayerwise(5));
  CHECK(planFusion(layers, 1 << 30, 4) == planSingle(5));
  PlanInput in;
  in.layers = layers;
  in.fusion_threshold_bytes = 120;
  in.sparse = false;
  Plan plan;
  REQUIRE(computePlan("fusion", in, &plan).ok());
  CHECK(plan.groups == Groups{{0, 1}, {2, 3}, {4}});
  CHECK_FALSE(plan.sparse);
}

TEST_CASE("no layers gives an empty plan", "[plan]") {
  PlanInput in;
  for (const auto& name : plannerNames()) {
    Plan plan;
    REQUIRE(computePlan(name, in, &plan).ok());
    CHECK(plan.groups.empty());
    CHECK(plan.predicted_s == 0.0);
  }
}

TEST_CASE("the mgs front cap is reported when hit", "[plan]") {
  PlanInput in = randomInput(26, 14);
  in.cost.allgather = CommModel::linear(2.0, 2e-3);  // comm ~ compute: larger fronts
  Plan full, capped;
  REQUIRE(computePlan("mgs", in, &full).ok());
  CHECK_FALSE(full.front_capped);
  REQUIRE(full.max_front > 1);
  in.front_cap = 1;
  REQUIRE(computePlan("mgs", in, &capped).ok());
  CHECK(capped.front_capped);
  CHECK(capped.max_front == 1);
  CHECK(capped.predicted_s >= full.predicted_s);
  double check = 0;
  REQUIRE(evaluatePlan(in, capped.groups, true, &check).ok());
  CHECK(test::relClose(check, capped.predicted_s));
}

}  // namespace
}  // namespace mgs::plan
