// docs/configuration.md must list every MGS_* variable with its default, so
// the documentation cannot drift from the single declaration in params.cc.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "common/params.h"

TEST_CASE("docs/configuration.md lists every variable with its default, scope and allowed values", "[params][docs]") {
  std::ifstream f(MGS_SOURCE_DIR "/docs/configuration.md");
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  for (const auto& p : mgs::paramSpecs()) {
    INFO(p.name);
    const std::string row = "| `" + p.name + "` | " + p.type + " | `" +
                            (p.default_value.empty() ? "(unset)" : p.default_value) + "` | " +
                            (p.scope == mgs::Scope::kSameOnAllRanks ? "same" : "per rank") + " | " + p.allowed + " |";
    CHECK(doc.find(row) != std::string::npos);
  }
}
