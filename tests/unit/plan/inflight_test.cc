// Exchanges in flight in the timeline model and the MGS planner
// (CostModel::inflight_overlap, sparseTimeline's `overlap`): a hand-checked
// timeline, bit-identity with the serial model when nothing overlaps, the DP
// against every plan on random instances, and the cost model's terms.
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <string>

#include "plan/cost_model_io.h"
#include "plan/plan.h"
#include "plan/planners.h"
#include "plan_test_util.h"

namespace mgs::plan {
namespace {

using test::randomLayers;
using test::relClose;

std::vector<LayerInfo> threeLayers() {
  return {{"a", 10, 1.0}, {"b", 10, 1.0}, {"c", 10, 1.0}};
}

// The least sparseTime over all 2^(L-1) plans: the timeline is the
// objective the DP must minimise.
double bestOverAllPlans(const std::vector<LayerInfo>& layers, const ElementCost& comm, const ElementCost& sel,
                        Selection selection, double negotiation_s, const ElementCost& overlap) {
  double best = std::numeric_limits<double>::infinity();
  for (const Groups& g : test::allPlans(static_cast<int>(layers.size())))
    best = std::min(best, sparseTime(layers, g, comm, sel, selection, negotiation_s, overlap));
  return best;
}

}  // namespace

TEST_CASE("in flight: a hand-checked timeline", "[plan][inflight]") {
  // Three layers, each ready 1 s after the one before, each exchange 4 s of
  // which 3 s may overlap the one in flight; no selection time.
  const ElementCost four = [](int64_t n) { return n > 0 ? 4.0 : 0.0; };
  const ElementCost free = [](int64_t) { return 0.0; };
  const ElementCost three = [](int64_t n) { return n > 0 ? 3.0 : 0.0; };
  const auto t = sparseTimeline(threeLayers(), planLayerwise(3), four, free, Selection::kSeparate, 0, three);
  REQUIRE(t.size() == 3);
  // Group 0: ready at 1, 1..5. Group 1: ready at 2, may start 3 s before 5:
  // max(2, 2) + 4 = 6. Group 2: ready at 3, max(3, 6 - 3) + 4 = 7.
  CHECK(t[0].comm_start_s == 1.0);
  CHECK(t[0].comm_end_s == 5.0);
  CHECK(t[1].comm_start_s == 2.0);
  CHECK(t[1].comm_end_s == 6.0);
  CHECK(t[2].comm_end_s == 7.0);
  // One after another (no overlap): 5, 9, 13.
  CHECK(sparseTime(threeLayers(), planLayerwise(3), four, free, Selection::kSeparate) == 13.0);
  // An overlap above the exchange's own time counts as the whole exchange.
  const ElementCost ten = [](int64_t n) { return n > 0 ? 10.0 : 0.0; };
  CHECK(sparseTime(threeLayers(), planLayerwise(3), four, free, Selection::kSeparate, 0, ten) == 7.0);
  // Here every plan ends at 7 s (one group: ready at 3, + 4); the DP finds it.
  const PlannerResult r = planMgs(threeLayers(), four, free, kDefaultFrontCap, Selection::kSeparate, 0, three);
  CHECK(r.predicted_s == 7.0);
}

TEST_CASE("in flight: zero overlap is the serial model (the timeline bit for bit)", "[plan][inflight]") {
  std::mt19937_64 rng(41);
  const ElementCost zero = [](int64_t) { return 0.0; };
  for (int t = 0; t < 200; ++t) {
    const auto layers = randomLayers(rng, std::uniform_int_distribution<int>(1, 12)(rng));
    const CommModel table = test::randomTable(rng);
    const ElementCost ag = [table](int64_t n) { return table.seconds(n); };
    const ElementCost sel = [](int64_t n) { return 1e-3 * n; };
    for (Selection s : {Selection::kCompute, Selection::kSeparate})
      for (double ns : {0.0, 0.7}) {
        const PlannerResult a = planMgs(layers, ag, sel, kDefaultFrontCap, s, ns);
        const PlannerResult b = planMgs(layers, ag, sel, kDefaultFrontCap, s, ns, zero);
        // Plans of equal time may differ (ties), never their times.
        REQUIRE(relClose(sparseTime(layers, a.groups, ag, sel, s, ns), sparseTime(layers, b.groups, ag, sel, s, ns)));
        // The DP's own sum and the timeline's may differ in the last bits.
        REQUIRE(relClose(a.predicted_s, b.predicted_s));
        REQUIRE(sparseTime(layers, a.groups, ag, sel, s, ns) == sparseTime(layers, a.groups, ag, sel, s, ns, zero));
      }
  }
}

TEST_CASE("in flight: the MGS DP equals the best of every plan", "[plan][inflight][dp]") {
  std::mt19937_64 rng(43);
  std::uniform_real_distribution<double> frac(0.0, 1.0), uc(1e-4, 2e-3);
  int merged_differently = 0;
  for (int block = 0; block < 30; ++block) {
    const CommModel table = test::randomTable(rng);
    const double f = frac(rng);
    const SparsifyModel ts{SparsifyModel::Kind::kLinear, uc(rng)};
    const ElementCost ag = [table](int64_t n) { return table.seconds(n); };
    const ElementCost ov = [table, f](int64_t n) { return n > 0 ? f * table.startup() : 0.0; };
    const ElementCost sel = [ts](int64_t n) { return ts.seconds(n); };
    for (int t = 0; t < 20; ++t) {
      const auto layers = randomLayers(rng, std::uniform_int_distribution<int>(1, 12)(rng));
      for (Selection s : {Selection::kCompute, Selection::kSeparate}) {
        INFO("block " << block << ", instance " << t << ", L = " << layers.size() << ", overlap " << f);
        const PlannerResult r = planMgs(layers, ag, sel, kDefaultFrontCap, s, 0, ov);
        REQUIRE(validateGroups(r.groups, static_cast<int>(layers.size())).ok());
        REQUIRE_FALSE(r.front_capped);
        REQUIRE(relClose(r.predicted_s, bestOverAllPlans(layers, ag, sel, s, 0, ov)));
        REQUIRE(r.predicted_s == sparseTime(layers, r.groups, ag, sel, s, 0, ov));
        merged_differently += groupLengths(r.groups) != groupLengths(planMgs(layers, ag, sel, kDefaultFrontCap, s).groups);
        // With negotiation rounds the DP is a heuristic: never worse than
        // what it is bounded by, and its prediction is the timeline's.
        const PlannerResult w = planMgs(layers, ag, sel, kDefaultFrontCap, s, 0.3, ov);
        REQUIRE(w.predicted_s == sparseTime(layers, w.groups, ag, sel, s, 0.3, ov));
        REQUIRE(w.predicted_s <= sparseTime(layers, planSingle(static_cast<int>(layers.size())), ag, sel, s, 0.3, ov));
        REQUIRE(w.predicted_s >= bestOverAllPlans(layers, ag, sel, s, 0.3, ov) * (1 - 1e-12));
      }
    }
  }
  // Overlap changes the optimum on some instances (it favours more groups).
  CHECK(merged_differently > 0);
}

TEST_CASE("in flight: the cost model's overlap per exchange, and through computePlan", "[plan][inflight]") {
  CostModel c = test::threeExchangeModel(16, 0.01, 2e-3, 3e-3, 1e-3, 1e-9, 1e-9);
  CHECK(c.overlapSeconds(Exchange::kAgreed, 100000) == 0.0);  // the default: serial
  c.inflight_overlap = 0.5;
  CHECK(c.overlapSeconds(Exchange::kAgreed, 100000) == Approx(0.5 * (1e-3 + 2e-3)));
  CHECK(c.overlapSeconds(Exchange::kAllgather, 100000) == Approx(0.5 * 3e-3));
  CHECK(c.overlapSeconds(Exchange::kDense, 100000) == 0.0);  // dense buckets complete before the next
  c.dense_overlap = 0.25;  // a queued allreduce saves a quarter of the allreduce's start-up (2 ms)
  CHECK(c.overlapSeconds(Exchange::kDense, 100000) == Approx(0.25 * 2e-3));
  CHECK(c.overlapSeconds(Exchange::kAllgather, 100000) == Approx(0.5 * 3e-3));  // unchanged by it
  c.dense_overlap = 0;
  CHECK(c.overlapSeconds(Exchange::kAgreed, 0) == 0.0);
  c.inflight_overlap = 1.0;
  CHECK(c.overlapSeconds(Exchange::kAgreed, 1000) <= c.wireSeconds(Exchange::kAgreed, 1000));

  // computePlan: the same layers planned with overlap predict no more than
  // serially, and the prediction is the timeline's of the groups it chose.
  PlanInput in;
  in.layers = {{"a", 50000, 1e-3}, {"b", 50000, 1e-3}, {"c", 50000, 1e-3}, {"d", 50000, 1e-3}};
  in.sparse = true;
  in.selection = Selection::kSeparate;
  in.cost = c;
  in.cost.inflight_overlap = 0;
  Plan serial, inflight;
  REQUIRE(computePlan("mgs", in, &serial).ok());
  in.cost.inflight_overlap = 1;
  REQUIRE(computePlan("mgs", in, &inflight).ok());
  CHECK(inflight.predicted_s <= serial.predicted_s);
  double again = 0;
  REQUIRE(evaluatePlan(in, inflight.groups, true, &again).ok());
  CHECK(again == inflight.predicted_s);
  in.cost.inflight_overlap = 1.5;
  CHECK_FALSE(computePlan("mgs", in, &inflight).ok());
}

TEST_CASE("queued allreduces: a plan of dense groups priced at the stream's pace", "[plan][inflight]") {
  // Dense only (every group allreduces), 2 ms an allreduce, all of it
  // start-up; four layers of 1 ms backward. One after another the groups
  // end at 3, 5, 7, 9 ms (ready at 1..4, each behind the one before).
  CostModel c = test::threeExchangeModel(16, 0.01, 2e-3, 3e-3, 2e-3, 0, 0);
  c.exchanges = exchangeBit(Exchange::kDense);
  c.negotiation_s = 0;
  PlanInput in;
  in.layers = {{"a", 1000, 1e-3}, {"b", 1000, 1e-3}, {"c", 1000, 1e-3}, {"d", 1000, 1e-3}};
  in.sparse = true;
  in.selection = Selection::kSeparate;
  in.cost = c;
  const Groups layerwise = planLayerwise(4);
  double serial = 0, queued = 0;
  REQUIRE(evaluatePlan(in, layerwise, true, &serial).ok());
  CHECK(serial == Approx(9e-3));
  // Half the start-up saved by each queued allreduce: 3, 4, 5, 6 ms.
  in.cost.dense_overlap = 0.5;
  REQUIRE(evaluatePlan(in, layerwise, true, &queued).ok());
  CHECK(queued == Approx(6e-3));
  // A group alone (nothing before it in flight) pays the whole price.
  double single = 0;
  REQUIRE(evaluatePlan(in, planSingle(4), true, &single).ok());
  CHECK(single == Approx(4e-3 + 2e-3));
  in.cost.dense_overlap = 1.5;
  Plan p;
  CHECK_FALSE(computePlan("mgs", in, &p).ok());
}

TEST_CASE("in flight: inflight_overlap and dense_overlap in a cost file", "[plan][inflight][cost_io]") {
  // Each overlap: absent at 0, kept through a file, refused outside [0, 1]
  // with its name in the message.
  struct Field {
    const char* name;
    double CostModel::*member;
    const char* good;
    const char* bad;
  };
  for (const Field& f : {Field{"inflight_overlap", &CostModel::inflight_overlap, "0.75", "1.25"},
                         Field{"dense_overlap", &CostModel::dense_overlap, "0.375", "-0.25"}}) {
    CAPTURE(f.name);
    CostModel m;
    REQUIRE(costModelPreset("10gbe-P16", &m).ok());
    CHECK(costModelToJson(m, false).find(f.name) == std::string::npos);  // 0: not written
    m.*f.member = std::stod(f.good);
    CostModel back;
    REQUIRE(parseCostModel(costModelToJson(m, true), &back).ok());
    CHECK(back.*f.member == std::stod(f.good));
    std::string text = costModelToJson(m, false);
    text.replace(text.find(f.good), std::string(f.good).size(), f.bad);
    const Status st = parseCostModel(text, &back);
    REQUIRE_FALSE(st.ok());
    CHECK(st.message().find(f.name) != std::string::npos);
  }
}

}  // namespace mgs::plan
