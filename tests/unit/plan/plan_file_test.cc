// The plan file format (plan/plan_file.h, MGS_PLAN_FILE): what a job writes
// reads back to the same plan, exchanges and costs; malformed files are
// refused naming the field; a file that does not fit the job says which of
// its values differs from the job's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "plan/cost_model_io.h"
#include "plan/plan_file.h"

namespace mgs::plan {
namespace {

PlanFile sample() {
  PlanFile f;
  f.library = "0.1.0";
  f.workers = 4;
  f.ranks_per_node = 2;
  for (const auto& name : planFileSettings()) f.settings[name] = "x";
  f.settings["MGS_DENSITY"] = "0.01";
  f.planner = "mgs";
  f.label = "uniform 1/2";
  f.step = 23;
  f.predicted_span_s = 0.1 + 0.2;  // not a short decimal: must survive exactly
  REQUIRE(costModelPreset("10gbe-P4", &f.cost).ok());
  f.cost.ranks_per_node = 2;
  f.buckets = {{Exchange::kAgreed, {{"fc.weight", 2048000}, {"fc.bias", 1000}}},
               {Exchange::kAllgather, {{"conv \"2\"", 1}}},
               {Exchange::kDense, {{"conv1", 9408}}},
               {Exchange::kHierarchical, {{"emb", 1 << 30}}}};
  return f;
}

PlanFileJob jobOf(const PlanFile& f) {
  PlanFileJob j;
  j.library = f.library;
  j.workers = f.workers;
  j.ranks_per_node = f.ranks_per_node;
  j.settings = f.settings;
  return j;
}

TEST_CASE("a written plan file reads back to the same plan, exchanges and costs", "[plan][plan_file]") {
  const PlanFile f = sample();
  PlanFile back;
  const std::string text = planFileToJson(f);
  REQUIRE(parsePlanFile(text, &back).ok());
  CHECK(back.library == f.library);
  CHECK(back.workers == f.workers);
  CHECK(back.ranks_per_node == f.ranks_per_node);
  CHECK(back.settings == f.settings);
  CHECK(back.planner == f.planner);
  CHECK(back.label == f.label);
  CHECK(back.step == f.step);
  CHECK(back.predicted_span_s == f.predicted_span_s);
  REQUIRE(back.buckets.size() == f.buckets.size());
  for (size_t g = 0; g < f.buckets.size(); ++g) {
    CHECK(back.buckets[g].exchange == f.buckets[g].exchange);
    REQUIRE(back.buckets[g].tensors.size() == f.buckets[g].tensors.size());
    for (size_t i = 0; i < f.buckets[g].tensors.size(); ++i) {
      CHECK(back.buckets[g].tensors[i].name == f.buckets[g].tensors[i].name);
      CHECK(back.buckets[g].tensors[i].elements == f.buckets[g].tensors[i].elements);
    }
  }
  // The model prices the exchanges the file does not fix: the same choice,
  // bit for bit, at every size and density.
  CHECK(back.cost.ranks_per_node == 2);
  for (double density : {1.0, 0.1, 0.01, 0.001})
    for (int64_t n : {1, 1000, 100000, 10000000}) {
      CostModel a = f.cost, b = back.cost;
      a.density = b.density = density;
      a.exchanges = b.exchanges = kExchangeAllgather | kExchangeAgreed | kExchangeDense | kExchangeHierarchical;
      CHECK(a.chooseExchange(n) == b.chooseExchange(n));
      CHECK(a.exchangeSeconds(Exchange::kAgreed, n) == b.exchangeSeconds(Exchange::kAgreed, n));
    }
  // Written again, the same bytes.
  CHECK(planFileToJson(back) == text);
}

TEST_CASE("malformed plan files are refused naming the field", "[plan][plan_file]") {
  const nlohmann::json good = nlohmann::json::parse(planFileToJson(sample()));
  auto refused = [](const nlohmann::json& j, const std::string& expect) {
    PlanFile out;
    const Status st = parsePlanFile(j.dump(), &out);
    INFO(st.message());
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK(st.message().find(expect) != std::string::npos);
  };
  PlanFile out;
  CHECK(parsePlanFile("{", &out).message() == "not valid JSON");
  CHECK(parsePlanFile("[]", &out).code() == Code::kInvalidArgument);
  nlohmann::json j = good;
  j["format"] = "mgs-cost-model";
  refused(j, "format: expected \"mgs-plan\"");
  j = good;
  j["version"] = 2;
  refused(j, "version: this library reads version 1, the file has 2");
  j = good;
  j.erase("workers");
  refused(j, "missing \"workers\"");
  j = good;
  j["bucket"] = j["buckets"];
  refused(j, "unknown key \"bucket\"");
  j = good;
  j["buckets"] = nlohmann::json::array();
  refused(j, "buckets: expected a non-empty array");
  j = good;
  j["buckets"][1]["exchange"] = "allgather,agreed";
  refused(j, "buckets[1].exchange: expected one of allgather, agreed, dense, hierarchical");
  j = good;
  j["buckets"][1]["tensors"] = nlohmann::json::array();
  refused(j, "buckets[1].tensors: expected a non-empty array");
  j = good;
  j["buckets"][2]["tensors"][0][0] = "fc.bias";
  refused(j, "buckets[2].tensors[0]: tensor \"fc.bias\" is in the plan twice");
  j = good;
  j["buckets"][0]["tensors"][1][1] = 0;
  refused(j, "buckets[0].tensors[1][1]: expected an integer in [1, ");
  j = good;
  j["buckets"][0]["tensors"][1][1] = 2.5;
  refused(j, "buckets[0].tensors[1][1]: expected an integer");
  j = good;
  j["cost_model"].erase("allgather");
  refused(j, "cost_model: cost model: missing \"allgather\"");
  j = good;
  j["settings"]["MGS_DENSITY"] = 0.01;
  refused(j, "settings.MGS_DENSITY: expected a string");
}

TEST_CASE("a plan file that does not fit the job names the difference", "[plan][plan_file]") {
  const PlanFile f = sample();
  CHECK(checkPlanFileJob(f, jobOf(f)).ok());
  auto differs = [&](PlanFileJob j, const std::string& expect) {
    const Status st = checkPlanFileJob(f, j);
    INFO(st.message());
    CHECK(st.code() == Code::kConfig);
    CHECK(st.message().find(expect) != std::string::npos);
    CHECK(st.message().find("delete the file") != std::string::npos);
  };
  PlanFileJob j = jobOf(f);
  j.workers = 2;
  differs(j, "it was written by a job of 4 ranks, this job has 2");
  j = jobOf(f);
  j.library = "0.2.0";
  differs(j, "it was written by libmgs 0.1.0, this is libmgs 0.2.0");
  j = jobOf(f);
  j.ranks_per_node = 1;
  differs(j, "2 ranks per node for the hierarchical exchange, this job has 1");
  j = jobOf(f);
  j.settings["MGS_DENSITY"] = "0.001";
  differs(j, "it was written with MGS_DENSITY=0.01, this job has 0.001");
  // Every recorded setting is compared; others (the planner's) are not.
  for (const auto& name : planFileSettings()) {
    j = jobOf(f);
    j.settings[name] = "y";
    differs(j, name + "=");
  }
  j = jobOf(f);
  j.settings["MGS_PLAN_TRIAL_STEPS"] = "9";
  CHECK(checkPlanFileJob(f, j).ok());
  for (const char* name : {"MGS_COMPRESSOR", "MGS_DENSITY", "MGS_WARMUP_STEPS", "MGS_EXCHANGE", "MGS_DENSE_FALLBACK"})
    CHECK(std::find(planFileSettings().begin(), planFileSettings().end(), name) != planFileSettings().end());
}

}  // namespace
}  // namespace mgs::plan
