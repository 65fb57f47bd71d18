#include <catch2/catch.hpp>

#include <cstring>
#include <sstream>

#include "common/params.h"

using mgs::Code;
using mgs::Config;
using mgs::parseConfig;

TEST_CASE("defaults match the documented table", "[params]") {
  Config c;
  REQUIRE(parseConfig({}, &c).ok());
  CHECK(c.compressor == "none");
  CHECK(c.density == Approx(0.001));
  CHECK(c.effectivePlanner() == "none");
  CHECK(c.fusion_threshold_bytes == 64ll << 20);
  CHECK(c.cycle_time_ms == Approx(1.0));
  CHECK(c.stall_abort_s == 0);
  for (const auto& p : mgs::paramSpecs()) {
    Config d;
    INFO(p.name << " default '" << p.default_value << "'");
    if (!p.default_value.empty()) CHECK(p.apply(p.default_value, d).ok());
    CHECK(!p.doc.empty());
  }
}

TEST_CASE("values are parsed into the config", "[params]") {
  Config c;
  REQUIRE(parseConfig({{"MGS_COMPRESSOR", "gaussiank"},
                       {"MGS_DENSITY", "0.01"},
                       {"MGS_ERROR_FEEDBACK", "0"},
                       {"MGS_STALL_ABORT_S", "5"},
                       {"MGS_STALL_WARNING_S", "30"},
                       {"PATH", "/bin"}},
                      &c)
              .ok());
  CHECK(c.compressor == "gaussiank");
  CHECK(c.density == Approx(0.01));
  CHECK_FALSE(c.error_feedback);
  CHECK(c.effectivePlanner() == "mgs");
  // An abort sooner than the warning moves the warning forward.
  CHECK(c.stall_warning_s == Approx(5));
}

TEST_CASE("bad values name the variable, the value and what is allowed", "[params]") {
  struct Bad {
    const char* name;
    const char* value;
    const char* allowed;
  };
  const Bad cases[] = {
      {"MGS_DENSITY", "0", "(0, 1]"},
      {"MGS_DENSITY", "1.5", "(0, 1]"},
      {"MGS_DENSITY", "abc", "(0, 1]"},
      {"MGS_DENSITY", "nan", "(0, 1]"},
      {"MGS_COMPRESSOR", "top-k", "gaussiank"},
      {"MGS_ERROR_FEEDBACK", "yes", "0 or 1"},
      {"MGS_CYCLE_TIME_MS", "0", "[0.001, 10000]"},
      {"MGS_FUSION_THRESHOLD_BYTES", "-1", ">= 0"},
      {"MGS_PROFILE_STEPS", "0", "[1, 1000000000]"},
      {"MGS_LOG_LEVEL", "verbose", "trace"},
      {"MGS_PLANNER", "best", "mgwfbp"},
      {"MGS_STALL_ABORT_S", "-2", ">= 0"},
      {"MGS_WARMUP_STEPS", "1.5", "integer"},
      {"MGS_BACKEND", "gloo", "auto, mpi, nccl"},
      {"MGS_CYCLE_TIME_MS", "1e-9", "[0.001, 10000]"},
      {"MGS_WARMUP_STEPS", "9223372036854775807", "[0, 1000000000]"},
      {"MGS_CALIBRATION", "", "'auto', 'off'"},
      {"MGS_GPU_LAUNCHES", "cooperative", "one of auto, per-pass"},
  };
  for (const auto& b : cases) {
    Config c;
    const mgs::Status st = parseConfig({{b.name, b.value}}, &c);
    INFO(b.name << "=" << b.value << " -> " << st.message());
    CHECK(st.code() == Code::kConfig);
    CHECK(st.message().find(b.name) != std::string::npos);
    CHECK(st.message().find(std::string("'") + b.value + "'") != std::string::npos);
    CHECK(st.message().find(b.allowed) != std::string::npos);
  }
}

TEST_CASE("unknown MGS_ variables are rejected with the known list", "[params]") {
  Config c;
  const mgs::Status st = parseConfig({{"MGS_DENSTY", "0.1"}}, &c);
  CHECK(st.code() == Code::kConfig);
  CHECK(st.message().find("unknown variable MGS_DENSTY") != std::string::npos);
  CHECK(st.message().find("MGS_DENSITY") != std::string::npos);
}

TEST_CASE("every parameter is declared once", "[params]") {
  const auto& specs = mgs::paramSpecs();
  for (size_t i = 0; i < specs.size(); ++i) {
    CHECK(mgs::findParam(specs[i].name) == &specs[i]);
    for (size_t j = i + 1; j < specs.size(); ++j) CHECK(specs[i].name != specs[j].name);
  }
}

TEST_CASE("each table default reads to the Config field's default, and show() reads back", "[params]") {
  const Config defaults;
  for (const auto& p : mgs::paramSpecs()) {
    INFO(p.name);
    CHECK(p.show(defaults) == p.default_value);
    // A non-default value survives show() -> apply() unchanged.
    Config c;
    REQUIRE(parseConfig({{"MGS_DENSITY", "0.1"},
                         {"MGS_CYCLE_TIME_MS", "2.5"},
                         {"MGS_ERROR_FEEDBACK", "0"},
                         {"MGS_COMPRESSOR", "ldte"},
                         {"MGS_TIMELINE", "/tmp/t.json"}},
                        &c)
                .ok());
    Config back;
    REQUIRE(p.apply(p.show(c), back).ok());
    CHECK(p.show(back) == p.show(c));
  }
}

TEST_CASE("the printout lists every parameter from the table", "[params]") {
  Config c;
  REQUIRE(parseConfig({{"MGS_COMPRESSOR", "topk"}, {"MGS_DENSITY", "0.01"}}, &c).ok());
  const std::string s = mgs::describeConfig(c);
  for (const auto& p : mgs::paramSpecs()) CHECK(s.find(p.name + "=") != std::string::npos);
  CHECK(s.find("MGS_DENSITY=0.01 ") != std::string::npos);
  CHECK(s.find("MGS_PLANNER=auto (mgs)") != std::string::npos);
}

TEST_CASE("MGS_WARMUP_STEPS=auto warms up only below 10% density, 50 steps a decade", "[params]") {
  auto effective = [](std::map<std::string, std::string> vars) {
    Config c;
    REQUIRE(parseConfig(vars, &c).ok());
    return c.effectiveWarmupSteps();
  };
  CHECK(Config().warmup_steps == Config::kWarmupAuto);
  CHECK(effective({}) == 100);  // the default density, 0.001
  CHECK(effective({{"MGS_DENSITY", "0.01"}}) == 50);
  CHECK(effective({{"MGS_DENSITY", "0.1"}}) == 0);
  CHECK(effective({{"MGS_DENSITY", "1"}}) == 0);
  CHECK(effective({{"MGS_DENSITY", "0.05"}}) == 15);  // 50 * log10(2) = 15.05
  CHECK(effective({{"MGS_DENSITY", "0.0001"}}) == 150);
  CHECK(effective({{"MGS_DENSITY", "0.0001"}, {"MGS_WARMUP_STEPS", "0"}}) == 0);
  CHECK(effective({{"MGS_DENSITY", "0.1"}, {"MGS_WARMUP_STEPS", "7"}}) == 7);
  CHECK(effective({{"MGS_WARMUP_STEPS", "auto"}}) == 100);
  Config c;
  REQUIRE(parseConfig({{"MGS_COMPRESSOR", "topk"}}, &c).ok());
  CHECK(mgs::describeConfig(c).find("MGS_WARMUP_STEPS=auto (100)") != std::string::npos);
  CHECK(parseConfig({{"MGS_WARMUP_STEPS", "-1"}}, &c).code() == Code::kConfig);
}

namespace {
// Runs the agreement check as `configs.size()` ranks would: every rank's
// digests gathered in rank order, the check evaluated on each rank.
std::vector<mgs::Status> agreement(const std::vector<Config>& configs) {
  std::vector<uint64_t> all;
  for (const auto& c : configs)
    for (uint64_t d : mgs::agreementDigests(c)) all.push_back(d);
  std::vector<mgs::Status> out;
  const int size = static_cast<int>(configs.size());
  for (const auto& c : configs)
    out.push_back(mgs::checkAgreement(c, size, [&](const void*, size_t bytes, void* recv) {
      REQUIRE(bytes * size == all.size() * sizeof(uint64_t));
      std::memcpy(recv, all.data(), all.size() * sizeof(uint64_t));
      return mgs::Status::OK();
    }));
  return out;
}
// An allowed value other than the default, from "one of a, b, c".
std::string otherEnumValue(const mgs::ParamSpec& p) {
  const std::string prefix = "one of ";
  REQUIRE(p.allowed.rfind(prefix, 0) == 0);
  std::stringstream list(p.allowed.substr(prefix.size()));
  std::string v;
  while (std::getline(list, v, ',')) {
    v.erase(0, v.find_first_not_of(' '));
    if (v != p.default_value) return v;
  }
  FAIL("no value other than the default in " << p.allowed);
  return "";
}

}  // namespace

TEST_CASE("settings that steer cross-rank decisions must agree; the others may differ", "[params]") {
  for (const auto& p : mgs::paramSpecs()) {
    // A valid value different from the default for each parameter.
    std::string other;
    if (p.type == "bool")
      other = p.default_value == "1" ? "0" : "1";
    else if (p.name == "MGS_COMPRESSOR")
      other = "topk";
    else if (p.name == "MGS_PLANNER")
      other = "single";
    else if (p.name == "MGS_BACKEND")
      other = "mpi";
    else if (p.name == "MGS_EXCHANGE")
      other = "agreed";
    else if (p.name == "MGS_LOG_LEVEL")
      other = "error";
    else if (p.name == "MGS_NONFINITE")
      other = "error";
    else if (p.type == "int" || p.type == "float")
      other = p.name == "MGS_DENSITY" ? "0.0011" : "7";
    else if (p.type == "enum")
      other = otherEnumValue(p);
    else
      other = "/tmp/somewhere.json";
    INFO(p.name << "=" << other);
    std::vector<Config> ranks(3);
    REQUIRE(p.apply(other, ranks[2]).ok());
    const auto st = agreement(ranks);
    for (int r = 0; r < 3; ++r) {
      if (p.scope == mgs::Scope::kPerRank) {
        CHECK(st[r].ok());
        continue;
      }
      CHECK(st[r].code() == Code::kConfig);
      CHECK(st[r].message().find(p.name + " differs on ranks 2") != std::string::npos);
      if (r == 2) CHECK(st[r].message().find("this rank has '" + other + "'") != std::string::npos);
    }
  }
  // MGS_CYCLE_TIME_MS decides when partial sparse buckets flush (issue #12).
  CHECK(mgs::findParam("MGS_CYCLE_TIME_MS")->scope == mgs::Scope::kSameOnAllRanks);
  CHECK(mgs::findParam("MGS_LOG_LEVEL")->scope == mgs::Scope::kPerRank);
  // MGS_PLAN_FILE decides whether every rank plans or runs a saved plan.
  CHECK(mgs::findParam("MGS_PLAN_FILE")->scope == mgs::Scope::kSameOnAllRanks);
  // Densities equal to six decimals still differ (the old check compared
  // std::to_string's six digits).
  std::vector<Config> ranks(2);
  REQUIRE(parseConfig({{"MGS_DENSITY", "0.0000001"}}, &ranks[0]).ok());
  REQUIRE(parseConfig({{"MGS_DENSITY", "0.0000002"}}, &ranks[1]).ok());
  CHECK(agreement(ranks)[0].code() == Code::kConfig);
  CHECK(agreement({Config(), Config(), Config(), Config()})[3].ok());
}
