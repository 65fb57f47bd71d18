// The coordinator's fixed CPU per group (CostModel::group_host_s) and busy
// cores (CostModel::host_steal): what a group costs the first stage, that the
// planner then merges further (and optimally, against every plan), and the
// cost-file fields.
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>

#include "plan/cost_model_io.h"
#include "plan/plan.h"
#include "plan/planners.h"
#include "plan_test_util.h"

namespace mgs::plan {
namespace {

CostModel agreedModel() { return test::threeExchangeModel(4, 0.001, 2e-4, 3e-4, 1e-4, 1e-8, 2e-9); }

// Twelve tensors of a small model, each ready 20 ms after the one before:
// communication is cheap next to backward, so without a per-group cost the
// planner keeps almost every tensor a group of its own.
std::vector<LayerInfo> twelveLayers() {
  std::vector<LayerInfo> l;
  for (int i = 0; i < 12; ++i) l.push_back({"t" + std::to_string(i), 200000 + 50000 * i, 0.02});
  return l;
}

double bestOverAllPlans(const PlanInput& in) {
  double best = std::numeric_limits<double>::infinity();
  for (const Groups& g : test::allPlans(static_cast<int>(in.layers.size()))) {
    double t = 0;
    REQUIRE(evaluatePlan(in, g, true, &t).ok());
    best = std::min(best, t);
  }
  return best;
}

}  // namespace

TEST_CASE("host cost: what a group costs the first stage", "[plan][host]") {
  CostModel c = agreedModel();
  const int64_t n = 1000000;
  const Exchange e = c.chooseExchange(n);
  CHECK(c.firstStageSeconds(e, n) == c.selectionSeconds(e, n));  // defaults: the selection alone
  c.group_host_s = 3e-4;
  CHECK(c.firstStageSeconds(e, n) == Approx(c.selectionSeconds(e, n) + 3e-4));
  CHECK(c.firstStageSeconds(Exchange::kDense, n) == Approx(3e-4));  // a dense group costs the coordinator too
  // Busy cores: only the fixed part, counted host_steal times (the layers'
  // backward times already hold the per-element work).
  c.host_steal = 2.0;
  CHECK(c.firstStageSeconds(e, n) == Approx(6e-4));
  CHECK(c.firstStageSeconds(e, 10 * n) == Approx(6e-4));
  // host_dilation is for a coordinator that does not take backward's cores:
  // with host_steal set it changes nothing.
  c.host_dilation = 10.0;
  CHECK(c.firstStageSeconds(e, n) == Approx(6e-4));
  // Shared cores, not with training: the fixed part takes host_dilation
  // times its CPU, the selection (timed in wall time) as it is.
  c.host_steal = 0;
  CHECK(c.firstStageSeconds(e, n) == Approx(c.selectionSeconds(e, n) + 3e-3));
  CHECK(c.firstStageSeconds(Exchange::kDense, n) == Approx(3e-3));
  // ... but a group run right after the one before, in the same turn on a
  // core, does not wait for it: its CPU time alone.
  CHECK(c.starvedCoordinator());
  CHECK(c.queuedStageSeconds(e, n) == Approx(c.selectionSeconds(e, n) + 3e-4));
  c.host_steal = 2.0;  // busy with training: the first stage as it is
  CHECK_FALSE(c.starvedCoordinator());
  CHECK(c.queuedStageSeconds(e, n) == c.firstStageSeconds(e, n));
  c.host_steal = 0;
  c.host_dilation = 1.0;
  CHECK_FALSE(c.starvedCoordinator());
  CHECK(c.queuedStageSeconds(e, n) == c.firstStageSeconds(e, n));
  // The exchange choice ignores them: the same on every rank whatever the
  // rank measured of its own load.
  CostModel d = agreedModel();
  for (int64_t m : {1000, 100000, 10000000}) CHECK(c.chooseExchange(m) == d.chooseExchange(m));
}

TEST_CASE("host cost: the planner merges as groups cost the coordinator more", "[plan][host]") {
  PlanInput in;
  in.layers = twelveLayers();
  in.cost = agreedModel();
  in.sparse = true;
  in.selection = Selection::kSeparate;
  Plan free_groups;
  REQUIRE(computePlan("mgs", in, &free_groups).ok());
  // Busy cores, each group 5 ms of backward: far fewer groups.
  in.cost.group_host_s = 2.5e-3;
  in.cost.host_steal = 2.0;
  in.selection = Selection::kCompute;
  Plan busy;
  REQUIRE(computePlan("mgs", in, &busy).ok());
  INFO("groups without a per-group cost " << free_groups.groups.size() << ", on busy cores " << busy.groups.size());
  CHECK(free_groups.groups.size() >= 6);
  CHECK(busy.groups.size() <= 3);
  CHECK(busy.groups.size() < free_groups.groups.size());
  // The plan is the best of all 2^11 on the model, and its prediction the
  // timeline's.
  CHECK(busy.predicted_s == Approx(bestOverAllPlans(in)).epsilon(1e-12));
  double again = 0;
  REQUIRE(evaluatePlan(in, busy.groups, true, &again).ok());
  CHECK(again == Approx(busy.predicted_s).epsilon(1e-12));
  // Layer-wise costs 12 groups' worth: 11 x 5 ms more than one group, less
  // the tail that one group leaves exposed.
  double layerwise = 0, single = 0;
  REQUIRE(evaluatePlan(in, planLayerwise(12), true, &layerwise).ok());
  REQUIRE(evaluatePlan(in, planSingle(12), true, &single).ok());
  CHECK(layerwise - single > 0.04);
  // On a core of its own the same per-group CPU merges less than on busy
  // cores, and still at least as much as without it.
  in.cost.host_steal = 0;
  in.selection = Selection::kSeparate;
  Plan own_core;
  REQUIRE(computePlan("mgs", in, &own_core).ok());
  CHECK(own_core.groups.size() <= free_groups.groups.size());
  CHECK(own_core.predicted_s == Approx(bestOverAllPlans(in)).epsilon(1e-12));
}

TEST_CASE("host cost: the planner merges as the coordinator waits longer for a core", "[plan][host]") {
  PlanInput in;
  in.layers = twelveLayers();
  in.cost = agreedModel();
  in.cost.group_host_s = 5e-4;
  in.sparse = true;
  in.selection = Selection::kSeparate;
  size_t previous = in.layers.size() + 1;
  std::vector<size_t> counts;
  for (double dilation : {1.0, 4.0, 16.0, 64.0}) {
    in.cost.host_dilation = dilation;
    Plan p;
    REQUIRE(computePlan("mgs", in, &p).ok());
    INFO("host_dilation " << dilation << ": " << p.groups.size() << " groups");
    // Never more groups as each costs more, and the best of every plan.
    CHECK(p.groups.size() <= previous);
    CHECK(p.predicted_s == Approx(bestOverAllPlans(in)).epsilon(1e-12));
    previous = p.groups.size();
    counts.push_back(p.groups.size());
  }
  // 32 ms of coordinator per group against 20 ms of backward between
  // tensors: far fewer groups than with 0.5 ms.
  CHECK(counts.back() * 2 <= counts.front());
}

TEST_CASE("host cost: the DP stays exact with a per-group cost, against every plan", "[plan][host][dp]") {
  std::mt19937_64 rng(47);
  std::uniform_real_distribution<double> uh(0.0, 5e-3);
  for (int t = 0; t < 60; ++t) {
    PlanInput in;
    in.layers = test::randomLayers(rng, std::uniform_int_distribution<int>(1, 10)(rng));
    in.cost = agreedModel();
    in.cost.group_host_s = uh(rng);
    const bool busy = t % 2 == 0;
    in.cost.host_steal = busy ? 1.0 + uh(rng) * 400 : 0.0;
    in.cost.host_dilation = t % 4 == 1 ? 1.0 + uh(rng) * 4000 : 1.0;
    in.selection = busy ? Selection::kCompute : Selection::kSeparate;
    in.sparse = true;
    Plan p;
    REQUIRE(computePlan("mgs", in, &p).ok());
    INFO("instance " << t << ", L = " << in.layers.size() << ", h = " << in.cost.group_host_s);
    CHECK(p.predicted_s == Approx(bestOverAllPlans(in)).epsilon(1e-9));
  }
}

TEST_CASE("host cost: the fields in a cost file", "[plan][host][cost_io]") {
  CostModel m;
  REQUIRE(costModelPreset("10gbe-P4", &m).ok());
  const std::string plain = costModelToJson(m, false);
  CHECK(plain.find("group_host_s") == std::string::npos);  // 0: not written
  CHECK(plain.find("host_steal") == std::string::npos);
  CHECK(plain.find("host_dilation") == std::string::npos);  // 1: not written
  m.group_host_s = 2.5e-4;
  m.host_steal = 1.5;
  m.host_dilation = 7.5;
  CostModel back;
  REQUIRE(parseCostModel(costModelToJson(m, true), &back).ok());
  CHECK(back.group_host_s == 2.5e-4);
  CHECK(back.host_steal == 1.5);
  CHECK(back.host_dilation == 7.5);
  {
    // Below 1 (a second of CPU in less than a second) is refused, naming it.
    std::string t = costModelToJson(m, false);
    t.replace(t.find("7.5", t.find("\"host_dilation\"")), 3, "0.5");
    CostModel x;
    const Status bad = parseCostModel(t, &x);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.message().find("host_dilation") != std::string::npos);
  }
  std::string text = costModelToJson(m, false);
  text.replace(text.find("0.00025"), 7, "-0.001");
  const Status st = parseCostModel(text, &back);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("group_host_s") != std::string::npos);
  // And computePlan refuses what a program (not a file) might set.
  PlanInput in;
  in.layers = twelveLayers();
  in.cost = agreedModel();
  in.cost.host_steal = std::numeric_limits<double>::infinity();
  Plan p;
  CHECK_FALSE(computePlan("mgs", in, &p).ok());
  in.cost.host_steal = 0;
  in.cost.host_dilation = 0.5;
  CHECK_FALSE(computePlan("mgs", in, &p).ok());
  in.cost.host_dilation = std::numeric_limits<double>::quiet_NaN();
  CHECK_FALSE(computePlan("mgs", in, &p).ok());
  in.cost.host_dilation = 3.0;
  CHECK(computePlan("mgs", in, &p).ok());
}

}  // namespace mgs::plan
