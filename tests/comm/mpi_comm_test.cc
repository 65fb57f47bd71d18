// MpiCommunicator under mpirun -np 2..4 and 6: the ring (every float size
// class, 16-bit floats, min/max), MPI's own algorithms for small and integer
// buffers (recursive doubling for the small ones at 6 ranks, and called
// directly at every P), and every other collective, all through the sleeping
// waits.
// Results must equal the exact reference and be bitwise the same on every rank.
// And the nonblocking collectives kept in flight, on duplicated
// communicators, with the wait hook (inFlight), and many rings in flight at
// once on one communicator (ringsInFlight).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/small_allreduce.h"
#include "common/dtype.h"

using namespace mgs;

namespace {

int g_failures = 0;
int g_rank = -1;

#define CHECK_TRUE(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      ++g_failures;                                                                            \
      std::fprintf(stderr, "[rank %d] %s:%d: %s failed: ", g_rank, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                       \
      std::fprintf(stderr, "\n");                                                              \
    }                                                                                          \
  } while (0)
#define CHECK_OK(expr)                                               \
  do {                                                               \
    Status _st = (expr);                                             \
    CHECK_TRUE(_st.ok(), "%s -> %s", #expr, _st.toString().c_str()); \
  } while (0)

// Every rank's buffer equals rank 0's, byte for byte.
bool sameEverywhere(Communicator& c, const std::vector<char>& buf) {
  std::vector<char> root = buf;
  if (!c.broadcast(root.data(), root.size(), 0).ok()) return false;
  int64_t same = root == buf ? 1 : 0;
  if (!c.allreduce(&same, 1, MGS_INT64, CommOp::kMin).ok()) return false;
  return same == 1;
}

void put(std::vector<char>& b, DataType d, size_t i, float v) {
  switch (d) {
    case MGS_FLOAT32:
      reinterpret_cast<float*>(b.data())[i] = v;
      break;
    case MGS_FLOAT64:
      reinterpret_cast<double*>(b.data())[i] = v;
      break;
    case MGS_FLOAT16:
      reinterpret_cast<uint16_t*>(b.data())[i] = floatToHalf(v);
      break;
    case MGS_BFLOAT16:
      reinterpret_cast<uint16_t*>(b.data())[i] = floatToBfloat16(v);
      break;
    default:
      break;
  }
}
double get(const std::vector<char>& b, DataType d, size_t i) {
  switch (d) {
    case MGS_FLOAT32:
      return reinterpret_cast<const float*>(b.data())[i];
    case MGS_FLOAT64:
      return reinterpret_cast<const double*>(b.data())[i];
    case MGS_FLOAT16:
      return halfToFloat(reinterpret_cast<const uint16_t*>(b.data())[i]);
    case MGS_BFLOAT16:
      return bfloat16ToFloat(reinterpret_cast<const uint16_t*>(b.data())[i]);
    default:
      return 0;
  }
}

// Sums, maxima and minima of small integers (exact in every float type) over
// sizes below, at and far above the ring threshold, with P not dividing n.
void floatReductions(Communicator& c) {
  const int p = c.size(), r = c.rank();
  for (DataType d : {MGS_FLOAT32, MGS_FLOAT64, MGS_FLOAT16, MGS_BFLOAT16}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{17}, size_t{16384}, size_t{(1u << 20) + 7}}) {
      for (CommOp op : {CommOp::kSum, CommOp::kMax, CommOp::kMin}) {
        if (op != CommOp::kSum && n > 17 && d != MGS_FLOAT16) continue;  // min/max: ring via 16-bit only
        std::vector<char> b(n * dtypeSize(d));
        for (size_t i = 0; i < n; ++i) put(b, d, i, static_cast<float>((i % 13) + r));
        CHECK_OK(c.allreduce(b.data(), n, d, op));
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const double base = static_cast<double>(i % 13);
          const double want = op == CommOp::kSum   ? p * base + p * (p - 1) / 2.0
                              : op == CommOp::kMax ? base + (p - 1)
                                                   : base;
          bad += get(b, d, i) != want;
        }
        CHECK_TRUE(bad == 0, "%s n=%zu op=%d: %zu wrong elements", dtypeName(d).c_str(), n, static_cast<int>(op), bad);
        CHECK_TRUE(sameEverywhere(c, b), "%s n=%zu: ranks differ", dtypeName(d).c_str(), n);
      }
    }
  }
}

// Values whose float sum depends on the order: every rank still ends with
// the same bits (each segment is reduced once and forwarded).
void bitwiseAgreement(Communicator& c) {
  std::mt19937 gen(1234 + c.rank());
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (DataType d : {MGS_FLOAT32, MGS_FLOAT16}) {
    const size_t n = 3'000'001;
    std::vector<char> b(n * dtypeSize(d));
    double local = 0;
    for (size_t i = 0; i < n; ++i) {
      const float v = dist(gen) * 1e-3f;
      put(b, d, i, v);
      local += get(b, d, i);
    }
    CHECK_OK(c.allreduce(b.data(), n, d, CommOp::kSum));
    CHECK_TRUE(sameEverywhere(c, b), "%s: ranks differ after a ring allreduce", dtypeName(d).c_str());
    double total = 0, got = 0;
    CHECK_OK(c.allreduce(&local, 1, MGS_FLOAT64, CommOp::kSum));
    total = local;
    for (size_t i = 0; i < n; ++i) got += get(b, d, i);
    const double tol = d == MGS_FLOAT16 ? 1e-2 * n * 1e-3 : 1e-5 * n * 1e-3;
    CHECK_TRUE(std::abs(got - total) < tol, "%s: sum %.6f, expected %.6f", dtypeName(d).c_str(), got, total);
  }
}

void integerAndOthers(Communicator& c) {
  const int p = c.size(), r = c.rank();
  std::vector<int64_t> v(100000, r + 1);
  CHECK_OK(c.allreduce(v.data(), v.size(), MGS_INT64, CommOp::kSum));
  CHECK_TRUE(v.front() == p * (p + 1) / 2 && v.back() == v.front(), "int64 sum %lld", (long long)v.front());
  std::vector<uint8_t> bits(5, static_cast<uint8_t>(0xFF ^ (1u << r)));
  CHECK_OK(c.allreduce(bits.data(), bits.size(), MGS_UINT8, CommOp::kBitAnd));
  CHECK_TRUE(bits[0] == static_cast<uint8_t>(0xFF ^ ((1u << p) - 1)), "band %u", bits[0]);
  for (int root = 0; root < p; ++root) {
    std::vector<char> b(200000, static_cast<char>(r == root ? 7 + root : 0));
    CHECK_OK(c.broadcast(b.data(), b.size(), root));
    CHECK_TRUE(b.front() == 7 + root && b.back() == 7 + root, "broadcast from %d", root);
  }
  std::vector<int32_t> mine(r + 1, r), all(static_cast<size_t>(p * (p + 1) / 2));
  std::vector<size_t> counts;
  for (int q = 0; q < p; ++q) counts.push_back(sizeof(int32_t) * (q + 1));
  CHECK_OK(c.allgatherv(mine.data(), mine.size() * sizeof(int32_t), all.data(), counts));
  CHECK_TRUE(all.back() == p - 1 && all.front() == 0, "allgatherv");
  std::vector<std::string> strs;
  CHECK_OK(c.gatherStrings(std::string(static_cast<size_t>(r), 'x'), 0, &strs));
  if (r == 0)
    CHECK_TRUE(strs.size() == static_cast<size_t>(p) && strs[p - 1].size() == static_cast<size_t>(p - 1),
               "gatherStrings");
  CHECK_OK(c.barrier());
}

// The small allreduce (recursive doubling) called directly, as the
// communicator calls it from 5 ranks on (with a fold at P = 3): exact integer and bit results,
// float sums whose value depends on the order (and a NaN under max) bitwise
// the same on every rank, 16-bit floats, and 40 calls back to back with
// ranks arriving at different times (messages of consecutive calls must
// match in order).
void smallAlgorithms(Communicator& c) {
  const int p = c.size(), r = c.rank();
  WaitPolicy wait;
  std::vector<char> scratch;
  const char* alg = "recursive doubling";
  auto run = [&](void* buf, size_t n, DataType d, CommOp op) {
    return smallAllreduce(MPI_COMM_WORLD, r, p, buf, n, d, op, wait, 7300, &scratch);
  };
  std::vector<int64_t> v(9, r + 1);
  CHECK_OK(run(v.data(), v.size(), MGS_INT64, CommOp::kSum));
  CHECK_TRUE(v.front() == p * (p + 1) / 2 && v.back() == v.front(), "%s: int64 sum %lld", alg, (long long)v[0]);
  std::vector<int64_t> bits(3, ~int64_t{0} ^ (int64_t{1} << r));
  CHECK_OK(run(bits.data(), bits.size(), MGS_INT64, CommOp::kBitAnd));
  CHECK_TRUE(bits[2] == (~int64_t{0} ^ ((int64_t{1} << p) - 1)), "%s: band %llx", alg, (unsigned long long)bits[2]);
  std::vector<int32_t> mx(5, 10 * r - 7);
  CHECK_OK(run(mx.data(), mx.size(), MGS_INT32, CommOp::kMax));
  CHECK_TRUE(mx[4] == 10 * (p - 1) - 7, "%s: int32 max %d", alg, mx[4]);
  std::mt19937 gen(99 + r);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (DataType d : {MGS_FLOAT32, MGS_FLOAT16, MGS_BFLOAT16, MGS_FLOAT64}) {
    const size_t n = 1000;  // 2..8 KB: all of it below kSmallAllreduceMaxBytes
    std::vector<char> b(n * dtypeSize(d));
    double local = 0;
    for (size_t i = 0; i < n; ++i) {
      put(b, d, i, dist(gen) * (i % 2 ? 1e2f : 1e-3f));
      local += get(b, d, i);
    }
    CHECK_OK(run(b.data(), n, d, CommOp::kSum));
    CHECK_TRUE(sameEverywhere(c, b), "%s %s: ranks differ", alg, dtypeName(d).c_str());
    double got = 0;
    for (size_t i = 0; i < n; ++i) got += get(b, d, i);
    CHECK_OK(c.allreduce(&local, 1, MGS_FLOAT64, CommOp::kSum));
    const double tol = (d == MGS_FLOAT32 || d == MGS_FLOAT64 ? 1e-3 : 1.0) * n;
    CHECK_TRUE(std::abs(got - local) < tol, "%s %s: sum %.3f, expected %.3f", alg, dtypeName(d).c_str(), got, local);
  }
  std::vector<float> nan(4, float(r));
  if (r == p - 1) nan[1] = std::nanf("");
  CHECK_OK(run(nan.data(), nan.size(), MGS_FLOAT32, CommOp::kMax));
  std::vector<char> nb(reinterpret_cast<char*>(nan.data()), reinterpret_cast<char*>(nan.data()) + 16);
  CHECK_TRUE(sameEverywhere(c, nb), "%s: max with a NaN differs between ranks", alg);
  CHECK_TRUE(nan[0] == float(p - 1), "%s: max %f", alg, nan[0]);
  int bad = 0;
  for (int call = 0; call < 40; ++call) {
    if ((call + r) % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    int64_t x[2] = {call * 100 + r, 1};
    CHECK_OK(run(x, 2, MGS_INT64, CommOp::kSum));
    bad += x[0] != call * 100 * p + p * (p - 1) / 2 || x[1] != p;
  }
  CHECK_TRUE(bad == 0, "%s: %d of 40 back-to-back calls wrong", alg, bad);
  size_t big = kSmallAllreduceMaxBytes + 1;
  std::vector<char> over(big);
  CHECK_TRUE(!run(over.data(), big, MGS_UINT8, CommOp::kBitAnd).ok(), "%s: an oversized call is refused", alg);
}

}  // namespace

// The nonblocking collectives the pipeline keeps in flight, on duplicated
// communicators started in different orders on different ranks (each
// communicator in the same order everywhere), small (in place) and large
// (out of place) allreduces and a broadcast, results exact; and the wait
// hook: a blocking wait that has to wait calls it.
void inFlight(Communicator& c) {
  CHECK_TRUE(c.asyncCollectives(), "the MPI communicator has nonblocking collectives");
  std::unique_ptr<Communicator> a, b;
  CHECK_OK(c.duplicate(&a));
  CHECK_OK(c.duplicate(&b));
  if (!a || !b) return;
  CHECK_TRUE(a->rank() == c.rank() && a->size() == c.size(), "a duplicate has the same ranks");
  const int P = c.size(), me = c.rank();
  for (size_t n : {size_t{7}, size_t{100000}}) {  // 28 bytes in place; 400 KB out of place
    std::vector<float> x(n), y(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = float((i % 97) + me);
      y[i] = float(me + 1);
    }
    std::vector<char> bc(1000, 0);
    if (me == P - 1)
      for (size_t i = 0; i < bc.size(); ++i) bc[i] = char(i * 7);
    std::unique_ptr<PendingCollective> pa, pb;
    // Even ranks start on a first, odd ranks on b first; a blocking
    // collective on c comes in between on some ranks only.
    if (me % 2 == 0) {
      CHECK_OK(a->startAllreduce(x.data(), n, MGS_FLOAT32, CommOp::kSum, &pa));
      CHECK_OK(b->startBroadcast(bc.data(), bc.size(), P - 1, &pb));
    } else {
      CHECK_OK(b->startBroadcast(bc.data(), bc.size(), P - 1, &pb));
      int64_t one = 1;
      CHECK_OK(c.allreduce(&one, 1, MGS_INT64, CommOp::kSum));
      CHECK_TRUE(one == P, "the blocking allreduce between: %lld", (long long)one);
      CHECK_OK(a->startAllreduce(x.data(), n, MGS_FLOAT32, CommOp::kSum, &pa));
    }
    if (me % 2 == 0) {
      int64_t one = 1;
      CHECK_OK(c.allreduce(&one, 1, MGS_INT64, CommOp::kSum));
      CHECK_TRUE(one == P, "the blocking allreduce after: %lld", (long long)one);
    }
    std::unique_ptr<PendingCollective> py;
    CHECK_OK(c.startAllreduce(y.data(), n, MGS_FLOAT32, CommOp::kSum, &py));
    bool done = false;
    while (!done) CHECK_OK(pb->test(&done));
    CHECK_OK(pa->wait());
    CHECK_OK(py->wait());
    int bad = 0;
    const float ranks = float(P) * float(P - 1) / 2;
    for (size_t i = 0; i < n; ++i) {
      bad += x[i] != float((i % 97) * P) + ranks;
      bad += y[i] != float(P) * float(P + 1) / 2;
    }
    for (size_t i = 0; i < bc.size(); ++i) bad += bc[i] != char(i * 7);
    CHECK_TRUE(bad == 0, "n = %zu: %d wrong entries", n, bad);
  }
  // The hook: rank 0 waits in a barrier the others join 50 ms late.
  int calls = 0;
  c.setWaitHook([&calls] { ++calls; });
  if (me != 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_OK(c.barrier());
  c.setWaitHook({});
  if (me == 0) CHECK_TRUE(calls > 0, "the wait hook was not called while rank 0 waited 50 ms");
  const int before = calls;
  CHECK_OK(c.barrier());
  CHECK_TRUE(calls == before, "a cleared hook was called");
}

// Large float sums started in flight run mgs's ring stepped on by each test()
// (ring_allreduce.h). More of them in flight on one communicator than there
// are tag ranges (64), of sizes from one chunk to eight, a blocking ring on
// the same communicator in between, tested in a different order on every
// rank and with one rank late: each result is exact and bitwise the blocking
// ring's.
void ringsInFlight(Communicator& c) {
  const int P = c.size(), me = c.rank();
  constexpr int kRings = 70;
  std::vector<std::vector<float>> bufs(kRings), want(kRings);
  std::vector<std::unique_ptr<PendingCollective>> ops(kRings);
  for (int r = 0; r < kRings; ++r) {
    const size_t n = (r % 7 == 0) ? (size_t{1} << 20) + size_t(r) : size_t{16384} + size_t(r) * 1001;
    bufs[r].resize(n);
    for (size_t i = 0; i < n; ++i) bufs[r][i] = float((i * 31 + size_t(r)) % 1000) * 0.25f + float(me);
    want[r] = bufs[r];
    CHECK_OK(c.allreduce(want[r].data(), n, MGS_FLOAT32, CommOp::kSum));  // the blocking ring
  }
  for (int r = 0; r < kRings; ++r) {
    CHECK_OK(c.startAllreduce(bufs[r].data(), bufs[r].size(), MGS_FLOAT32, CommOp::kSum, &ops[r]));
    if (r == kRings / 2) {
      std::vector<float> mid(100000, float(me));
      CHECK_OK(c.allreduce(mid.data(), mid.size(), MGS_FLOAT32, CommOp::kSum));
      CHECK_TRUE(mid[99999] == float(P) * float(P - 1) / 2, "the blocking ring between: %g", double(mid[99999]));
    }
  }
  // Really in flight: rank 0 tests nothing for 30 ms, and every other rank's
  // ring needs pieces rank 0 forwards only when it tests, so the first test
  // of a 4 MiB ring there finds it unfinished (a blocking ring would be done).
  // Ring 7: rings 0-5 share their tag ranges with rings 64-69, whose start
  // finished them.
  if (me == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  if (me != 0) {
    bool early = true;
    CHECK_OK(ops[7]->test(&early));
    CHECK_TRUE(!early, "a 4 MiB ring was finished before rank 0 tested it: not in flight");
  }
  std::vector<bool> done(kRings, false);
  for (int left = kRings, pass = 0; left > 0; ++pass) {
    for (int j = 0; j < kRings; ++j) {
      const int r = (me % 2 == 0) ? kRings - 1 - j : (j + pass * 7) % kRings;
      if (done[r]) continue;
      bool d = false;
      CHECK_OK(ops[r]->test(&d));
      if (d) {
        done[r] = true;
        --left;
      }
    }
    CHECK_TRUE(pass < 2000000, "rings in flight did not finish");
    if (pass >= 2000000) return;
  }
  int bad = 0, unequal = 0;
  for (int r = 0; r < kRings; ++r) {
    unequal += std::memcmp(bufs[r].data(), want[r].data(), bufs[r].size() * sizeof(float)) != 0;
    for (size_t i = 0; i < bufs[r].size(); ++i)
      bad += bufs[r][i] != float((i * 31 + size_t(r)) % 1000) * 0.25f * float(P) + float(P) * float(P - 1) / 2;
  }
  CHECK_TRUE(bad == 0, "%d wrong entries in the rings in flight", bad);
  CHECK_TRUE(unequal == 0, "%d rings in flight differ from the blocking ring", unequal);
  // 16-bit floats (no MPI type) go in flight on the ring too, below the
  // float threshold as well: values whose sum depends on the order, and the
  // bits of the blocking ring's result on every rank.
  std::mt19937 gen(99 + me);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (DataType d : {MGS_FLOAT16, MGS_BFLOAT16}) {
    for (size_t n : {size_t{5}, size_t{300001}}) {
      std::vector<char> b(n * dtypeSize(d));
      for (size_t i = 0; i < n; ++i) put(b, d, i, dist(gen));
      std::vector<char> blocking = b;
      CHECK_OK(c.allreduce(blocking.data(), n, d, CommOp::kSum));
      std::unique_ptr<PendingCollective> op;
      CHECK_OK(c.startAllreduce(b.data(), n, d, CommOp::kSum, &op));
      if (op) CHECK_OK(op->wait());
      CHECK_TRUE(b == blocking, "%s n=%zu: in flight differs from the blocking ring", dtypeName(d).c_str(), n);
    }
  }
}

// setRingMinBytes moves float sums between mgs's ring and Open MPI's
// algorithms: both exact, blocking and in flight bitwise alike, each call
// counted on the algorithm that ran, and the bound inherited by a duplicate.
void ringBound(Communicator& c) {
  const int P = c.size(), me = c.rank();
  CHECK_TRUE(c.ringMinBytes() == size_t{64} << 10, "default bound %zu", c.ringMinBytes());
  auto fill = [&](std::vector<float>& b) {
    for (size_t i = 0; i < b.size(); ++i) b[i] = float((i * 7) % 1000) * 0.5f + float(me);
  };
  auto exact = [&](const std::vector<float>& b) {
    int bad = 0;
    for (size_t i = 0; i < b.size(); ++i)
      bad += b[i] != float((i * 7) % 1000) * 0.5f * float(P) + float(P) * float(P - 1) / 2;
    return bad;
  };
  for (size_t bound : {SIZE_MAX, size_t{0}}) {
    CHECK_TRUE(c.setRingMinBytes(bound), "MPI has the choice");
    const Communicator::AllreduceCounts before = c.allreduceCounts();
    const bool ring = bound == 0;
    for (size_t n : {size_t{5}, size_t{300001}, (size_t{1} << 20) + 3}) {
      std::vector<float> blocking(n), flight(n);
      fill(blocking);
      fill(flight);
      CHECK_OK(c.allreduce(blocking.data(), n, MGS_FLOAT32, CommOp::kSum));
      std::unique_ptr<PendingCollective> op;
      CHECK_OK(c.startAllreduce(flight.data(), n, MGS_FLOAT32, CommOp::kSum, &op));
      if (op) CHECK_OK(op->wait());
      CHECK_TRUE(exact(blocking) == 0, "bound %zu n=%zu: %d wrong entries", bound, n, exact(blocking));
      CHECK_TRUE(blocking == flight, "bound %zu n=%zu: in flight differs from the blocking call", bound, n);
    }
    const Communicator::AllreduceCounts after = c.allreduceCounts();
    // The two sizes of 64 KiB and more, blocking and in flight, on the algorithm the bound gives.
    CHECK_TRUE((ring ? after.ring - before.ring : after.library - before.library) == 4, "bound %zu: %llu/%llu", bound,
               (unsigned long long)(after.ring - before.ring), (unsigned long long)(after.library - before.library));
    CHECK_TRUE((ring ? after.library - before.library : after.ring - before.ring) == 0, "bound %zu: the other ran",
               bound);
  }
  c.setRingMinBytes(size_t{1} << 20);
  std::unique_ptr<Communicator> dup;
  CHECK_OK(c.duplicate(&dup));
  CHECK_TRUE(dup && dup->ringMinBytes() == size_t{1} << 20, "a duplicate keeps the bound");
  c.setRingMinBytes(size_t{64} << 10);
}

int main() {
  std::unique_ptr<Communicator> c;
  Status st = MpiCommunicator::create(&c);
  if (!st.ok()) {
    std::fprintf(stderr, "create: %s\n", st.toString().c_str());
    return 1;
  }
  g_rank = c->rank();
  floatReductions(*c);
  bitwiseAgreement(*c);
  integerAndOthers(*c);
  smallAlgorithms(*c);
  inFlight(*c);
  ringsInFlight(*c);
  ringBound(*c);
  int64_t failures = g_failures;
  const bool ok = c->allreduce(&failures, 1, MGS_INT64, CommOp::kSum).ok() && failures == 0;
  if (g_rank == 0) std::printf("%s: %lld failure(s) across ranks\n", ok ? "PASSED" : "FAILED", (long long)failures);
  c.reset();
  MpiCommunicator::finalizeIfOwned();
  return ok ? 0 : 1;
}
