// The NCCL communicator's wait policy (src/comm/nccl/nccl_wait.h) on the CPU:
// completion, an asynchronous error, a failed query and a deadline each end
// the wait; every failure aborts exactly once and names the collective.
#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "comm/nccl/nccl_wait.h"

namespace mgs::nccl {
namespace {

struct Fake {
  int readyAt = -1;  // poll number that reports completion (-1: never)
  int failAt = -1;   // poll number whose query fails
  int errorAt = -1;  // poll number from which an async error is reported
  int polls = 0, aborts = 0;
  WaitHooks hooks() {
    WaitHooks h;
    h.ready = [this](std::string* why) {
      ++polls;
      if (failAt >= 0 && polls >= failAt) {
        *why = "query broke";
        return -1;
      }
      return readyAt >= 0 && polls >= readyAt ? 1 : 0;
    };
    h.asyncError = [this] {
      return errorAt >= 0 && polls >= errorAt ? std::string("remote peer gone") : std::string();
    };
    h.abort = [this] { ++aborts; };
    return h;
  }
};

}  // namespace

TEST_CASE("nccl wait: completion ends the wait without an abort", "[gpu_cpu][nccl]") {
  Fake f;
  f.readyAt = 200;  // past the spin phase, so the sleeps run too
  const Status st = waitOrAbort(f.hooks(), "allgather", 5.0, std::chrono::microseconds(1));
  REQUIRE(st.ok());
  REQUIRE(f.polls == 200);
  REQUIRE(f.aborts == 0);
}

TEST_CASE("nccl wait: an asynchronous error aborts and names the call", "[gpu_cpu][nccl]") {
  Fake f;
  f.errorAt = 3;
  const Status st = waitOrAbort(f.hooks(), "NCCL allreduce on rank 2", 0, std::chrono::microseconds(1));
  REQUIRE(st.code() == Code::kCommunication);
  REQUIRE(st.message().find("allreduce on rank 2") != std::string::npos);
  REQUIRE(st.message().find("remote peer gone") != std::string::npos);
  REQUIRE(f.aborts == 1);
  REQUIRE(f.polls == 3);
}

TEST_CASE("nccl wait: a failed completion query aborts", "[gpu_cpu][nccl]") {
  Fake f;
  f.failAt = 1;
  const Status st = waitOrAbort(f.hooks(), "broadcast", 0);
  REQUIRE(st.code() == Code::kCommunication);
  REQUIRE(st.message().find("query broke") != std::string::npos);
  REQUIRE(f.aborts == 1);
}

TEST_CASE("nccl wait: a dead peer ends in a timeout, not a hang", "[gpu_cpu][nccl]") {
  Fake f;  // never ready, never an error: a peer that stopped calling
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = waitOrAbort(f.hooks(), "allgather", 0.05, std::chrono::microseconds(100));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(st.code() == Code::kTimeout);
  REQUIRE(st.message().find("allgather") != std::string::npos);
  REQUIRE(f.aborts == 1);
  REQUIRE(took >= 0.05);
  REQUIRE(took < 5.0);
}

TEST_CASE("nccl wait: one poll of a started collective, with its deadline from the start", "[gpu_cpu][nccl]") {
  using Clock = std::chrono::steady_clock;
  bool done = true;
  {  // not yet, young: no error, no abort
    Fake f;
    REQUIRE(pollOnce(f.hooks(), "allgather", 10.0, Clock::now(), &done).ok());
    CHECK(!done);
    CHECK(f.aborts == 0);
  }
  {  // complete
    Fake f;
    f.readyAt = 1;
    REQUIRE(pollOnce(f.hooks(), "allgather", 10.0, Clock::now(), &done).ok());
    CHECK(done);
  }
  {  // older than the deadline: kTimeout, aborted once, named
    Fake f;
    const Status st =
        pollOnce(f.hooks(), "NCCL allgather on rank 1", 0.5, Clock::now() - std::chrono::seconds(2), &done);
    CHECK(st.code() == Code::kTimeout);
    CHECK(st.message().find("NCCL allgather on rank 1") != std::string::npos);
    CHECK(f.aborts == 1);
    CHECK(!done);
  }
  {  // no deadline: never a timeout
    Fake f;
    CHECK(pollOnce(f.hooks(), "allgather", 0, Clock::now() - std::chrono::hours(1), &done).ok());
    CHECK(f.aborts == 0);
  }
  {  // an asynchronous error, a failed query
    Fake f;
    f.errorAt = 1;
    CHECK(pollOnce(f.hooks(), "allgather", 10.0, Clock::now(), &done).code() == Code::kCommunication);
    CHECK(f.aborts == 1);
    Fake g;
    g.failAt = 1;
    CHECK(pollOnce(g.hooks(), "allgather", 10.0, Clock::now(), &done).code() == Code::kCommunication);
    CHECK(g.aborts == 1);
  }
}

}  // namespace mgs::nccl
