// Faults a hostile or unlucky caller can cause: sizes that overflow, an
// exception on the coordinator thread, a job that invents names forever, and
// the messages a rank reads after another rank stopped. Ranks are threads.
#include <catch2/catch.hpp>

#include <new>
#include <random>

#include "comm/fake/thread_communicator.h"
#include "core/controller.h"
#include "core/response_cache.h"
#include "thread_ranks.h"

using namespace mgs;
using mgs::test::cpuDesc;
using mgs::test::runRanks;
using mgs::test::waitRelease;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("checkedSize accepts real shapes and refuses every overflow", "[robust][sizes]") {
  size_t n = 0, b = 0;
  REQUIRE(checkedSize({3, 4}, MGS_FLOAT32, &n, &b).ok());
  CHECK((n == 12 && b == 48));
  REQUIRE(checkedSize({}, MGS_FLOAT64, &n, &b).ok());  // a scalar
  CHECK((n == 1 && b == 8));
  REQUIRE(checkedSize({0, int64_t{1} << 62}, MGS_UINT8, &n, &b).ok());
  CHECK((n == 0 && b == 0));
  // The case: 2^62 float64 elements wrap the byte count to 0.
  Status st = checkedSize({int64_t{1} << 62}, MGS_FLOAT64, &n, &b);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(contains(st.message(), "2^63 bytes"));
  // The element count itself wraps (2^32 * 2^32 = 2^64 -> 0).
  st = checkedSize({int64_t{1} << 32, int64_t{1} << 32, 5}, MGS_UINT8, &n, &b);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(contains(st.message(), "2^63 elements"));
  CHECK(!checkedSize({-1}, MGS_FLOAT32, &n, &b).ok());
}

TEST_CASE("allgatherLayout refuses results whose sizes overflow", "[robust][sizes]") {
  AllgatherLayout l;
  REQUIRE(allgatherLayout({2, 3}, MGS_INT32, {0, 1, 2}, &l).ok());
  CHECK(l.rank_bytes == std::vector<size_t>{0, 12, 24});
  CHECK((l.total_bytes == 36 && l.rows == 3));
  // Zero-byte rows, but the first dimension summed over 4 ranks passes 2^63.
  Status st = allgatherLayout({1, 0}, MGS_FLOAT32, std::vector<int64_t>(4, int64_t{1} << 62), &l);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(contains(st.message(), "first dimension"));
  // Each rank's bytes fit, their sum does not.
  st = allgatherLayout({1, 4}, MGS_UINT8, std::vector<int64_t>(4, int64_t{1} << 60), &l);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(contains(st.message(), "over all ranks"));
  st = allgatherLayout({1, 8}, MGS_FLOAT64, {1, int64_t{1} << 60}, &l);
  CHECK(contains(st.message(), "rank 1"));
}

TEST_CASE("overflowing shapes fail at enqueue naming the tensor; an overflowing allgather on every rank",
          "[robust][sizes][runtime]") {
  const int P = 4;
  std::vector<Status> enq(P), gathered(P);
  runRanks(P, Config{}, [&](Runtime& rt, int rank) {
    double x = 0;
    uint64_t id = 0;
    TensorDesc huge = cpuDesc(&x, MGS_FLOAT64, {int64_t{1} << 62});
    enq[rank] = rt.enqueueAllreduce("huge", huge, huge, MGS_REDUCE_SUM, 1, 1, 0, &id);
    // Every input is empty (rows of zero bytes), the output shape would be [2^64, 0].
    TensorDesc wide = cpuDesc(nullptr, MGS_FLOAT32, {int64_t{1} << 62, 0});
    Status st = rt.enqueueAllgather("wide", wide, &id);
    gathered[rank] = st.ok() ? waitRelease(rt, id) : st;
  });
  for (int r = 0; r < P; ++r) {
    INFO(enq[r].message() << " | " << gathered[r].message());
    CHECK(enq[r].code() == Code::kInvalidArgument);
    CHECK(contains(enq[r].message(), "tensor 'huge'"));
    CHECK(gathered[r].code() == Code::kInvalidArgument);
    CHECK(contains(gathered[r].message(), "tensor 'wide'"));
    CHECK(contains(gathered[r].message(), "rank " + std::to_string(r)));
  }
}

namespace {
// ThreadCommunicator whose allgatherv throws, as an allocation inside a
// collective would; on every rank alike, so no rank waits for another.
class ThrowingCommunicator final : public Communicator {
 public:
  ThrowingCommunicator(std::shared_ptr<ThreadWorld> w, int r) : inner_(std::move(w), r) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int localRank() const override { return inner_.localRank(); }
  int localSize() const override { return inner_.localSize(); }
  Status allreduce(void* b, size_t n, DataType d, CommOp op) override { return inner_.allreduce(b, n, d, op); }
  Status allgather(const void* s, size_t n, void* r) override { return inner_.allgather(s, n, r); }
  Status allgatherv(const void*, size_t, void*, const std::vector<size_t>&) override { throw std::bad_alloc(); }
  Status gatherStrings(const std::string& s, int root, std::vector<std::string>* o) override {
    return inner_.gatherStrings(s, root, o);
  }
  Status broadcast(void* b, size_t n, int root) override { return inner_.broadcast(b, n, root); }
  Status barrier() override { return inner_.barrier(); }

 private:
  ThreadCommunicator inner_;
};
}  // namespace

TEST_CASE("an exception on the coordinator fails the ops and stops the rank, never the process", "[robust][runtime]") {
  const int P = 3;
  std::vector<Status> got(P), queued(P), after(P);
  std::vector<std::string> hazard(P);
  runRanks(
      P, Config{},
      [&](Runtime& rt, int rank) {
        std::vector<int32_t> rows(2, rank);
        TensorDesc d = cpuDesc(rows.data(), MGS_INT32, {2});
        uint64_t id = 0, id2 = 0;
        got[rank] = rt.enqueueAllgather("boom", d, &id);
        if (got[rank].ok()) got[rank] = waitRelease(rt, id);
        while (rt.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        after[rank] = rt.enqueueAllreduce("later", d, d, MGS_REDUCE_SUM, 1, 1, 0, &id2);
        hazard[rank] = rt.exitHazard();
      },
      [](std::shared_ptr<ThreadWorld> w, int r) { return std::make_unique<ThrowingCommunicator>(std::move(w), r); });
  for (int r = 0; r < P; ++r) {
    INFO(got[r].message());
    CHECK(got[r].code() == Code::kInternal);
    CHECK(contains(got[r].message(), "rank " + std::to_string(r) + ": the coordinator failed"));
    CHECK(after[r].code() == Code::kShutdown);
    CHECK(contains(after[r].message(), "coordinator failed"));
    CHECK(!hazard[r].empty());  // MPI_Finalize will not be waited on blindly
  }
}

TEST_CASE("the response cache stays within capacity and evicts the least recently used name", "[robust][cache]") {
  ResponseCache cache(4);
  Signature s;
  for (int i = 0; i < 4; ++i) cache.put("n" + std::to_string(i), s, 1 + i);
  cache.touch(0, 10);  // n0 used again: n1 is now the oldest
  cache.put("n4", s, 11);
  CHECK(cache.size() == 4);
  CHECK(cache.bits() == 4);
  CHECK(cache.evictions() == 1);
  CHECK(cache.lookup("n1", s) == -1);
  CHECK(cache.lookup("n4", s) == 1);  // took the evicted bit
  CHECK(cache.lookup("n0", s) == 0);
  for (int i = 5; i < 1000; ++i) cache.put("n" + std::to_string(i), s, 100 + i);
  CHECK(cache.size() == 4);
  CHECK(cache.bits() <= 4);
}

TEST_CASE("a soak of ever-new names keeps every rank's name cache bounded and in agreement",
          "[robust][cache][negotiation]") {
  const int P = 3, kCapacity = 16, kSteps = 150, kPerStep = 5;
  auto world = std::make_shared<ThreadWorld>(P);
  std::vector<std::vector<std::string>> order(P);  // names in the order they ran, per rank
  std::vector<size_t> max_cached(P, 0), max_bits(P, 0);
  std::vector<uint64_t> evictions(P, 0), fast(P, 0);
  std::vector<std::string> errors(P);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r) {
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(world, r);
      Config config;
      Controller controller(comm, config, kCapacity);
      std::mt19937 rng(r);
      for (int step = 0; step < kSteps; ++step) {
        // Half the names are new every step; the rest recur (a warm set of 8).
        std::vector<Request> reqs;
        for (int i = 0; i < kPerStep; ++i) {
          Request q;
          q.name = i % 2 ? "new." + std::to_string(step) + "." + std::to_string(i)
                         : "warm." + std::to_string((step + i) % 8);
          q.sig.shape = {static_cast<int64_t>(i + 1)};
          q.enqueued = Clock::now();
          reqs.push_back(std::move(q));
        }
        std::shuffle(reqs.begin(), reqs.end(), rng);
        size_t done = 0;
        bool first = true;
        while (done < kPerStep) {
          CycleResult res;
          Status st = controller.cycle(first ? std::move(reqs) : std::vector<Request>{}, 0, &res);
          first = false;
          if (!st.ok()) {
            errors[r] = st.toString();
            return;
          }
          for (auto& op : res.ready) {
            if (!op.status.ok()) errors[r] = op.status.toString();
            order[r].push_back(op.req.name);
            ++done;
          }
          const ControllerStats cs = controller.stats();
          max_cached[r] = std::max<size_t>(max_cached[r], cs.cached_names);
        }
      }
      evictions[r] = controller.stats().cache_evictions;
      fast[r] = controller.stats().fast_cycles;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
    CHECK(order[r].size() == static_cast<size_t>(kSteps * kPerStep));
    CHECK(order[r] == order[0]);  // same names, same order on every rank
    CHECK(max_cached[r] <= static_cast<size_t>(kCapacity));
    CHECK(evictions[r] == evictions[0]);
    CHECK(evictions[r] > 0);
  }
}

TEST_CASE("after another rank stops, messages name it and why; topology stays readable", "[robust][runtime]") {
  const int P = 3;
  std::vector<Status> pending(P), later(P);
  std::vector<int> sizes(P, 0);
  std::vector<bool> local(P, true);
  runRanks(P, Config{}, [&](Runtime& rt, int rank) {
    if (rank == 2) {
      rt.shutdown();
      return;
    }
    float x = 1;
    TensorDesc d = cpuDesc(&x, MGS_FLOAT32, {1});
    uint64_t id = 0;
    Status st = rt.enqueueAllreduce("orphan", d, d, MGS_REDUCE_SUM, 1, 1, 0, &id);
    pending[rank] = st.ok() ? waitRelease(rt, id) : st;
    while (rt.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    later[rank] = rt.enqueueAllreduce("after", d, d, MGS_REDUCE_SUM, 1, 1, 0, &id);
    sizes[rank] = rt.size();
    local[rank] = rt.stoppedLocally();
  });
  for (int r : {0, 1}) {
    INFO(pending[r].message() << " | " << later[r].message());
    CHECK(pending[r].code() == Code::kShutdown);
    CHECK(contains(pending[r].message(), "rank 2 finished normally (it called mgs_shutdown)"));
    CHECK(later[r].code() == Code::kShutdown);
    CHECK(contains(later[r].message(), "rank " + std::to_string(r) + ": mgs has stopped because rank 2"));
    CHECK(!contains(later[r].message(), "mgs_init"));
    CHECK(sizes[r] == P);
    CHECK(!local[r]);
  }
}

TEST_CASE("a rank that stops after a stall abort says so", "[robust][runtime][stall]") {
  const int P = 2;
  Config config;
  config.stall_abort_s = 0.2;
  config.stall_warning_s = 0.2;
  Status timed_out, stopped;
  std::string hazard0, hazard1;
  runRanks(P, config, [&](Runtime& rt, int rank) {
    float x = 1;
    TensorDesc d = cpuDesc(&x, MGS_FLOAT32, {1});
    uint64_t id = 0;
    if (rank == 0) {
      timed_out = rt.enqueueAllreduce("lonely", d, d, MGS_REDUCE_SUM, 1, 1, 0, &id);
      if (timed_out.ok()) timed_out = waitRelease(rt, id);
      hazard0 = rt.exitHazard();
      rt.shutdown();
      return;
    }
    while (rt.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    stopped = rt.enqueueAllreduce("late", d, d, MGS_REDUCE_SUM, 1, 1, 0, &id);
    hazard1 = rt.exitHazard();
  });
  CHECK(timed_out.code() == Code::kTimeout);
  CHECK(contains(hazard0, "stalled"));
  CHECK(hazard1.empty());  // rank 1 saw no fault: it finalises normally
  INFO(stopped.message());
  CHECK(stopped.code() == Code::kShutdown);
  CHECK(contains(stopped.message(), "rank 0 shut down after a stall abort there"));
}
