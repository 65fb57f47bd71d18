// The coordinator end to end with ranks as threads. Catch2 assertions are not
// thread-safe, so rank threads record results and the test thread checks them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>

#include "thread_ranks.h"

using namespace mgs;
using mgs::test::cpuDesc;
using mgs::test::runRanks;
using mgs::test::waitRelease;

TEST_CASE("ranks enqueue the same names in different orders", "[runtime]") {
  for (int P = 1; P <= 4; ++P) {
    const int kTensors = 60, kSteps = 5;
    std::vector<std::vector<float>> results(P * kTensors);
    std::vector<NegotiationStats> after_first(P), at_end(P);
    std::vector<int> failures(P, 0);
    Config config;
    config.fusion_threshold_bytes = 4096;  // some fused, some not
    runRanks(P, config, [&](Runtime& rt, int rank) {
      std::mt19937 rng(rank);
      std::vector<std::vector<float>> bufs(kTensors);
      for (int step = 0; step < kSteps; ++step) {
        std::vector<int> order(kTensors);
        for (int i = 0; i < kTensors; ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<uint64_t> ids(kTensors);
        for (int t : order) {
          bufs[t].assign(1 + t * 13, static_cast<float>(rank + t));
          TensorDesc d = cpuDesc(bufs[t].data(), MGS_FLOAT32, {static_cast<int64_t>(bufs[t].size())});
          if (!rt.enqueueAllreduce("t" + std::to_string(t), d, d, MGS_REDUCE_SUM, 1, 1, 0, &ids[t]).ok())
            ++failures[rank];
        }
        for (int t = 0; t < kTensors; ++t)
          if (!waitRelease(rt, ids[t]).ok()) ++failures[rank];
        if (step == 0) after_first[rank] = rt.negotiationStats();
      }
      at_end[rank] = rt.negotiationStats();
      for (int t = 0; t < kTensors; ++t) results[rank * kTensors + t] = bufs[t];
    });
    for (int r = 0; r < P; ++r) {
      CHECK(failures[r] == 0);
      for (int t = 0; t < kTensors; ++t) {
        const float want = static_cast<float>(P * (P - 1) / 2 + P * t);
        const auto& v = results[r * kTensors + t];
        REQUIRE(v.size() == static_cast<size_t>(1 + t * 13));
        CHECK(std::all_of(v.begin(), v.end(), [&](float x) { return x == want; }));
      }
      // Steady state: later steps are negotiated by the bit-vector fast path only.
      CHECK(at_end[r].slow_cycles == after_first[r].slow_cycles);
      CHECK(at_end[r].fast_cycles > after_first[r].fast_cycles);
    }
  }
}

TEST_CASE("a shape mismatch fails on every rank and names both ranks", "[runtime]") {
  const int P = 3;
  std::vector<Status> got(P);
  std::vector<Status> after(P);
  runRanks(P, Config{}, [&](Runtime& rt, int rank) {
    std::vector<float> buf(8, 1.0f);
    TensorDesc d = cpuDesc(buf.data(), MGS_FLOAT32, {rank == 2 ? 4 : 8});
    uint64_t id = 0;
    Status st = rt.enqueueAllreduce("w", d, d, MGS_REDUCE_SUM, 1, 1, 0, &id);
    got[rank] = st.ok() ? waitRelease(rt, id) : st;
    // The runtime keeps working afterwards.
    TensorDesc ok = cpuDesc(buf.data(), MGS_FLOAT32, {8});
    st = rt.enqueueAllreduce("w2", ok, ok, MGS_REDUCE_SUM, 1, 1, 0, &id);
    after[rank] = st.ok() ? waitRelease(rt, id) : st;
  });
  for (int r = 0; r < P; ++r) {
    INFO(got[r].message());
    CHECK(got[r].code() == Code::kMismatch);
    CHECK(got[r].message().find("tensor 'w'") != std::string::npos);
    CHECK(got[r].message().find("rank 0 has [8]") != std::string::npos);
    CHECK(got[r].message().find("rank 2 has [4]") != std::string::npos);
    CHECK(after[r].ok());
  }
}

TEST_CASE("allgather with per-rank first dimensions, including zero", "[runtime]") {
  const int P = 4;
  std::vector<AllgatherResult> res(P);
  runRanks(P, Config{}, [&](Runtime& rt, int rank) {
    std::vector<int32_t> rows(rank * 2, rank);  // rank r: r rows of 2
    TensorDesc d = cpuDesc(rows.data(), MGS_INT32, {rank, 2});
    uint64_t id = 0;
    if (!rt.enqueueAllgather("g", d, &id).ok()) return;
    auto h = rt.handles().get(id);
    if (h->wait().ok()) res[rank] = h->allgather;
  });
  for (int r = 0; r < P; ++r) {
    CHECK(res[r].shape == std::vector<int64_t>{6, 2});
    CHECK(res[r].rank_sizes == std::vector<int64_t>{0, 1, 2, 3});
    REQUIRE(res[r].data.size() == 6 * 2 * sizeof(int32_t));
    const auto* v = reinterpret_cast<const int32_t*>(res[r].data.data());
    CHECK(std::vector<int32_t>(v, v + 12) == std::vector<int32_t>{1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3});
  }
}

TEST_CASE("stall abort fails the op on the ranks that submitted it", "[runtime][stall]") {
  const int P = 3;
  Config config;
  config.stall_abort_s = 0.3;
  config.stall_warning_s = 0.3;
  std::vector<Status> got(P);
  runRanks(P, config, [&](Runtime& rt, int rank) {
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      return;
    }
    float x = 1;
    TensorDesc d = cpuDesc(&x, MGS_FLOAT32, {1});
    uint64_t id = 0;
    Status st = rt.enqueueAllreduce("late", d, d, MGS_REDUCE_SUM, 1, 1, 0, &id);
    got[rank] = st.ok() ? waitRelease(rt, id) : st;
  });
  for (int r : {0, 2}) {
    INFO(got[r].message());
    CHECK(got[r].code() == Code::kTimeout);
    CHECK(got[r].message().find("submitted by ranks 0, 2 but not by ranks 1") != std::string::npos);
  }
}

TEST_CASE("shutdown on one rank completes pending ops elsewhere with kShutdown", "[runtime]") {
  const int P = 2;
  Status pending, later;
  runRanks(P, Config{}, [&](Runtime& rt, int rank) {
    if (rank == 0) {
      rt.shutdown();
      return;
    }
    float x = 1;
    TensorDesc d = cpuDesc(&x, MGS_FLOAT32, {1});
    uint64_t id = 0;
    Status st = rt.enqueueAllreduce("orphan", d, d, MGS_REDUCE_SUM, 1, 1, 0, &id);
    pending = st.ok() ? waitRelease(rt, id) : st;
    while (rt.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    later = rt.enqueueAllreduce("after", d, d, MGS_REDUCE_SUM, 1, 1, 0, &id);
  });
  CHECK(pending.code() == Code::kShutdown);
  CHECK(pending.message().find("rank 0 finished normally (it called mgs_shutdown)") != std::string::npos);
  CHECK(later.code() == Code::kShutdown);
}

TEST_CASE("enqueue validates arguments with messages naming the tensor", "[runtime]") {
  runRanks(1, Config{}, [&](Runtime& rt, int) {
    float x[4] = {};
    uint64_t id = 0;
    TensorDesc d = cpuDesc(x, MGS_FLOAT32, {4});
    TensorDesc other = cpuDesc(x, MGS_FLOAT64, {4});
    Status st = rt.enqueueAllreduce("a", d, other, MGS_REDUCE_SUM, 1, 1, 0, &id);
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK(st.message().find("'a'") != std::string::npos);
    TensorDesc neg = cpuDesc(x, MGS_FLOAT32, {-1});
    CHECK(rt.enqueueAllreduce("b", neg, neg, MGS_REDUCE_SUM, 1, 1, 0, &id).code() == Code::kInvalidArgument);
    TensorDesc null = cpuDesc(nullptr, MGS_FLOAT32, {4});
    CHECK(rt.enqueueAllreduce("c", null, null, MGS_REDUCE_SUM, 1, 1, 0, &id).code() == Code::kInvalidArgument);
    CHECK(rt.enqueueAllreduce("d", d, d, 7, 1, 1, 0, &id).code() == Code::kInvalidArgument);
    CHECK(rt.enqueueAllreduce("e", d, d, MGS_REDUCE_SUM, 1, 1, 0x80, &id).code() == Code::kInvalidArgument);
    TensorDesc scalar = cpuDesc(x, MGS_FLOAT32, {});
    CHECK(rt.enqueueAllgather("f", scalar, &id).code() == Code::kInvalidArgument);
    CHECK(rt.enqueueBroadcast("g", d, 1, &id).code() == Code::kInvalidArgument);
    // A zero-element tensor may have a NULL pointer and still runs.
    TensorDesc empty = cpuDesc(nullptr, MGS_FLOAT32, {0});
    const Status st2 = rt.enqueueAllreduce("h", empty, empty, MGS_REDUCE_SUM, 1, 1, 0, &id);
    CHECK(st2.ok());
    if (st2.ok()) CHECK(waitRelease(rt, id).ok());
  });
}
