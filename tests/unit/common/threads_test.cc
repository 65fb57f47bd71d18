#include <catch2/catch.hpp>

#include "common/threads.h"

using namespace mgs;

TEST_CASE("the auto thread budget shares the cores among the local ranks", "[threads]") {
  // 4 ranks on 2 cores (the emulated cluster): one thread each, never a team.
  CHECK(threadBudgetFor(0, 2, 4) == 1);
  CHECK(threadBudgetFor(0, 2, 2) == 1);
  CHECK(threadBudgetFor(0, 2, 1) == 2);
  CHECK(threadBudgetFor(0, 32, 8) == 4);
  // Capped: a rank alone on a large node does not fork a huge team.
  CHECK(threadBudgetFor(0, 128, 1) == kMaxAutoThreads);
  // Degenerate inputs still give one thread.
  CHECK(threadBudgetFor(0, 0, 0) == 1);
  // MGS_THREADS > 0 is taken as given (the user knows the host).
  CHECK(threadBudgetFor(3, 2, 4) == 3);
  CHECK(availableCores() >= 1);
  CHECK(threadBudget(0, 1) == std::min(availableCores(), kMaxAutoThreads));
}

TEST_CASE("small buffers run on one thread", "[threads]") {
  CHECK(threadsFor(0, 8) == 1);
  CHECK(threadsFor(4096, 8) == 1);
  CHECK(threadsFor(kMinElementsPerThread * 2 - 1, 8) == 1);
  CHECK(threadsFor(kMinElementsPerThread * 2, 8) == 2);
  CHECK(threadsFor(kMinElementsPerThread * 100, 8) == 8);
  CHECK(threadsFor(kMinElementsPerThread * 100, 0) == 1);
}
