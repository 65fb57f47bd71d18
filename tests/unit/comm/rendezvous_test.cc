// The rendezvous under the thread-rank communicators (comm/fake/rendezvous.h):
// every rank gets every rank's pointer, generations do not mix, an abort
// ends every waiting and later exchange on every rank naming why, and a rank
// that never arrives makes the others fail at the timeout instead of hanging.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/fake/rendezvous.h"

using namespace mgs;

namespace {

// Runs body(rank) on P threads; returns what each reported ("" = fine).
template <class F>
std::vector<std::string> onThreads(int P, F body) {
  std::vector<std::string> out(P);
  std::vector<std::thread> ts;
  for (int r = 0; r < P; ++r) ts.emplace_back([&, r] { out[r] = body(r); });
  for (auto& t : ts) t.join();
  return out;
}

}  // namespace

TEST_CASE("rendezvous: every rank reads every rank's value, generation by generation", "[comm][rendezvous]") {
  for (int P : {1, 2, 4}) {
    Rendezvous rv(P, 30);
    const auto errs = onThreads(P, [&](int rank) -> std::string {
      for (int g = 0; g < 200; ++g) {
        const int mine = 1000 * g + rank;
        std::vector<const void*> all;
        const Status st = rv.exchange(rank, &mine, "test", &all);
        if (!st.ok()) return st.toString();
        if (all.size() != static_cast<size_t>(P)) return "wrong count";
        for (int q = 0; q < P; ++q)
          if (*static_cast<const int*>(all[q]) != 1000 * g + q) return "generation " + std::to_string(g) + " mixed";
        // A second exchange brackets the reads: `mine` may change after it.
        if (!rv.exchange(rank, nullptr, "test", &all).ok()) return "second exchange";
      }
      return "";
    });
    for (int r = 0; r < P; ++r) {
      INFO("P = " << P << ", rank " << r);
      REQUIRE(errs[r].empty());
    }
  }
}

TEST_CASE("rendezvous: an abort fails the waiting ranks and every later exchange, naming why", "[comm][rendezvous]") {
  const int P = 3;
  Rendezvous rv(P, 30);
  std::atomic<int> waiting{0};
  const auto t0 = std::chrono::steady_clock::now();
  const auto errs = onThreads(P, [&](int rank) -> std::string {
    std::vector<const void*> all;
    if (rank == P - 1) {
      while (waiting.load() < P - 1) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the others are inside exchange()
      rv.abort("rank 2: injected");
      const Status later = rv.exchange(rank, nullptr, "after", &all);
      return later.code() == Code::kCommunication ? "" : "a later exchange did not fail: " + later.toString();
    }
    ++waiting;
    const Status st = rv.exchange(rank, nullptr, "allgather", &all);
    if (st.code() != Code::kCommunication) return "not kCommunication: " + st.toString();
    if (st.message().find("allgather on rank " + std::to_string(rank)) == std::string::npos ||
        st.message().find("rank 2: injected") == std::string::npos)
      return "message: " + st.message();
    return "";
  });
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r);
    REQUIRE(errs[r].empty());
  }
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  REQUIRE(rv.abortReason() == "rank 2: injected");
}

TEST_CASE("rendezvous: a rank that never arrives fails the others at the timeout", "[comm][rendezvous]") {
  const int P = 3;
  Rendezvous rv(P, 0.2);
  const auto errs = onThreads(P, [&](int rank) -> std::string {
    if (rank == 1) return "";  // never arrives
    std::vector<const void*> all;
    const Status st = rv.exchange(rank, nullptr, "broadcast", &all);
    // The first to time out aborts the world (kTimeout); the other is woken
    // by that abort (kCommunication). Both name the collective.
    if (st.code() != Code::kTimeout && st.code() != Code::kCommunication) return "code: " + st.toString();
    if (st.message().find("broadcast") == std::string::npos ||
        st.message().find("never reached it") == std::string::npos)
      return "message: " + st.message();
    return "";
  });
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r);
    REQUIRE(errs[r].empty());
  }
  REQUIRE(!rv.abortReason().empty());
}
