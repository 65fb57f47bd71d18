// ThreadCommunicator::split: groups by color, ordered by key then rank; a
// negative color gets no communicator; the groups' collectives are their own.
#include <catch2/catch.hpp>

#include <memory>
#include <thread>
#include <vector>

#include "comm/fake/thread_communicator.h"

using namespace mgs;

TEST_CASE("thread communicator: split by color, ordered by key", "[comm][split]") {
  const int P = 5;
  auto world = std::make_shared<ThreadWorld>(P);
  struct Seen {
    bool has = false;
    int rank = -1, size = -1;
    int32_t sum = -1;
  };
  std::vector<Seen> seen(P);
  std::vector<std::thread> ts;
  for (int r = 0; r < P; ++r)
    ts.emplace_back([&, r] {
      ThreadCommunicator comm(world, r);
      // Colors: even ranks 0, odd ranks 1, rank 4 none; key: minus the rank.
      std::unique_ptr<Communicator> sub;
      const int color = r == 4 ? -1 : r % 2;
      if (!comm.split(color, -r, &sub).ok()) return;
      if (!sub) return;
      seen[r].has = true;
      seen[r].rank = sub->rank();
      seen[r].size = sub->size();
      int32_t v = r + 1;
      if (sub->allreduce(&v, 1, MGS_INT32, CommOp::kSum).ok()) seen[r].sum = v;
    });
  for (auto& t : ts) t.join();
  // Even group {0, 2} by key -r: rank 2 first. Odd group {1, 3}: rank 3 first.
  REQUIRE(seen[0].has);
  REQUIRE(seen[0].size == 2);
  REQUIRE(seen[2].rank == 0);
  REQUIRE(seen[0].rank == 1);
  REQUIRE(seen[3].rank == 0);
  REQUIRE(seen[1].rank == 1);
  REQUIRE(seen[0].sum == 1 + 3);
  REQUIRE(seen[2].sum == 1 + 3);
  REQUIRE(seen[1].sum == 2 + 4);
  REQUIRE(seen[3].sum == 2 + 4);
  REQUIRE(!seen[4].has);
}
