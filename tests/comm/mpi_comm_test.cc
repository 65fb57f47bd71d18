// MpiCommunicator under mpirun -np 2..4: the ring (every float size class,
// 16-bit floats, min/max), MPI's own algorithms for small and integer
// buffers, and every other collective, all through the sleeping waits.
// Results must equal the exact reference and be bitwise the same on every rank.
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
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

}  // namespace

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
  int64_t failures = g_failures;
  const bool ok = c->allreduce(&failures, 1, MGS_INT64, CommOp::kSum).ok() && failures == 0;
  if (g_rank == 0) std::printf("%s: %lld failure(s) across ranks\n", ok ? "PASSED" : "FAILED", (long long)failures);
  c.reset();
  MpiCommunicator::finalizeIfOwned();
  return ok ? 0 : 1;
}
