// The coordinator model (plan/coordinator.h): rounds on a grid, the small
// dense tensors allreduced on the coordinator, blocking exchanges, allgathers
// in flight together. Hand-checked instances, each of which the timeline
// model (timeline.h) prices differently.
#include <catch2/catch.hpp>
#include <random>

#include "plan/cost_model_io.h"
#include "plan/plan.h"
#include "plan/planners.h"
#include "plan_test_util.h"

namespace mgs::plan {
namespace {

// Allgather `a` s whatever the size (all start-up), free selection, the
// coordinator model on with no cycle wait.
CostModel coordinatorCost(double allgather_s, double negotiation_s) {
  CostModel c;
  c.allgather = CommModel::linear(allgather_s, 0);
  c.allreduce = CommModel::linear(3.0, 0);
  c.sparsify = {SparsifyModel::Kind::kLinear, 0.0};
  c.workers = 4;
  c.density = 0.1;
  c.negotiation_s = negotiation_s;
  c.coordinator_loop = true;
  c.cycle_s = 0;
  c.max_in_flight = 4;
  return c;
}

TEST_CASE("coordinator: a group waits for the running round, and its end is seen at a round's end",
          "[plan][coordinator]") {
  // One group ready at 0.5, rounds of 1 back to back, allgather 2. A round
  // started at phase - 1 is running when backward starts.
  //  phase >= 0.5: declared by the round at phase, allgather phase+1..phase+3,
  //                seen at the end of the round phase+2..phase+3: phase + 3;
  //  phase <  0.5: the round at phase is too early; the next (phase+1..+2)
  //                declares it, allgather to phase+4, seen at phase + 4.
  // Over the 16 phases (j + 0.5)/16, half of each: mean 0.5 + 3.5 = 4.0.
  const std::vector<LayerInfo> layers = {{"a", 100, 0.5}};
  const CostModel c = coordinatorCost(2.0, 1.0);
  CHECK(coordinatorStep(layers, planSingle(1), c, Selection::kSeparate, {}, 0.75) == Approx(3.75).margin(1e-12));
  CHECK(coordinatorStep(layers, planSingle(1), c, Selection::kSeparate, {}, 0.25) == Approx(4.25).margin(1e-12));
  CHECK(coordinatorTime(layers, planSingle(1), c, Selection::kSeparate, {}) == Approx(4.0).margin(1e-12));
  // The timeline model starts a round when the group is ready: 0.5 + 1 + 2.
  PlanInput in;
  in.layers = layers;
  in.cost = c;
  in.selection = Selection::kSeparate;
  double s = 0;
  REQUIRE(evaluatePlan(in, planSingle(1), true, &s).ok());
  CHECK(s == Approx(4.0).margin(1e-12));
  // A known phase (PlanInput::round_phase_s, modulo the period) gives that
  // phase's step: 2.25 is phase 0.25.
  in.round_phase_s = 2.25;
  REQUIRE(evaluatePlan(in, planSingle(1), true, &s).ok());
  CHECK(s == Approx(4.25).margin(1e-12));
  in.cost.coordinator_loop = false;
  REQUIRE(evaluatePlan(in, planSingle(1), true, &s).ok());
  CHECK(s == 3.5);
}

TEST_CASE("coordinator: small dense tensors run to their end first where they cannot go in flight",
          "[plan][coordinator]") {
  // CUDA tensors, or MGS_NONFINITE=error: dense_in_flight false.
  // No round cost, no cycle: one iteration per event. A group and a dense
  // tensor both ready at 1: the dense allreduce (3) runs 1..4, then the
  // allgather 4..6. Without the dense tensor: 1 + 2 = 3, as the timeline.
  const std::vector<LayerInfo> layers = {{"w", 100, 1.0}};
  CostModel c = coordinatorCost(2.0, 0.0);
  c.dense_in_flight = false;
  const std::vector<DenseTensor> dense = {{"b", 10, 1.0}};
  CHECK(coordinatorTime(layers, planSingle(1), c, Selection::kSeparate, dense) == 6.0);
  CHECK(coordinatorTime(layers, planSingle(1), c, Selection::kSeparate, {}) == 3.0);
  CHECK(sparseTime(
            layers, planSingle(1), [](int64_t) { return 2.0; }, [](int64_t) { return 0.0; }, Selection::kSeparate,
            0.0) == 3.0);
  // With rounds (1, back to back) the allreduce does not pay another round:
  // the round declaring both ends at phase + 1 or + 2, then 3 + 2, seen at
  // the next round's end: phase + 6 or + 7, mean 7.0 (tools/examples/coordinator.json with
  // "dense_in_flight": false).
  const std::vector<LayerInfo> half = {{"w", 100, 0.5}};
  CostModel rounds = coordinatorCost(2.0, 1.0);
  rounds.dense_in_flight = false;
  CHECK(coordinatorTime(half, planSingle(1), rounds, Selection::kSeparate, {{"b", 10, 0.5}}) ==
        Approx(7.0).margin(1e-12));
  // A dense tensor ready after the last group still ends the step: 5 + 3.
  const std::vector<DenseTensor> late = {{"b", 10, 5.0}};
  CHECK(coordinatorTime(layers, planSingle(1), c, Selection::kSeparate, late) == 8.0);
  // Dense tensors declared in one round share one allreduce: 1..4 for both.
  const std::vector<DenseTensor> two = {{"b1", 10, 1.0}, {"b2", 10, 1.0}};
  CHECK(coordinatorTime(layers, planSingle(1), c, Selection::kSeparate, two) == 6.0);
}

TEST_CASE("coordinator: host dense allreduces go in flight beside the round's sparse buckets", "[plan][coordinator]") {
  // The runtime's host path (Executor::startInFlight; dense_in_flight, the
  // default). A group and a dense tensor ready at 1, no rounds: the dense
  // allreduce (3) runs 1..4 while the allgather runs 1..3; the step ends
  // when the dense tensor completes, 4, not 1 + 3 + 2 = 6.
  const std::vector<LayerInfo> layers = {{"w", 100, 1.0}};
  const CostModel c = coordinatorCost(2.0, 0.0);
  REQUIRE(c.dense_in_flight);
  CHECK(coordinatorTime(layers, planSingle(1), c, Selection::kSeparate, {{"b", 10, 1.0}}) == 4.0);
  std::vector<GroupTiming> t;
  CHECK(coordinatorStep(layers, planSingle(1), c, Selection::kSeparate, {{"b", 10, 1.0}}, 0.0, &t) == 4.0);
  REQUIRE(t.size() == 1);
  CHECK(t[0].comm_start_s == 1.0);  // the allgather does not wait for the allreduce
  CHECK(t[0].comm_end_s == 3.0);
  // A cheap allreduce (1) ends before the allgather: the group ends the step, 3.
  CostModel quick = c;
  quick.allreduce = CommModel::linear(1.0, 0);
  CHECK(coordinatorTime(layers, planSingle(1), quick, Selection::kSeparate, {{"b", 10, 1.0}}) == 3.0);
  // A dense tensor ready after the last group: 5..8, as when it blocks.
  CHECK(coordinatorTime(layers, planSingle(1), c, Selection::kSeparate, {{"b", 10, 5.0}}) == 8.0);
  // With rounds (1, back to back): the round declaring both ends at phase + 1
  // (phase >= 0.5) or + 2; the allgather (2) and the allreduce (3) start
  // there; the allgather's end is seen at the end of the round after it, the
  // allreduce's at the end of the next: phase + 4 or + 5, mean 5.0, where the
  // blocking order gives 7.0 (above).
  const std::vector<LayerInfo> half = {{"w", 100, 0.5}};
  const CostModel rounds = coordinatorCost(2.0, 1.0);
  CHECK(coordinatorStep(half, planSingle(1), rounds, Selection::kSeparate, {{"b", 10, 0.5}}, 0.75) ==
        Approx(4.75).margin(1e-12));
  CHECK(coordinatorStep(half, planSingle(1), rounds, Selection::kSeparate, {{"b", 10, 0.5}}, 0.25) ==
        Approx(5.25).margin(1e-12));
  CHECK(coordinatorTime(half, planSingle(1), rounds, Selection::kSeparate, {{"b", 10, 0.5}}) ==
        Approx(5.0).margin(1e-12));
}

TEST_CASE("coordinator: dense_in_flight in a cost-model file", "[plan][coordinator]") {
  CostModel c = coordinatorCost(2.0, 1.0);
  c.dense_in_flight = false;
  CostModel back;
  REQUIRE(parseCostModel(costModelToJson(c), &back).ok());
  CHECK_FALSE(back.dense_in_flight);
  c.dense_in_flight = true;  // the default is not written
  const std::string text = costModelToJson(c);
  CHECK(text.find("dense_in_flight") == std::string::npos);
  CostModel fresh;
  REQUIRE(parseCostModel(text, &fresh).ok());
  CHECK(fresh.dense_in_flight);
  std::string bad = text;
  bad.replace(bad.find("\"coordinator_loop\""), 0, "\"dense_in_flight\": 1, ");
  const Status st = parseCostModel(bad, &back);
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("dense_in_flight") != std::string::npos);
}

TEST_CASE("coordinator: allgathers in flight overlap their start-ups up to the limit", "[plan][coordinator]") {
  // Four groups ready at 0, allgather 1 (all start-up), no rounds.
  const std::vector<LayerInfo> layers = {{"a", 10, 0}, {"b", 10, 0}, {"c", 10, 0}, {"d", 10, 0}};
  CostModel c = coordinatorCost(1.0, 0.0);
  // Four in flight: all four run 0..1.
  CHECK(coordinatorTime(layers, planLayerwise(4), c, Selection::kSeparate, {}) == 1.0);
  // No overlap: one after another, 4, as the timeline model says.
  c.allgather_overlap = 0;
  CHECK(coordinatorTime(layers, planLayerwise(4), c, Selection::kSeparate, {}) == 4.0);
  CHECK(sparseTime(
            layers, planLayerwise(4), [](int64_t) { return 1.0; }, [](int64_t) { return 0.0; }, Selection::kSeparate,
            0.0) == 4.0);
  // Limit 2: a, b, c start at 0 (c is started, then the coordinator waits
  // for a until 1), d starts at 1 and ends at 2.
  c.allgather_overlap = 1;
  c.max_in_flight = 2;
  std::vector<GroupTiming> t;
  CHECK(coordinatorStep(layers, planLayerwise(4), c, Selection::kSeparate, {}, 0, &t) == 2.0);
  REQUIRE(t.size() == 4);
  CHECK(t[2].comm_start_s == 0.0);
  CHECK(t[3].comm_start_s == 1.0);
  CHECK(t[0].comm_end_s == 1.0);
  // Half overlap: each ends 0.5 after the one before: 1, 1.5, 2, 2.5.
  c.max_in_flight = 4;
  c.allgather_overlap = 0.5;
  CHECK(coordinatorTime(layers, planLayerwise(4), c, Selection::kSeparate, {}) == 2.5);
}

TEST_CASE("coordinator: a blocking exchange holds the coordinator", "[plan][coordinator]") {
  // Agreed exchange only (broadcast + allreduce of k values: 1 + 3 = 4 per
  // group, the allreduce model being 3), two groups ready at 0 and 1, no
  // rounds: the second can start only when the first has ended at 4.
  const std::vector<LayerInfo> layers = {{"a", 10, 0}, {"b", 10, 1.0}};
  CostModel c = coordinatorCost(1.0, 0.0);
  c.broadcast = CommModel::linear(1.0, 0);
  c.exchanges = kExchangeAgreed;
  std::vector<GroupTiming> t;
  CHECK(coordinatorStep(layers, planLayerwise(2), c, Selection::kSeparate, {}, 0, &t) == 8.0);
  CHECK(t[1].comm_start_s == 4.0);
}

TEST_CASE("coordinator: the cycle paces idle rounds, an enqueue cuts it short", "[plan][coordinator]") {
  // Rounds of 0.25, cycle 1: the period is 1. One group ready at 0.5,
  // allgather 2. Phase 0.75: the iteration at -0.25 waits until 0.5 (the
  // enqueue wakes it), its round 0.5..0.75 declares the group, allgather
  // 0.75..2.75; iterations then start every cycle (1.5, 2.5): the end is
  // seen by the round 2.5..2.75.
  const std::vector<LayerInfo> layers = {{"a", 100, 0.5}};
  CostModel c = coordinatorCost(2.0, 0.25);
  c.cycle_s = 1.0;
  CHECK(coordinatorStep(layers, planSingle(1), c, Selection::kSeparate, {}, 0.75) == 2.75);
}

TEST_CASE("coordinator: a tiny round over a long step ends, with the step it should have", "[plan][coordinator]") {
  // Rounds of 1 ns back to back for 3 s: the idle ones are skipped, not run.
  // The group (ready at 1) is declared by the round running at 1 or the next
  // one, its allgather (2) ends within 2 ns after 3 and is seen by the round
  // running then: 3 s plus a few ns.
  const std::vector<LayerInfo> layers = {{"a", 100, 1.0}};
  const double step = coordinatorTime(layers, planSingle(1), coordinatorCost(2.0, 1e-9), Selection::kSeparate, {});
  CHECK(step >= 3.0);
  CHECK(step <= 3.0 + 5e-9);
}

TEST_CASE("coordinator: the mgs planner searches under it and beats the fixed plans", "[plan][coordinator]") {
  PlanInput in;
  std::mt19937_64 rng(7);
  in.layers = test::randomLayers(rng, 12);
  in.selection = Selection::kSeparate;
  in.cost = coordinatorCost(0.01, 0.008);
  in.cost.allgather = CommModel::linear(0.01, 2e-8);
  in.cost.sparsify = {SparsifyModel::Kind::kLinear, 1e-9};
  in.cost.cycle_s = 0.001;
  in.dense_tensors = {{"bias", 64, 0.001}, {"bn", 128, 0.02}};
  Plan mgs;
  REQUIRE(computePlan("mgs", in, &mgs).ok());
  double again = 0;
  REQUIRE(evaluatePlan(in, mgs.groups, true, &again).ok());
  CHECK(mgs.predicted_s == again);
  for (const char* p : {"single", "layerwise", "fusion"}) {
    Plan other;
    REQUIRE(computePlan(p, in, &other).ok());
    CHECK(mgs.predicted_s <= other.predicted_s);
  }
}

TEST_CASE("coordinator: the cost fields are optional and survive write -> read", "[plan][coordinator][cost_io]") {
  CostModel m;
  REQUIRE(costModelPreset("10gbe-P16", &m).ok());
  CostModel back;
  REQUIRE(parseCostModel(costModelToJson(m), &back).ok());
  CHECK_FALSE(back.coordinator_loop);
  CHECK(costModelToJson(m).find("coordinator_loop") == std::string::npos);
  m.coordinator_loop = true;
  m.cycle_s = 0.002;
  m.max_in_flight = 3;
  m.allgather_overlap = 0.25;
  REQUIRE(parseCostModel(costModelToJson(m), &back).ok());
  CHECK(back.coordinator_loop);
  CHECK(back.cycle_s == 0.002);
  CHECK(back.max_in_flight == 3);
  CHECK(back.allgather_overlap == 0.25);
  std::string bad = costModelToJson(m);
  bad.replace(bad.find("0.25"), 4, "1.5");
  CHECK_FALSE(parseCostModel(bad, &back).ok());
}

}  // namespace
}  // namespace mgs::plan
