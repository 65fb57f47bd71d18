#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/parallel.h"
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

TEST_CASE("parallelFor runs every task once, on helpers that exist", "[threads][parallel]") {
  for (int threads : {1, 2, 4}) {
    for (int count : {0, 1, 3, 64, 1000}) {
      std::vector<std::atomic<int>> runs(count);
      std::set<std::thread::id> who;
      std::mutex mu;
      parallelFor(count, threads, [&](int i) {
        runs[i].fetch_add(1);
        std::lock_guard<std::mutex> lk(mu);
        who.insert(std::this_thread::get_id());
      });
      for (int i = 0; i < count; ++i) CHECK(runs[i].load() == 1);
      CHECK(static_cast<int>(who.size()) <= std::max(threads, 1));
      if (threads == 1 && count > 0) CHECK(*who.begin() == std::this_thread::get_id());
    }
  }
  CHECK(parallelPoolThreads() >= 1);
}

TEST_CASE("parallelFor: the caller finishes alone when no helper starts", "[threads][parallel]") {
  // Tasks that block until the caller has done them all: if the caller waited
  // for helpers that never start (a busy host), this would hang; it must
  // instead claim every task itself. The helpers are kept from starting by
  // holding them inside another loop's task until we are done.
  std::atomic<bool> release{false};
  std::atomic<int> blocked{0};
  const int helpers = parallelPoolThreads() + 8;
  std::thread hog([&] {
    parallelFor(helpers + 1, helpers + 1, [&](int) {
      blocked.fetch_add(1);
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  });
  // Wait until the pool's helpers (all of them) sit in the hog's tasks.
  while (blocked.load() < helpers + 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<int> done(100, 0);
  parallelFor(100, 4, [&](int i) { done[i] = 1; });  // no helper is free
  CHECK(std::count(done.begin(), done.end(), 1) == 100);
  release = true;
  hog.join();
}

TEST_CASE("parallelFor: a task's exception reaches the caller after every task ran", "[threads][parallel]") {
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH(parallelFor(50, 3,
                                [&](int i) {
                                  ran.fetch_add(1);
                                  if (i == 7) throw std::runtime_error("task 7 failed");
                                }),
                    "task 7 failed");
  CHECK(ran.load() == 50);
  // Nested loops run inline instead of waiting on the pool from inside it.
  std::atomic<int> inner{0};
  parallelFor(4, 4, [&](int) { parallelFor(10, 4, [&](int) { inner.fetch_add(1); }); });
  CHECK(inner.load() == 40);
}
