#include "launcher/mgs_vars.h"

#include <catch2/catch.hpp>
#include <set>

namespace mgs {
namespace launcher {
namespace {

TEST_CASE("every MGS_* parameter has a flag derived from its name", "[launcher]") {
  CHECK(flagNameFor("MGS_STALL_ABORT_S") == "stall-abort-s");
  CHECK(flagNameFor("MGS_DENSITY") == "density");
  std::set<std::string> flags;
  for (const auto& spec : paramSpecs()) {
    const std::string flag = flagNameFor(spec.name);
    CHECK(flag.find('_') == std::string::npos);
    CHECK(flags.insert(flag).second);  // no two parameters share a flag
  }
  for (const char* f : {"compressor", "density", "planner", "fusion-threshold-bytes", "min-sparse-elements", "backend",
                        "error-feedback", "warmup-steps", "profile-steps", "cycle-time-ms", "timeline", "log-level",
                        "stall-warning-s", "stall-abort-s", "calibration", "plan-file"}) {
    INFO(f);
    CHECK(flags.count(f) == 1);
  }
}

TEST_CASE("flag help comes from the table row, scope included", "[launcher]") {
  const std::string cycle = flagHelp(*findParam("MGS_CYCLE_TIME_MS"));
  CHECK(cycle.find(findParam("MGS_CYCLE_TIME_MS")->allowed) != std::string::npos);
  CHECK(cycle.find("Same on every rank") != std::string::npos);
  CHECK(flagHelp(*findParam("MGS_LOG_LEVEL")).find("Same on every rank") == std::string::npos);
  CHECK(flagHelp(*findParam("MGS_TIMELINE")).find("Default: unset.") != std::string::npos);
}

TEST_CASE("validateVariables merges the environment's MGS_* with the flags", "[launcher]") {
  std::map<std::string, std::string> merged;
  REQUIRE(validateVariables({{"MGS_DENSITY", "0.1"}},
                            {{"MGS_DENSITY", "0.5"}, {"MGS_PLANNER", "fusion"}, {"HOME", "/root"}}, &merged)
              .ok());
  CHECK(merged == std::map<std::string, std::string>{{"MGS_DENSITY", "0.1"}, {"MGS_PLANNER", "fusion"}});

  Status st = validateVariables({{"MGS_CYCLE_TIME_MS", "0"}}, {}, &merged);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().rfind("--cycle-time-ms: invalid MGS_CYCLE_TIME_MS='0'", 0) == 0);
  st = validateVariables({}, {{"MGS_PLANNER", "greedy"}}, &merged);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().rfind("environment: invalid MGS_PLANNER='greedy'", 0) == 0);
}

}  // namespace
}  // namespace launcher
}  // namespace mgs
