#include <catch2/catch.hpp>

#include "common/params.h"

using mgs::Code;
using mgs::Config;
using mgs::parseConfig;

TEST_CASE("defaults match the documented table", "[params]") {
  Config c;
  REQUIRE(parseConfig({}, &c).ok());
  CHECK(c.compressor == "none");
  CHECK(c.density == Approx(0.001));
  CHECK(c.effectivePlanner() == "mgwfbp");
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
  REQUIRE(parseConfig({{"MGS_COMPRESSOR", "gaussiank"}, {"MGS_DENSITY", "0.01"},
                       {"MGS_ERROR_FEEDBACK", "0"}, {"MGS_STALL_ABORT_S", "5"},
                       {"MGS_STALL_WARNING_S", "30"}, {"PATH", "/bin"}},
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
  struct Bad { const char* name; const char* value; const char* allowed; };
  const Bad cases[] = {
      {"MGS_DENSITY", "0", "(0, 1]"},        {"MGS_DENSITY", "1.5", "(0, 1]"},
      {"MGS_DENSITY", "abc", "(0, 1]"},      {"MGS_DENSITY", "nan", "(0, 1]"},
      {"MGS_COMPRESSOR", "top-k", "gaussiank"}, {"MGS_ERROR_FEEDBACK", "yes", "0 or 1"},
      {"MGS_CYCLE_TIME_MS", "0", "(0, 10000]"}, {"MGS_FUSION_THRESHOLD_BYTES", "-1", ">= 0"},
      {"MGS_PROFILE_STEPS", "0", ">= 1"},    {"MGS_LOG_LEVEL", "verbose", "trace"},
      {"MGS_PLANNER", "best", "mgwfbp"},      {"MGS_STALL_ABORT_S", "-2", ">= 0"},
      {"MGS_WARMUP_STEPS", "1.5", "integer"},
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
  CHECK(specs.size() == 18);
}
