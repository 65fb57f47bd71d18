// Non-finite gradients (MGS_NONFINITE), real multi-rank runs:
//   mpirun -np {2,3,4} mgs_mpi_nonfinite_test sparse|dense
// (sparse: with MGS_EXCHANGE=allgather and again with MGS_EXCHANGE=agreed)
// The job starts under the default (propagate); each scenario then restarts
// the runtime with MGS_NONFINITE=error (mgs_shutdown + setenv + mgs_init) and
// checks the strict mode in the same job.
//
// propagate: the bucket's ops succeed on every rank with every output NaN
// (dense plain allreduce: NaN/Inf flow through the sum), and every rank's
// residual is bitwise what it was before the step; a run with the bad step
// ends bitwise where a run without it ends.
// error: MGS_ERR_NUMERIC on every rank, naming the tensor and the rank;
// residuals bitwise unchanged; the next step works.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "mpi_harness.h"

using mpitest::cpuTensor;
using mpitest::g_rank;
using mpitest::gradValue;
using mpitest::stepGrad;
using mpitest::residualOf;

namespace {

int g_size = 0;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void restart(const char* mode) {
  EXPECT_OK(mgs_shutdown());
  setenv("MGS_NONFINITE", mode, 1);
  EXPECT_OK(mgs_init());
}

struct StepResult {
  std::vector<mgs_status_t> status;
  std::vector<std::string> message;
  std::vector<std::vector<float>> out;
};

// One step: every tensor `prefix<t>` allreduced (average) with `flags`.
// `poison(t, x)` may put NaN/Inf into this rank's gradient.
template <typename Poison>
StepResult runStep(const std::string& prefix, const std::vector<int64_t>& sizes, int step, uint32_t flags,
                   Poison poison) {
  const size_t L = sizes.size();
  std::vector<std::vector<float>> x(L);
  std::vector<std::vector<int64_t>> shapes(L);
  std::vector<mgs_handle_t> h(L);
  StepResult res;
  res.out.resize(L);
  for (size_t t = 0; t < L; ++t) {
    x[t].resize(sizes[t]);
    for (int64_t i = 0; i < sizes[t]; ++i)
      x[t][i] = stepGrad(step, t, i);
    poison(t, x[t]);
    res.out[t].assign(sizes[t], -1.0f);
    shapes[t] = {sizes[t]};
  }
  for (size_t j = 0; j < L; ++j) {
    const size_t t = (g_rank % 2) ? L - 1 - j : j;  // ranks enqueue in different orders
    mgs_tensor_t in = cpuTensor(x[t].data(), MGS_FLOAT32, shapes[t]);
    mgs_tensor_t o = cpuTensor(res.out[t].data(), MGS_FLOAT32, shapes[t]);
    EXPECT_OK(mgs_allreduce_async((prefix + std::to_string(t)).c_str(), &in, &o, MGS_REDUCE_AVERAGE, 1, 1, flags,
                                  &h[t]));
  }
  for (size_t t = 0; t < L; ++t) {
    res.status.push_back(mgs_wait(h[t]));
    const char* m = mgs_handle_error(h[t]);
    res.message.push_back(m ? m : "");
    mgs_release(h[t]);
  }
  return res;
}

bool allNaN(const std::vector<float>& v) {
  for (float f : v)
    if (!std::isnan(f)) return false;
  return true;
}
bool allFinite(const std::vector<float>& v) {
  for (float f : v)
    if (!std::isfinite(f)) return false;
  return true;
}

// The bad ranks of a step: the last rank puts +Inf into tensor 1; with three
// or more ranks, rank 0 also puts a NaN into tensor 0 (two ranks, two causes).
void poisonBad(size_t t, std::vector<float>& x) {
  if (g_rank == g_size - 1 && t == 1) x[7] = kInf;
  if (g_size >= 3 && g_rank == 0 && t == 0) x[x.size() - 1] = kNaN;
}
void poisonNone(size_t, std::vector<float>&) {}

bool poisoned(size_t t) { return t == 1 || (t == 0 && g_size >= 3); }

// One op's error verdict: MGS_ERR_NUMERIC naming the cause, the last rank
// and tensor <prefix>1 (which every failed merged bucket contains).
void expectNumericOp(mgs_status_t st, const std::string& msg, const std::string& prefix, const std::string& what) {
  static std::map<std::string, bool> shown;  // one sample message per path in the log
  if (g_rank == 0 && !shown[prefix]) {
    shown[prefix] = true;
    std::printf("%s, MGS_NONFINITE=error: %s\n", what.c_str(), msg.c_str());
  }
  const std::string tensor = "'" + prefix + "1'", rank = "rank " + std::to_string(g_size - 1);
  EXPECT(st == MGS_ERR_NUMERIC, "%s: status %d, want MGS_ERR_NUMERIC (%s)", what.c_str(), (int)st, msg.c_str());
  EXPECT(msg.find(tensor) != std::string::npos, "%s: error does not name tensor %s: %s", what.c_str(), tensor.c_str(),
         msg.c_str());
  EXPECT(msg.find(rank) != std::string::npos, "%s: error does not name %s: %s", what.c_str(), rank.c_str(),
         msg.c_str());
  EXPECT(msg.find("non-finite") != std::string::npos, "%s: error does not name the cause: %s", what.c_str(),
         msg.c_str());
}

void expectNumeric(const StepResult& r, const std::string& prefix, const std::string& what) {
  for (size_t t = 0; t < r.status.size(); ++t)
    expectNumericOp(r.status[t], r.message[t], prefix, what + " " + prefix + std::to_string(t));
}

// Which exchange every sparse bucket must have taken: the second argument,
// else MGS_EXCHANGE (the same scenario runs through the allgather and the
// agreed exchange, pinned; and under 'auto', which must take the allgather
// even where the cost model prices the agreed exchange cheaper; a skipped or
// failed bucket counts in neither).
std::string g_want_exchange;

void expectExchange(const std::string& prefix) {
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  const std::string& want = g_want_exchange;
  EXPECT(st.sparse_buckets > 0, "run %s: no sparse buckets", prefix.c_str());
  if (want == "agreed")
    EXPECT(st.sparse_agreed_buckets == st.sparse_buckets, "run %s: %llu of %llu sparse buckets agreed", prefix.c_str(),
           (unsigned long long)st.sparse_agreed_buckets, (unsigned long long)st.sparse_buckets);
  if (want == "allgather")
    EXPECT(st.sparse_agreed_buckets == 0, "run %s: %llu agreed buckets, want the allgather for every one", prefix.c_str(),
           (unsigned long long)st.sparse_agreed_buckets);
}

const std::vector<int64_t> kSparseSizes = {6000, 9000, 5000};
constexpr int kProfileSteps = 2;  // MGS_PROFILE_STEPS in CMakeLists.txt: steps 0-1 layer-wise, then one bucket

// Sparse steps 0 .. steps-1 of tensors <prefix>0..2 (skipping `omit`), with
// poisonBad on `bad` steps. Checks every step's verdict and that a bad step
// leaves every residual bitwise as it was. Returns the last step's outputs
// followed by the final residuals.
std::vector<std::vector<float>> sparseRun(const std::string& prefix, int steps, const std::vector<int>& bad,
                                          const std::vector<int>& omit, bool expect_error) {
  const auto& sizes = kSparseSizes;
  auto has = [](const std::vector<int>& v, int s) { return std::find(v.begin(), v.end(), s) != v.end(); };
  StepResult last;
  int applied = 0;  // steps the runtime has seen: it merges from the third on
  for (int step = 0; step < steps; ++step) {
    if (has(omit, step)) continue;
    const bool merged = applied++ >= kProfileSteps;
    std::vector<std::vector<float>> before;
    for (size_t t = 0; t < sizes.size(); ++t) before.push_back(residualOf(prefix + std::to_string(t), sizes[t]));
    const bool is_bad = has(bad, step);
    StepResult r = is_bad ? runStep(prefix, sizes, step, MGS_FLAG_SPARSE_OK, poisonBad)
                          : runStep(prefix, sizes, step, MGS_FLAG_SPARSE_OK, poisonNone);
    const std::string what = "sparse step " + std::to_string(step) + (merged ? " (merged)" : " (layer-wise)");
    for (size_t t = 0; t < sizes.size(); ++t) {
      const bool hit = is_bad && (merged || poisoned(t));  // this op's bucket holds a non-finite value
      const std::string op = what + " " + prefix + std::to_string(t);
      if (hit && expect_error) {
        if (t == 1 || merged) expectNumericOp(r.status[t], r.message[t], prefix, op);
        // A merged bucket with two bad ranks (three or more ranks): both are
        // named with their tensors, on every rank.
        if (merged && g_size >= 3)
          EXPECT(r.message[t].find("rank 0: non-finite gradient in tensor '" + prefix + "0'") != std::string::npos,
                 "%s: error does not name rank 0 and tensor %s0: %s", op.c_str(), prefix.c_str(), r.message[t].c_str());
        EXPECT(r.status[t] == MGS_ERR_NUMERIC, "%s: status %d", op.c_str(), (int)r.status[t]);
      } else {
        EXPECT(r.status[t] == MGS_SUCCESS, "%s: %s", op.c_str(), r.message[t].c_str());
        if (hit)
          EXPECT(allNaN(r.out[t]), "%s: outputs are not all NaN", op.c_str());
        else
          EXPECT(allFinite(r.out[t]), "%s: non-finite output", op.c_str());
      }
      const std::vector<float> after = residualOf(prefix + std::to_string(t), sizes[t]);
      if (hit)
        EXPECT(sameBits(after, before[t]), "%s rank %d: the residual changed on a non-finite step", op.c_str(), g_rank);
      else
        EXPECT(!sameBits(after, before[t]), "%s rank %d: the residual did not change on a clean step", op.c_str(),
               g_rank);
    }
    last = r;
  }
  std::vector<std::vector<float>> end = last.out;
  for (size_t t = 0; t < sizes.size(); ++t) end.push_back(residualOf(prefix + std::to_string(t), sizes[t]));
  expectExchange(prefix);
  return end;
}

void scenarioSparse() {
  // propagate, bad step 3 (one merged bucket): the run ends bitwise where a
  // run that never saw step 3 ends. Both runs start from a fresh runtime and
  // plan the same single bucket after steps 0-1.
  const auto with_bad = sparseRun("s", 6, {3}, {}, false);
  restart("propagate");
  const auto ref = sparseRun("s", 6, {}, {3}, false);
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT(sameBits(with_bad[i], ref[i]), "rank %d: %s of s%zu differs from the run without the bad step", g_rank,
           i < 3 ? "the last output" : "the final residual", i % 3);
  // propagate, a bad layer-wise step (each tensor its own bucket).
  restart("propagate");
  sparseRun("l", 4, {1}, {}, false);
  // error: layer-wise and merged.
  restart("error");
  sparseRun("e", 5, {1, 3}, {}, true);
}

// The dense paths: a dense bucket of the sparse pipeline (MGS_DENSITY=1 makes
// the cost model send every bucket dense) and the plain allreduce (no
// MGS_FLAG_SPARSE_OK; small tensors fused, a large one alone).
void denseRun(bool expect_error) {
  const std::vector<int64_t> sizes = {4096, 5000, 4500};
  const std::string prefix = expect_error ? "de" : "dp";
  // A non-zero residual to keep (every dense bucket sends everything, so the
  // residual would otherwise be zero already): restore one before the steps.
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> before;
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<float> r(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i) r[i] = gradValue(~(uint64_t(g_rank) << 32) ^ (t << 24) ^ i);
      EXPECT_OK(mgs_residual_restore((prefix + std::to_string(t)).c_str(), r.data(), r.size()));
      before.push_back(r);
    }
    const bool bad = step == 1;
    StepResult r = bad ? runStep(prefix, sizes, step, MGS_FLAG_SPARSE_OK, poisonBad)
                       : runStep(prefix, sizes, step, MGS_FLAG_SPARSE_OK, poisonNone);
    for (size_t t = 0; t < sizes.size(); ++t) {
      const std::vector<float> after = residualOf(prefix + std::to_string(t), sizes[t]);
      if (!bad) {
        EXPECT(r.status[t] == MGS_SUCCESS, "dense bucket step %d: %s", step, r.message[t].c_str());
        EXPECT(allFinite(r.out[t]), "dense bucket step %d %s%zu: non-finite output", step, prefix.c_str(), t);
        EXPECT(after == std::vector<float>(sizes[t], 0.0f), "dense bucket step %d: residual not sent", step);
        continue;
      }
      if (!expect_error) {
        EXPECT(r.status[t] == MGS_SUCCESS, "dense bucket step %d: %s", step, r.message[t].c_str());
        EXPECT(allNaN(r.out[t]), "dense bucket step %d %s%zu: outputs are not all NaN", step, prefix.c_str(), t);
      }
      EXPECT(sameBits(after, before[t]), "dense bucket rank %d %s%zu: the residual changed on a non-finite step",
             g_rank, prefix.c_str(), t);
    }
    if (bad && expect_error) expectNumeric(r, prefix, "dense bucket");
  }

  // Plain dense allreduce: three small tensors (fused) and one large one.
  const std::vector<int64_t> plain = {100, 200, 300, 70000};
  const std::string pp = expect_error ? "pe" : "pp";
  for (int step = 0; step < 3; ++step) {
    const bool bad = step == 1;
    StepResult r = bad ? runStep(pp, plain, step, 0, poisonBad) : runStep(pp, plain, step, 0, poisonNone);
    if (!bad || !expect_error) {
      for (size_t t = 0; t < plain.size(); ++t) {
        EXPECT(r.status[t] == MGS_SUCCESS, "plain step %d %s%zu: %s", step, pp.c_str(), t, r.message[t].c_str());
        // propagate: the Inf (and NaN) land where they were put, on every rank.
        const bool inf_here = bad && t == 1, nan_here = bad && g_size >= 3 && t == 0;
        for (size_t i = 0; i < r.out[t].size(); ++i) {
          const float v = r.out[t][i];
          const bool want_inf = inf_here && i == 7, want_nan = nan_here && i + 1 == r.out[t].size();
          if (want_nan) {
            EXPECT(std::isnan(v), "plain %s%zu[%zu] = %g, want NaN", pp.c_str(), t, i, v);
          } else if (want_inf) {
            EXPECT(std::isinf(v) && v > 0, "plain %s%zu[%zu] = %g, want +Inf", pp.c_str(), t, i, v);
          } else {
            EXPECT(std::isfinite(v), "plain %s%zu[%zu] = %g, want finite", pp.c_str(), t, i, v);
          }
        }
      }
      continue;
    }
    // error: an op fails if its fused group (which tensors share one depends
    // on negotiation cycles) holds a non-finite input on some rank, naming
    // that rank and tensor; a poisoned tensor always fails.
    for (size_t t = 0; t < plain.size(); ++t) {
      const std::string& msg = r.message[t];
      const std::string op = "plain dense " + pp + std::to_string(t);
      if (g_rank == 0 && t == 1) std::printf("plain dense, MGS_NONFINITE=error: %s\n", msg.c_str());
      if (!poisoned(t)) {
        EXPECT(r.status[t] == MGS_SUCCESS || (r.status[t] == MGS_ERR_NUMERIC && msg.find("non-finite") != std::string::npos),
               "%s: status %d: %s", op.c_str(), (int)r.status[t], msg.c_str());
        continue;
      }
      const std::string tensor = "'" + pp + std::to_string(t) + "'";
      const std::string rank = "rank " + std::to_string(t == 1 ? g_size - 1 : 0);
      EXPECT(r.status[t] == MGS_ERR_NUMERIC, "%s: status %d, want MGS_ERR_NUMERIC", op.c_str(), (int)r.status[t]);
      EXPECT(msg.find("non-finite") != std::string::npos && msg.find(rank + " has NaN or Inf in tensor " + tensor) !=
                                                               std::string::npos,
             "%s: error does not name %s and tensor %s: %s", op.c_str(), rank.c_str(), tensor.c_str(), msg.c_str());
    }
  }
}

void scenarioDense() {
  denseRun(false);
  restart("error");
  denseRun(true);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s sparse|dense [allgather|agreed: the exchange sparse buckets must take]\n", argv[0]);
    return 2;
  }
  const std::string scenario = argv[1];
  const char* ex = std::getenv("MGS_EXCHANGE");
  g_want_exchange = argc == 3 ? argv[2] : ex ? ex : "auto";
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init failed: %s\n", mgs_last_error());
    return 1;
  }
  mgs_rank(&g_rank);
  mgs_size(&g_size);
  const std::map<std::string, void (*)()> scenarios = {{"sparse", scenarioSparse}, {"dense", scenarioDense}};
  auto it = scenarios.find(scenario);
  if (it == scenarios.end()) {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  it->second();
  const int rc = mpitest::finish();
  mgs_shutdown();
  return rc;
}
