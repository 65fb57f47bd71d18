// The cost-model file format (plan/cost_model_io.h): what the runtime saves
// reads back to the same costs, the documented forms parse, and malformed
// files are refused with the field's path and the cause.
#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>

#include "plan/cost_model_io.h"

namespace mgs::plan {
namespace {

using nlohmann::json;

// Costs agree at sizes around every segment boundary and far beyond.
void requireSameCosts(const CommModel& a, const CommModel& b) {
  std::vector<double> sizes = {0, 1, 100, 4096, 1 << 20, 3e6, 1 << 26, 1e10};
  for (const auto& s : a.segments())
    for (double d : {-1.0, 0.0, 1.0}) sizes.push_back(std::max(0.0, s.from_bytes + d));
  for (double x : sizes) {
    INFO("bytes " << x);
    CHECK(a.seconds(x) == b.seconds(x));  // exact: the writer keeps every digit
  }
}

json minimal() {
  return json::parse(R"({"workers": 4, "allreduce": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9},
                         "allgather": {"table": [[1024, 2e-5], [1048576, 1e-3], [8388608, 6e-3]]},
                         "sparsify": {"kind": "linear", "c_s": 1e-9}})");
}

TEST_CASE("every preset and a measured table survive write -> read exactly", "[plan][cost_io]") {
  for (const auto& name : costModelPresetNames()) {
    INFO(name);
    CostModel m, back;
    REQUIRE(costModelPreset(name, &m).ok());
    const std::string text = costModelToJson(m);
    REQUIRE(parseCostModel(text, &back).ok());
    CHECK(back.workers == m.workers);
    CHECK(back.bytes_per_element == m.bytes_per_element);
    CHECK(back.sparsify.kind == m.sparsify.kind);
    CHECK(back.sparsify.c_s == m.sparsify.c_s);
    requireSameCosts(m.allreduce, back.allreduce);
    requireSameCosts(m.allgather, back.allgather);  // gk-*: a discontinuous switch at 1 MiB
  }
  // What calibration measures: a table through timed points.
  CostModel m, back;
  REQUIRE(CommModel::table({{4096, 3.1e-5}, {65536, 4.7e-5}, {1 << 20, 4.1e-4}, {1 << 26, 0.031}}, &m.allreduce).ok());
  REQUIRE(CommModel::table({{8192, 2.2e-5}, {1 << 21, 9.9e-4}}, &m.allgather).ok());
  m.workers = 3;
  REQUIRE(parseCostModel(costModelToJson(m, /*pretty=*/false), &back).ok());
  requireSameCosts(m.allreduce, back.allreduce);
  requireSameCosts(m.allgather, back.allgather);
  CHECK(back.workers == 3);
}

TEST_CASE("the documented forms of a communication model parse", "[plan][cost_io]") {
  CostModel m;
  REQUIRE(parseCostModel(minimal().dump(), &m).ok());
  CHECK(m.workers == 4);
  CHECK(m.allreduce.seconds(1000) == Approx(1e-5 + 1e-6));
  CHECK(m.allgather.seconds(1024) == Approx(2e-5));
  CHECK(m.allgather.seconds((1024 + 1048576) / 2.0) == Approx((2e-5 + 1e-3) / 2));
  CHECK(m.sparsify.kind == SparsifyModel::Kind::kLinear);
  json j = minimal();
  j["allgather"] = json::parse(R"({"segments": [[0, 1e-4, 0], [1000, 0.5, 1e-6]]})");
  j["format"] = "mgs-cost-model";
  j["version"] = 1;
  j["comment"] = "hand-written";
  REQUIRE(parseCostModel(j.dump(), &m).ok());
  CHECK(m.allgather.seconds(999) == Approx(1e-4));
  CHECK(m.allgather.seconds(2000) == Approx(0.5 + 2e-3));
}

TEST_CASE("instance fields override only what they name", "[plan][cost_io]") {
  CostModel m;
  REQUIRE(costModelPreset("10gbe-P8", &m).ok());
  const double ag = m.allgather.seconds(1e6);
  REQUIRE(readCostModelFields(json::parse(R"({"bytes_per_element": 2, "layers": [], "density": 0.1})"), &m).ok());
  CHECK(m.bytes_per_element == 2);
  CHECK(m.workers == 8);
  CHECK(m.allgather.seconds(1e6) == ag);
}

TEST_CASE("malformed cost models are refused with the path and the cause", "[plan][cost_io]") {
  struct Bad {
    std::string text;
    std::string expect;
  };
  auto with = [](const char* key, const json& v) {
    json j = minimal();
    j[key] = v;
    return j.dump();
  };
  auto without = [](const char* key) {
    json j = minimal();
    j.erase(key);
    return j.dump();
  };
  const std::vector<Bad> cases = {
      {"", "not valid JSON"},
      {"{\"workers\": 4,", "not valid JSON"},
      {"[1, 2]", "expected a JSON object, got array"},
      {without("allgather"), "missing \"allgather\""},
      {without("workers"), "missing \"workers\""},
      {with("workers", 0), "workers: expected an integer in [1,"},
      {with("workers", 2.5), "workers: expected an integer, got 2.5"},
      {with("workers", json::parse("18446744073709551615")), "workers: expected an integer in"},
      {with("bytes_per_element", "4"), "bytes_per_element: expected an integer, got string"},
      {with("version", 2), "version: expected an integer in [1, 1]"},
      {with("format", "other"), "format: expected \"mgs-cost-model\""},
      {with("densty", 0.1), "unknown key \"densty\""},
      {with("allreduce", json::parse(R"({"alpha_s": "1e-5", "beta_s_per_byte": 1e-9})")),
       "allreduce.alpha_s: expected a number, got string"},
      {with("allreduce", json::parse(R"({"alpha_s": -1, "beta_s_per_byte": 1e-9})")),
       "allreduce.alpha_s: expected a number >= 0"},
      {with("allreduce", json::parse(R"({"alpha_s": 1e-5})")), "needs \"beta_s_per_byte\""},
      {with("allreduce", json::parse(R"({"alpha": 1e-5, "beta_s_per_byte": 1})")), "exactly one of"},
      {with("allreduce", json::parse(R"({"alpha_s": 1e-5, "beta_s_per_byte": 1, "table": []})")), "exactly one of"},
      {with("allreduce", json::parse(R"({"points": [[1, 2], [3, 4]]})")), "rename it to \"table\""},
      {with("allgather", json::parse(R"({"table": [[1, 2], [3]]})")), "allgather.table[1]: expected [bytes, seconds]"},
      {with("allgather", json::parse(R"({"table": [[1, 2], [3, null]]})")),
       "allgather.table[1][1]: expected a number, got null"},
      {with("allgather", json::parse(R"({"table": [[1, 2]]})")), "allgather: a cost table needs at least 2 points"},
      {with("allgather", json::parse(R"({"table": [[1, 2], [1, 3]]})")), "two points at 1 bytes"},
      {with("allgather", json::parse(R"({"table": [[-1, 2], [1, 3]]})")), "must be >= 0"},
      {with("allgather", json::parse(R"({"table": {"1": 2}})")), "allgather.table: expected an array"},
      {with("allgather", json::parse(R"({"segments": [[5, 1, 1]]})")), "first segment must start at 0"},
      {with("allgather", json::parse(R"({"segments": [[0, 1, 1], [0, 2, 2]]})")), "not after the previous"},
      {with("allgather", json::parse(R"({"segments": []})")), "at least one segment"},
      {with("allgather", 7), "allgather: expected an object, got number"},
      {with("sparsify", json::parse(R"({"kind": "cubic", "c_s": 1})")), "sparsify.kind: expected \"linear\""},
      {with("sparsify", json::parse(R"({"kind": "linear"})")), "sparsify: needs \"c_s\""},
      {with("sparsify", json::parse(R"({"kind": "linear", "c_s": 1, "c": 2})")), "unknown key \"c\""},
      {R"({"workers": 1, "allreduce": {"alpha_s": 1e400, "beta_s_per_byte": 1}})", "not valid JSON"},
  };
  for (const auto& b : cases) {
    CostModel m;
    const Status st = parseCostModel(b.text, &m);
    INFO(b.text << "\n-> " << st.message());
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK(st.message().find(b.expect) != std::string::npos);
  }
}

TEST_CASE("a key is read from its own object only", "[plan][cost_io]") {
  // The old hand-written reader found "c_s" (or "points") wherever it came
  // next in the text; here a missing field stays missing.
  CostModel m;
  const Status st = readCostModelFields(json::parse(R"({"sparsify": {"kind": "linear"}, "other": {"c_s": 5}})"), &m);
  CHECK(st.message().find("sparsify: needs \"c_s\"") != std::string::npos);
  const double before = m.sparsify.c_s;
  CHECK(m.sparsify.c_s == before);
}

}  // namespace
}  // namespace mgs::plan
