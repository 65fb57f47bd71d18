// The agreed-index exchange (exchange_agreed.cc) with ranks as threads: the
// result is the average of every rank's accumulator at the leader's indices,
// identical on every rank; error feedback is exact bitwise (each entry is
// either contributed whole or kept whole); a malformed index block fails the
// bucket on every rank, and so does a non-finite value on any rank under
// MGS_NONFINITE=error, while under 'propagate' it gives NaN outputs on every
// rank; either way every residual stays bitwise as it was.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>

#include "common/check.h"
#include "thread_ranks.h"

using namespace mgs;
using mgs::test::cpuDesc;
using mgs::test::runRanks;
using mgs::test::waitRelease;

namespace {

Config agreedConfig(const std::string& compressor, double density, const std::string& exchange = "agreed") {
  Config c;
  c.compressor = compressor;
  c.density = density;
  c.profile_steps = 2;
  c.min_sparse_elements = 1000;
  c.calibration = "off";
  c.dense_fallback = false;
  c.exchange = exchange;
  return c;
}

struct Rec {
  std::vector<std::vector<float>> acc, after, out;  // per tensor
};

// `steps` steps of `sizes` tensors on P thread ranks; records each rank's
// accumulator (input + residual before), residual after and output.
std::vector<std::vector<Rec>> run(int P, const Config& config, const std::vector<int64_t>& sizes, int steps,
                                  std::vector<SparseStats>* stats) {
  std::vector<std::vector<Rec>> rec(P, std::vector<Rec>(steps));
  std::vector<int> failed(P, 0);
  stats->assign(P, SparseStats{});
  runRanks(P, config, [&](Runtime& rt, int rank) {
    std::mt19937 rng(rank * 7919 + 3);
    std::normal_distribution<float> g;
    for (int s = 0; s < steps; ++s) {
      const size_t L = sizes.size();
      std::vector<std::vector<float>> x(L), before(L);
      Rec& r = rec[rank][s];
      r.out.resize(L);
      std::vector<uint64_t> ids(L);
      for (size_t t = 0; t < L; ++t) {
        x[t].resize(sizes[t]);
        for (auto& v : x[t]) v = g(rng);
        before[t].resize(sizes[t]);
        rt.residuals().read("t" + std::to_string(t), before[t].data(), sizes[t]);
        r.out[t].assign(sizes[t], -1.0f);
      }
      for (size_t j = 0; j < L; ++j) {
        const size_t t = (rank % 2) ? L - 1 - j : j;
        TensorDesc in = cpuDesc(x[t].data(), MGS_FLOAT32, {sizes[t]});
        TensorDesc o = cpuDesc(r.out[t].data(), MGS_FLOAT32, {sizes[t]});
        if (!rt.enqueueAllreduce("t" + std::to_string(t), in, o, MGS_REDUCE_AVERAGE, 1, 1, MGS_FLAG_SPARSE_OK, &ids[t])
                 .ok())
          return;
      }
      for (size_t t = 0; t < L; ++t) failed[rank] += !waitRelease(rt, ids[t]).ok();
      for (size_t t = 0; t < L; ++t) {
        std::vector<float> acc(sizes[t]), after(sizes[t]);
        for (int64_t i = 0; i < sizes[t]; ++i) acc[i] = before[t][i] + x[t][i];  // as the fuse stage adds
        rt.residuals().read("t" + std::to_string(t), after.data(), sizes[t]);
        r.acc.push_back(std::move(acc));
        r.after.push_back(std::move(after));
      }
    }
    (*stats)[rank] = rt.sparseStats();
  });
  CHECK(failed == std::vector<int>(P, 0));
  return rec;
}

}  // namespace

TEST_CASE("agreed exchange: average at the agreed indices, exact error feedback, same bits everywhere",
          "[sparse][agreed]") {
  for (const char* sel : {"topk", "gaussiank", "randomk"}) {
    for (int P : {2, 3, 4}) {
      INFO(sel << " P=" << P);
      std::vector<SparseStats> stats;
      const std::vector<int64_t> sizes = {3000, 1200, 5000};
      const int steps = 5;
      auto rec = run(P, agreedConfig(sel, 0.01), sizes, steps, &stats);
      int not_exact = 0, off_reference = 0, differ = 0, disagree = 0, selected = 0;
      for (int s = 0; s < steps; ++s)
        for (size_t t = 0; t < sizes.size(); ++t)
          for (int64_t i = 0; i < sizes[t]; ++i) {
            // Agreed: every rank contributed entry i (its residual there is 0)
            // or none did (its residual is the accumulator, bitwise).
            const bool sent0 = rec[0][s].after[t][i] == 0.0f && rec[0][s].acc[t][i] != 0.0f;
            float ref = 0.0f;
            for (int r = 0; r < P; ++r) {
              const float a = rec[r][s].acc[t][i], k = rec[r][s].after[t][i];
              const bool sent = k == 0.0f && a != 0.0f;
              disagree += sent != sent0;
              if (!sent && std::memcmp(&a, &k, 4) != 0) ++not_exact;
              if (sent) ref += a;
              differ += std::memcmp(&rec[r][s].out[t][i], &rec[0][s].out[t][i], 4) != 0;
            }
            selected += sent0;
            ref = sent0 ? ref * static_cast<float>(1.0 / P) : 0.0f;
            if (!(std::fabs(rec[0][s].out[t][i] - ref) <= 1e-6f * std::max(1.0f, std::fabs(ref)))) ++off_reference;
          }
      CHECK(not_exact == 0);
      CHECK(disagree == 0);
      CHECK(differ == 0);
      CHECK(off_reference == 0);
      CHECK(selected > 0);
      for (int r = 0; r < P; ++r) {
        CHECK(stats[r].agreed_buckets > 0);
        CHECK(stats[r].agreed_buckets == stats[r].buckets);  // MGS_EXCHANGE=agreed: every sparse bucket
        CHECK(stats[r].buckets == stats[0].buckets);
        CHECK(stats[r].dense_buckets == 0);
      }
    }
  }
}

TEST_CASE("agreed exchange: 'auto' takes the same exchange for each bucket on every rank", "[sparse][agreed]") {
  for (int P : {2, 4}) {
    std::vector<SparseStats> stats;
    Config c = agreedConfig("topk", 0.01, "auto");
    c.dense_fallback = true;  // under the default MGS_NONFINITE=propagate
    run(P, c, {3000, 1200, 50000}, 4, &stats);
    for (int r = 1; r < P; ++r) {
      CHECK(stats[r].agreed_buckets == stats[0].agreed_buckets);
      CHECK(stats[r].buckets == stats[0].buckets);
      CHECK(stats[r].dense_buckets == stats[0].dense_buckets);
    }
    CHECK(stats[0].buckets + stats[0].dense_buckets > 0);
  }
}

namespace {

enum class Fault { kNone, kIndexOutOfRange, kDuplicate, kCountAboveCap, kTorn, kNonFinite };

// A ThreadCommunicator that corrupts the agreed exchange's index block (a
// broadcast of 16 + 4*cap bytes) once `armed` is 1, on every receiver alike
// (what a broken transport would deliver).
class FaultyBroadcast final : public Communicator {
 public:
  FaultyBroadcast(std::shared_ptr<ThreadWorld> world, int rank, Fault fault, std::atomic<int>* armed)
      : inner_(std::move(world), rank), fault_(fault), armed_(armed) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int localRank() const override { return inner_.localRank(); }
  int localSize() const override { return inner_.localSize(); }
  Status allreduce(void* buf, size_t count, DataType dtype, CommOp op) override {
    return inner_.allreduce(buf, count, dtype, op);
  }
  Status allgather(const void* send, size_t bytes, void* recv) override { return inner_.allgather(send, bytes, recv); }
  Status allgatherv(const void* send, size_t send_bytes, void* recv, const std::vector<size_t>& recv_bytes) override {
    return inner_.allgatherv(send, send_bytes, recv, recv_bytes);
  }
  Status gatherStrings(const std::string& send, int root, std::vector<std::string>* out) override {
    return inner_.gatherStrings(send, root, out);
  }
  Status barrier() override { return inner_.barrier(); }
  Status broadcast(void* buf, size_t bytes, int root) override {
    // Collective decision (same call order everywhere): is this the one?
    int64_t fire = armed_->load() == 1 && bytes > 16 && (bytes - 16) % 4 == 0 ? 1 : 0;
    MGS_RETURN_IF_ERROR(inner_.allreduce(&fire, 1, MGS_INT64, CommOp::kMin));
    MGS_RETURN_IF_ERROR(inner_.broadcast(buf, bytes, root));
    if (!fire) return Status::OK();
    MGS_RETURN_IF_ERROR(inner_.barrier());  // every rank has decided before the flag drops
    if (rank() == 0) armed_->store(2);
    char* b = static_cast<char*>(buf);
    uint64_t count, seal;
    std::memcpy(&count, b, 8);
    std::memcpy(&seal, b + bytes - 8, 8);
    if (count < 2) return Status(Code::kInternal, "test: the index block holds fewer than 2 indices");
    const uint32_t huge = 0xfffffff0u;
    if (fault_ == Fault::kIndexOutOfRange) std::memcpy(b + 8 + 4 * (count - 1), &huge, 4);
    if (fault_ == Fault::kDuplicate) std::memcpy(b + 8 + 4, b + 8, 4);
    if (fault_ == Fault::kTorn) std::memset(b + bytes - 8, 0, 8);
    if (fault_ == Fault::kCountAboveCap) {
      const uint64_t c = (bytes - 16) / 4 + 1;
      seal ^= count ^ c;
      std::memcpy(b, &c, 8);
      std::memcpy(b + bytes - 8, &seal, 8);
    }
    return Status::OK();
  }

 private:
  ThreadCommunicator inner_;
  Fault fault_;
  std::atomic<int>* armed_;
};

// Four steps of one tensor on P ranks; the fault at step 2 (kNonFinite:
// rank `bad`'s gradient is +Inf everywhere). Returns each rank's status and
// output at step 2 and checks that every residual is then bitwise what it
// was before the step (nothing committed) and that step 3 works again.
struct FaultRun {
  std::vector<Status> status;
  std::vector<std::vector<float>> out;
};
FaultRun runWithFault(int P, Fault fault, int bad = 1, const std::string& nonfinite = "error") {
  Config c = agreedConfig("topk", 0.01);
  c.profile_steps = 1;
  c.nonfinite = nonfinite;
  const int64_t n = 5000;
  std::atomic<int> armed{0};
  FaultRun res{std::vector<Status>(P), std::vector<std::vector<float>>(P)};
  std::vector<Status> after(P);
  std::vector<int> changed(P, 0);
  runRanks(
      P, c,
      [&](Runtime& rt, int r) {
        std::mt19937 rng(r + 1);
        std::normal_distribution<float> g;
        for (int step = 0; step < 4; ++step) {
          std::vector<float> x(n), out(n), before(n), now(n);
          for (auto& v : x) v = g(rng);
          if (step == 2 && fault == Fault::kNonFinite && r == bad) std::fill(x.begin(), x.end(), INFINITY);
          rt.residuals().read("g", before.data(), n);
          if (step == 2 && r == 0 && fault != Fault::kNone && fault != Fault::kNonFinite) armed.store(1);
          uint64_t id;
          Status st = rt.enqueueAllreduce("g", cpuDesc(x.data(), MGS_FLOAT32, {n}),
                                          cpuDesc(out.data(), MGS_FLOAT32, {n}), MGS_REDUCE_SUM, 1, 1,
                                          MGS_FLAG_SPARSE_OK, &id);
          if (st.ok()) st = waitRelease(rt, id);
          if (step == 2) {
            res.status[r] = st;
            res.out[r] = out;
            rt.residuals().read("g", now.data(), n);
            changed[r] = std::memcmp(now.data(), before.data(), n * sizeof(float)) != 0;
          }
          if (step == 3) after[r] = st;
        }
      },
      [&](std::shared_ptr<ThreadWorld> world, int r) {
        return std::unique_ptr<Communicator>(new FaultyBroadcast(std::move(world), r, fault, &armed));
      });
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r << ": " << res.status[r].toString() << " / after: " << after[r].toString());
    // A failed or skipped bucket commits nothing, on any rank (the bad one too).
    if (fault != Fault::kNone) CHECK(changed[r] == 0);
    CHECK(after[r].ok());
  }
  return res;
}

}  // namespace

TEST_CASE("agreed exchange: a malformed index block fails the bucket on every rank", "[sparse][agreed][faults]") {
  const std::vector<std::pair<Fault, const char*>> cases = {{Fault::kIndexOutOfRange, "index 4294967280"},
                                                            {Fault::kDuplicate, "twice"},
                                                            {Fault::kCountAboveCap, "above the block's capacity"},
                                                            {Fault::kTorn, "short or torn index block"}};
  for (int P : {2, 3}) {
    for (const auto& [fault, what] : cases) {
      INFO("P=" << P << " expecting: " << what);
      const auto st = runWithFault(P, fault).status;
      for (int r = 0; r < P; ++r) {
        INFO("rank " << r << ": " << st[r].toString());
        CHECK(st[r].code() == Code::kCommunication);
        CHECK(st[r].message().find("malformed index block") != std::string::npos);
        CHECK(st[r].message().find("leader rank") != std::string::npos);
        CHECK(st[r].message().find(what) != std::string::npos);
      }
    }
    const auto clean = runWithFault(P, Fault::kNone).status;
    for (int r = 0; r < P; ++r) CHECK(clean[r].ok());
  }
}

// Every rank in turn is the bad one: the bucket's leader (its selection
// fails, its index block carries the failure) and every other rank (it
// raises its flag in the allreduce).
TEST_CASE("agreed exchange: MGS_NONFINITE=error fails the bucket on every rank, naming the rank and tensor",
          "[sparse][agreed][faults]") {
  for (int P : {2, 3, 4}) {
    for (int bad = 0; bad < P; ++bad) {
      INFO("P=" << P << ", bad rank " << bad);
      const auto st = runWithFault(P, Fault::kNonFinite, bad, "error").status;
      for (int r = 0; r < P; ++r) {
        INFO("rank " << r << ": " << st[r].toString());
        CHECK(st[r].code() == Code::kNumeric);
        CHECK(st[r].message().find("rank " + std::to_string(bad) + ": non-finite gradient in tensor 'g'") !=
              std::string::npos);
        CHECK(st[r].message().find("residuals are unchanged") != std::string::npos);
      }
    }
  }
}

TEST_CASE("agreed exchange: MGS_NONFINITE=propagate gives NaN outputs on every rank and keeps every residual",
          "[sparse][agreed][faults]") {
  for (int P : {2, 3, 4}) {
    for (int bad = 0; bad < P; ++bad) {
      INFO("P=" << P << ", bad rank " << bad);
      const auto run = runWithFault(P, Fault::kNonFinite, bad, "propagate");
      for (int r = 0; r < P; ++r) {
        INFO("rank " << r << ": " << run.status[r].toString());
        CHECK(run.status[r].ok());
        size_t nan = 0;
        for (float v : run.out[r]) nan += std::isnan(v);
        CHECK(nan == run.out[r].size());
      }
    }
  }
}
