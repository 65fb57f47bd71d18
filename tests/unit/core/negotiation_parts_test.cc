#include <set>
#include <catch2/catch.hpp>

#include "core/response_cache.h"
#include "core/stall_inspector.h"

using namespace mgs;

TEST_CASE("response cache keeps stable bits and matches signatures", "[cache]") {
  ResponseCache cache;
  Signature s;
  s.shape = {4};
  cache.put("a", s, 1);
  cache.put("b", s, 1);
  CHECK(cache.lookup("a", s) == 0);
  CHECK(cache.lookup("b", s) == 1);
  Signature other = s;
  other.shape = {5};
  CHECK(cache.lookup("a", other) == -1);  // changed shape: slow path
  cache.erase("a");
  CHECK(cache.lookup("a", s) == -1);
  CHECK(cache.bits() == 2);  // "b" keeps its bit: positions never shift
  CHECK(cache.nameAt(0).empty());
  cache.put("c", s, 2);
  CHECK(cache.lookup("c", s) == 0);  // the lowest free bit is reused
  CHECK(cache.lookup("b", s) == 1);
  // Allgather signatures ignore the first dimension.
  Signature g;
  g.type = OpType::kAllgather;
  g.shape = {3, 2};
  cache.put("g", g, 3);
  Signature g2 = g;
  g2.shape = {7, 2};
  CHECK(cache.lookup("g", g2) == 2);
  g2.shape = {7, 3};
  CHECK(cache.lookup("g", g2) == -1);
}

TEST_CASE("response cache holds other process sets' ops as foreign bits", "[cache]") {
  ResponseCache cache;
  Signature mine;
  mine.shape = {4};
  mine.process_set = 1;
  Signature theirs;  // what a rank outside set 2 knows of its op: the set
  theirs.process_set = 2;
  cache.put("x [process set 1]", mine, 1);
  cache.put("y [process set 2]", theirs, 1, /*foreign=*/true);
  cache.put("z", Signature{}, 1);
  CHECK(cache.lookup("x [process set 1]", mine) == 0);
  CHECK(cache.foreignBits() == std::set<size_t>{1});
  CHECK(cache.foreign(1));
  CHECK_FALSE(cache.foreign(0));
  // A rank submitting another set's op never matches the foreign slot, even
  // with the placeholder's own signature: it must reach the slow path.
  CHECK(cache.lookup("y [process set 2]", theirs) == -1);
  // Removing set 2 forgets its ops (foreign ones included) and nothing else.
  cache.eraseSet(2);
  CHECK(cache.foreignBits().empty());
  CHECK(cache.lookup("x [process set 1]", mine) == 0);
  CHECK(cache.lookup("z", Signature{}) == 2);
  // The freed bit is reused by an op of this rank's own: not foreign.
  cache.put("w", Signature{}, 2);
  CHECK(cache.lookup("w", Signature{}) == 1);
  CHECK_FALSE(cache.foreign(1));
  cache.eraseSet(1);
  CHECK(cache.lookup("x [process set 1]", mine) == -1);
  CHECK(cache.size() == 2);
}

TEST_CASE("stall inspector warns once per period and aborts after the limit", "[stall]") {
  StallInspector inspector(10.0, 30.0);
  const auto t0 = Clock::now();
  StallEntry e{"w", OpType::kAllreduce, {true, false, true, false}, t0, {}};
  std::vector<StallEntry*> entries{&e};
  CHECK(inspector.inspect(entries, t0 + std::chrono::seconds(5)).warnings.empty());
  auto v = inspector.inspect(entries, t0 + std::chrono::seconds(11));
  REQUIRE(v.warnings.size() == 1);
  CHECK(v.warnings[0].find("'w' was submitted by ranks 0, 2 but not by ranks 1, 3") != std::string::npos);
  CHECK(inspector.inspect(entries, t0 + std::chrono::seconds(12)).warnings.empty());  // not again yet
  CHECK(inspector.inspect(entries, t0 + std::chrono::seconds(22)).warnings.size() == 1);
  v = inspector.inspect(entries, t0 + std::chrono::seconds(31));
  REQUIRE(v.aborts.size() == 1);
  CHECK(v.aborts[0].first == "w");
  CHECK(v.aborts[0].second.find("MGS_STALL_ABORT_S") != std::string::npos);
  StallInspector never(10.0, 0.0);
  CHECK(never.inspect(entries, t0 + std::chrono::hours(5)).aborts.empty());
}
