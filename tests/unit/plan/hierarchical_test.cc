// The hierarchical exchange in the cost model: dense reduce inside the
// node, allgather between the nodes' leaders, broadcast of their blocks
// inside the node (cost_model.h, Exchange::kHierarchical).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "plan/cost_model_io.h"
#include "plan/plan.h"

namespace mgs::plan {
namespace {

CostModel nodes(int P, int R) {
  CostModel m;
  m.workers = P;
  m.density = 0.01;
  m.ranks_per_node = R;
  m.allreduce = CommModel::linear(1e-3, 1e-9);
  m.allgather = CommModel::linear(2e-3, 1e-9);
  m.node = CommModel::linear(1e-5, 1e-10);
  m.leader_allgather = CommModel::linear(5e-4, 1e-9);
  m.sparsify = {SparsifyModel::Kind::kLinear, 1e-10};
  m.negotiation_s = 3e-4;
  return m;
}

TEST_CASE("hierarchical: the three collectives and one negotiation round", "[plan][hierarchical]") {
  const CostModel m = nodes(16, 4);
  CHECK(m.nodes() == 4);
  const int64_t n = 1 << 20;
  const double k = double(m.selected(n)), blocks = 4 * k * 8;
  CHECK(m.hierarchicalSeconds(n) ==
        Approx(3e-4 + m.node.seconds(4.0 * n) + m.leader_allgather.seconds(blocks) + m.node.seconds(blocks)));
  CHECK(m.exchangeSeconds(Exchange::kHierarchical, n) == m.hierarchicalSeconds(n));
  CHECK(m.wireSeconds(Exchange::kHierarchical, n) == Approx(m.hierarchicalSeconds(n) - 3e-4));
  CHECK(m.hierarchicalSeconds(0) == 0.0);
  CHECK(m.selectionSeconds(Exchange::kHierarchical, n) == m.sparsifySeconds(n));
  // Unmeasured node and leader terms: upper bounds from the flat models.
  CostModel u = m;
  u.node = CommModel();
  u.leader_allgather = CommModel();
  CHECK(u.hierarchicalSeconds(n) ==
        Approx(3e-4 + u.allreduce.seconds(4.0 * n) + u.allgather.seconds(blocks) + u.allreduce.seconds(blocks)));
}

TEST_CASE("hierarchical: chosen by cost, never without two nodes of several ranks", "[plan][hierarchical]") {
  CostModel m = nodes(16, 4);
  m.exchanges = kExchangeAll;
  // Cheap shared memory and 4 leaders instead of 16 ranks: it wins here.
  CHECK(m.chooseExchange(1 << 20) == Exchange::kHierarchical);
  unsigned set = 0;
  REQUIRE(parseExchanges("allgather,hierarchical", &set));
  CHECK(set == (kExchangeAllgather | kExchangeHierarchical));
  CHECK(std::string(exchangeName(Exchange::kHierarchical)) == "hierarchical");
  // One rank per node, or one node: not a candidate, whatever it would cost.
  for (auto [P, R] : {std::pair<int, int>{16, 1}, {4, 4}, {4, 8}}) {
    CostModel o = nodes(P, R);
    o.node = CommModel::linear(0, 0);
    o.leader_allgather = CommModel::linear(0, 0);
    o.exchanges = kExchangeAll;
    INFO("P " << P << ", R " << R);
    CHECK(o.chooseExchange(1 << 20) != Exchange::kHierarchical);
    o.exchanges = kExchangeHierarchical;  // alone: the allgather, as with no bit
    CHECK(o.chooseExchange(1 << 20) == Exchange::kAllgather);
  }
  // A slow node (a dense reduce of the whole bucket) loses to the allgather.
  m.node = CommModel::linear(1e-3, 1e-7);
  CHECK(m.chooseExchange(1 << 20) != Exchange::kHierarchical);
}

TEST_CASE("hierarchical: the planner and the timeline use it per group", "[plan][hierarchical]") {
  PlanInput in;
  for (int i = 0; i < 10; ++i) in.layers.push_back({"l" + std::to_string(i), int64_t(300000) * (1 + i % 3), 2e-3});
  in.selection = Selection::kSeparate;
  in.cost = nodes(64, 8);
  in.cost.exchanges = kExchangeAllgather | kExchangeAgreed;
  Plan flat, hier;
  REQUIRE(computePlan("mgs", in, &flat).ok());
  in.cost.exchanges |= kExchangeHierarchical;
  REQUIRE(computePlan("mgs", in, &hier).ok());
  CHECK(hier.predicted_s < flat.predicted_s);
  std::vector<GroupTiming> t;
  REQUIRE(planTimeline(in, hier.groups, true, &t).ok());
  CHECK(t.back().comm_end_s == Approx(hier.predicted_s));
}

TEST_CASE("hierarchical: cost files carry ranks_per_node, node and leader_allgather", "[plan][hierarchical][cost_io]") {
  const CostModel m = nodes(16, 4);
  CostModel back;
  const std::string text = costModelToJson(m);
  REQUIRE(parseCostModel(text, &back).ok());
  CHECK(back.ranks_per_node == 4);
  back.density = m.density;  // not part of a cost file
  CHECK(back.hierarchicalSeconds(1 << 20) == m.hierarchicalSeconds(1 << 20));
  // Older files: one rank per node, no node terms.
  CostModel flat = m;
  flat.ranks_per_node = 1;
  flat.node = CommModel();
  flat.leader_allgather = CommModel();
  const std::string old = costModelToJson(flat);
  CHECK(old.find("ranks_per_node") == std::string::npos);
  CHECK(old.find("\"node\"") == std::string::npos);
  auto j = nlohmann::json::parse(text);
  j["ranks_per_node"] = 0;
  Status st = parseCostModel(j.dump(), &back);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message().find("ranks_per_node") != std::string::npos);
  j = nlohmann::json::parse(text);
  j["node"] = {{"alpha_s", -1.0}, {"beta_s_per_byte", 0.0}};
  st = parseCostModel(j.dump(), &back);
  CHECK(st.message().find("node.alpha_s") != std::string::npos);
}

}  // namespace
}  // namespace mgs::plan
