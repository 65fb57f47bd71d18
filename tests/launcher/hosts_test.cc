#include "launcher/hosts.h"

#include <catch2/catch.hpp>

namespace mgs {
namespace launcher {
namespace {

TEST_CASE("parseHostList reads host[:slots] entries", "[launcher]") {
  std::vector<HostSlots> hosts;
  REQUIRE(parseHostList("a:2,b,c.example.org:16", &hosts).ok());
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].host == "a");
  CHECK(hosts[0].slots == 2);
  CHECK(hosts[1].host == "b");
  CHECK(hosts[1].slots == 0);
  CHECK(hosts[2].host == "c.example.org");
  CHECK(hosts[2].slots == 16);
  for (const char* bad : {"", "a:0", "a:-1", "a:1x", "a:", ":3", "a,,b", "a,"}) {
    INFO(bad);
    CHECK_FALSE(parseHostList(bad, &hosts).ok());
  }
}

TEST_CASE("parseHostfile takes the first word of each line, skipping comments", "[launcher]") {
  const std::string text = "# cluster\nnode1 slots=4\n\n  node2 slots=2 max_slots=8  # gpu box\n#node3\n";
  CHECK(parseHostfile(text) == std::vector<std::string>{"node1", "node2"});
  CHECK(parseHostfile("").empty());
}

TEST_CASE("isLocalHost", "[launcher]") {
  const std::vector<std::string> names = {"n1.example.org", "n1"};
  for (const char* h : {"localhost", "LOCALHOST", "127.0.0.1", "127.0.1.1", "n1", "N1.example.org", "me@n1"}) {
    INFO(h);
    CHECK(isLocalHost(h, names));
  }
  for (const char* h : {"n2", "n1.other.org", "10.0.0.1", "n10"}) {
    INFO(h);
    CHECK_FALSE(isLocalHost(h, names));
  }
}

}  // namespace
}  // namespace launcher
}  // namespace mgs
