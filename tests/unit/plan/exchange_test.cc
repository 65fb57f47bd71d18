// The per-group exchange choice of the cost model (allgather, agreed-index,
// dense): what it picks where, that the planners plan with it, and that cost
// files with and without the broadcast term read back.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "plan/cost_model_io.h"
#include "plan/plan.h"

namespace mgs::plan {
namespace {

// The alpha-beta cluster of mgs-sim (tools/simulator.cc) at 10 Gbit/s, 25 us.
CostModel cluster(int P, double density) {
  const double steps = P > 1 ? std::ceil(std::log2(double(P))) : 0.0, bw = 10e9 / 8, lat = 25e-6;
  CostModel m;
  m.workers = P;
  m.density = density;
  m.allreduce = CommModel::linear(2 * steps * lat, 2.0 * (P - 1) / P / bw);
  m.allgather = CommModel::linear(2 * steps * lat, double(P - 1) / P / bw);
  m.broadcast = CommModel::linear(2 * steps * lat, 2.0 * (P - 1) / P / bw);
  m.sparsify = {SparsifyModel::Kind::kLinear, 1e-10};
  return m;
}

TEST_CASE("exchange names parse as comma-separated sets", "[plan][exchange]") {
  unsigned set = 0;
  CHECK(parseExchanges("allgather", &set));
  CHECK(set == kExchangeAllgather);
  CHECK(parseExchanges("agreed,dense", &set));
  CHECK(set == (kExchangeAgreed | kExchangeDense));
  CHECK(parseExchanges("dense,allgather,agreed", &set));
  CHECK(set == (kExchangeAllgather | kExchangeAgreed | kExchangeDense));
  set = 99;
  for (const char* bad : {"", "gather", "allgather,", ",agreed", "agreed dense"}) {
    INFO(bad);
    CHECK_FALSE(parseExchanges(bad, &set));
    CHECK(set == 99);  // unchanged on error
  }
  CHECK(std::string(exchangeName(Exchange::kAgreed)) == "agreed");
}

TEST_CASE("the choice: allgather at few ranks, agreed at many, dense at high density", "[plan][exchange]") {
  const int64_t n = 4 << 20;  // a 16 MiB bucket
  CostModel m = cluster(2, 0.01);
  m.exchanges = kExchangeAllgather | kExchangeAgreed;
  // P = 2: one collective of 2k pairs beats two collectives of k.
  CHECK(m.chooseExchange(n) == Exchange::kAllgather);
  m = cluster(256, 0.01);
  m.exchanges = kExchangeAllgather | kExchangeAgreed;
  CHECK(m.chooseExchange(n) == Exchange::kAgreed);
  // The agreed exchange's traffic does not grow with P; the allgather's does.
  const double agreed16 = cluster(16, 0.01).agreedSeconds(n), agreed2048 = cluster(2048, 0.01).agreedSeconds(n);
  CHECK(agreed2048 < 1.2 * agreed16 + 1e-3);
  CHECK(cluster(2048, 0.01).allgatherSeconds(n) > 50 * cluster(16, 0.01).allgatherSeconds(n));
  // Dense only when allowed, and when it beats selection + sparse exchange.
  m = cluster(8, 0.5);
  m.exchanges = kExchangeAllgather | kExchangeAgreed;
  CHECK(m.chooseExchange(n) != Exchange::kDense);
  m.exchanges |= kExchangeDense;
  CHECK(m.chooseExchange(n) == Exchange::kDense);
  CHECK(m.selectionSeconds(Exchange::kDense, n) == 0.0);
  // Only the allowed bits count; none set answers the allgather.
  m = cluster(256, 0.01);
  m.exchanges = kExchangeAllgather;
  CHECK(m.chooseExchange(n) == Exchange::kAllgather);
  m.exchanges = 0;
  CHECK(m.chooseExchange(n) == Exchange::kAllgather);
  // The choice minimises selection + communication among the allowed ones.
  m = cluster(64, 0.001);
  m.exchanges = kExchangeAllgather | kExchangeAgreed | kExchangeDense;
  for (int64_t size : {int64_t(1000), int64_t(100000), int64_t(10000000)}) {
    const Exchange e = m.chooseExchange(size);
    const double chosen = m.selectionSeconds(e, size) + m.exchangeSeconds(e, size);
    for (Exchange o : {Exchange::kAllgather, Exchange::kAgreed, Exchange::kDense})
      CHECK(chosen <= m.selectionSeconds(o, size) + m.exchangeSeconds(o, size));
  }
}

TEST_CASE("without a broadcast term the agreed exchange is costed with the allreduce", "[plan][exchange]") {
  CostModel m = cluster(16, 0.01);
  const double with = m.agreedSeconds(1 << 20);
  m.broadcast = CommModel();
  const int64_t k = m.selected(1 << 20);
  CHECK(m.agreedSeconds(1 << 20) == Approx(m.allreduce.seconds(4.0 * k) + m.allreduce.seconds(4.0 * k)));
  CHECK(m.agreedSeconds(1 << 20) >= with);  // the estimate is an upper bound here
}

TEST_CASE("the sparse planners plan with the cheapest exchange per group", "[plan][exchange]") {
  PlanInput in;
  for (int i = 0; i < 12; ++i) in.layers.push_back({"l" + std::to_string(i), int64_t(200000) * (1 + i % 3), 2e-3});
  in.selection = Selection::kSeparate;
  for (int P : {4, 64, 1024}) {
    INFO("P = " << P);
    in.cost = cluster(P, 0.01);
    Plan ag, both, all;
    in.cost.exchanges = kExchangeAllgather;
    REQUIRE(computePlan("mgs", in, &ag).ok());
    // Allgather only is the papers' model: the plain cost functions.
    const ElementCost agf = [&](int64_t n) { return in.cost.allgatherSeconds(n); };
    const ElementCost sel = [&](int64_t n) { return in.cost.sparsifySeconds(n); };
    CHECK(ag.predicted_s == Approx(sparseTime(in.layers, ag.groups, agf, sel, in.selection)));
    in.cost.exchanges = kExchangeAllgather | kExchangeAgreed;
    REQUIRE(computePlan("mgs", in, &both).ok());
    in.cost.exchanges |= kExchangeDense;
    REQUIRE(computePlan("mgs", in, &all).ok());
    // A larger choice per group never makes the exact plan worse here.
    CHECK(both.predicted_s <= ag.predicted_s * (1 + 1e-12));
    CHECK(all.predicted_s <= both.predicted_s * (1 + 1e-12));
    // The prediction is the timeline of the chosen exchanges.
    const ElementCost comm = [&](int64_t n) { return in.cost.exchangeSeconds(in.cost.chooseExchange(n), n); };
    const ElementCost s2 = [&](int64_t n) { return in.cost.selectionSeconds(in.cost.chooseExchange(n), n); };
    CHECK(all.predicted_s == Approx(sparseTime(in.layers, all.groups, comm, s2, in.selection)));
  }
  // At 1024 ranks the allgather is far slower than agreeing on indices.
  in.cost = cluster(1024, 0.01);
  Plan ag, both;
  in.cost.exchanges = kExchangeAllgather;
  REQUIRE(computePlan("layerwise", in, &ag).ok());
  in.cost.exchanges = kExchangeAllgather | kExchangeAgreed;
  REQUIRE(computePlan("layerwise", in, &both).ok());
  CHECK(both.predicted_s < 0.5 * ag.predicted_s);
  in.cost.exchanges = 16;  // not an exchange (8 is the hierarchical one)
  CHECK(computePlan("mgs", in, &both).code() == Code::kInvalidArgument);
}

TEST_CASE("cost files: the broadcast term round-trips and older files still load", "[plan][exchange][cost_io]") {
  CostModel m = cluster(8, 0.01), back;
  REQUIRE(CommModel::table({{4096, 2e-5}, {1 << 20, 4e-4}, {8 << 20, 3e-3}}, &m.broadcast).ok());
  const std::string text = costModelToJson(m);
  CHECK(text.find("\"broadcast\"") != std::string::npos);
  REQUIRE(parseCostModel(text, &back).ok());
  for (double b : {0.0, 100.0, 4096.0, 5e5, 1e7, 1e9}) CHECK(back.broadcastSeconds(b) == m.broadcastSeconds(b));
  // A file written before the term: no "broadcast" key, loads, estimated.
  m.broadcast = CommModel();
  const std::string old = costModelToJson(m);
  CHECK(old.find("broadcast") == std::string::npos);
  CostModel loaded;
  REQUIRE(parseCostModel(old, &loaded).ok());
  CHECK(loaded.broadcast.segments().empty());
  CHECK(loaded.broadcastSeconds(1e6) == m.allreduce.seconds(1e6));
  // A bad broadcast term is refused with its path.
  auto j = nlohmann::json::parse(text);
  j["broadcast"] = {{"alpha_s", -1.0}, {"beta_s_per_byte", 1e-9}};
  const Status st = parseCostModel(j.dump(), &back);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message().find("broadcast.alpha_s") != std::string::npos);
}

TEST_CASE("the negotiation start-up: once per exchange, merges further, round-trips in cost files",
          "[plan][exchange][cost_io]") {
  CostModel m = cluster(16, 0.001), n = m;
  n.negotiation_s = 8e-3;
  for (int64_t e : {int64_t(1), int64_t(4096), int64_t(1) << 22}) {
    CHECK(n.allreduceSeconds(e) == Approx(m.allreduceSeconds(e) + 8e-3));
    CHECK(n.allgatherSeconds(e) == Approx(m.allgatherSeconds(e) + 8e-3));
    CHECK(n.agreedSeconds(e) == Approx(m.agreedSeconds(e) + 8e-3));  // two collectives, one negotiation
    for (Exchange x : {Exchange::kAllgather, Exchange::kAgreed, Exchange::kDense})
      CHECK(n.exchangeSeconds(x, e) == Approx(m.exchangeSeconds(x, e) + 8e-3));
  }
  CHECK(n.allreduceSeconds(0) == 0.0);  // no group, no call, no negotiation
  CHECK(n.allgatherSeconds(0) == 0.0);
  CHECK(n.agreedSeconds(0) == 0.0);

  // The exact planner merges into fewer groups when each group pays it.
  PlanInput in;
  for (int i = 0; i < 40; ++i) in.layers.push_back({"l" + std::to_string(i), int64_t(100000) * (1 + i % 4), 1e-3});
  in.selection = Selection::kSeparate;
  Plan without, with;
  in.cost = m;
  REQUIRE(computePlan("mgs", in, &without).ok());
  in.cost = n;
  REQUIRE(computePlan("mgs", in, &with).ok());
  INFO(without.groups.size() << " groups without, " << with.groups.size() << " with");
  CHECK(with.groups.size() < without.groups.size());

  // Written when set, read back exactly; absent in older files: 0; negative: refused.
  CostModel back;
  const std::string text = costModelToJson(n);
  CHECK(text.find("\"negotiation_s\"") != std::string::npos);
  REQUIRE(parseCostModel(text, &back).ok());
  CHECK(back.negotiation_s == n.negotiation_s);
  CHECK(costModelToJson(m).find("negotiation_s") == std::string::npos);
  CostModel fresh;
  REQUIRE(parseCostModel(costModelToJson(m), &fresh).ok());
  CHECK(fresh.negotiation_s == 0.0);
  auto j = nlohmann::json::parse(text);
  j["negotiation_s"] = -1.0;
  const Status st = parseCostModel(j.dump(), &back);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message().find("negotiation_s") != std::string::npos);
}

}  // namespace
}  // namespace mgs::plan
