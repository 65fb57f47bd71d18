// The sparse exchanges under mpirun (issue 14): the agreed-index exchange and
// the per-bucket choice. Scenarios:
//   agreed  MGS_EXCHANGE=agreed: each result equals the average of every
//           rank's accumulator at the agreed indices; every rank contributed
//           at the same indices; each entry of each rank's residual is either
//           0 (contributed) or the accumulator, bitwise; outputs are the same
//           bits on every rank; every sparse bucket went by the exchange.
//   agreed_inflight  the same checks with 16 layer-wise agreed buckets per
//           step (MGS_PLANNER=layerwise) and each rank sleeping a random
//           0..TEST_JITTER_US between enqueues, so the buckets' phases
//           complete at different times on different ranks; and the
//           exchanges really were in flight together (sparse_in_flight_max).
//   auto    MGS_EXCHANGE=auto with a measured calibration: results equal the
//           average of what each rank sent, identical everywhere, and every
//           rank counted the same buckets per exchange (the same choices).
//   hierarchical  MGS_EXCHANGE=hierarchical, MGS_NODE_SIZE=2, 4 ranks: two
//           "nodes" {0,1} and {2,3}. Bitwise conservation per node: the
//           non-leader's residual is +0 everywhere (it contributed its whole
//           accumulator), the leader's is, entry by entry, either +0 (sent)
//           or the node's sum (kept), bitwise; the result is the average of
//           what the leaders sent; outputs are the same bits everywhere. A
//           NaN on rank 3 (a non-leader) at step 1 and on rank 2 (a leader) at
//           step 2: every rank's residual bitwise as before,
//           the outputs NaN (MGS_NONFINITE=propagate) or an error naming the
//           bad rank, the tensor and the cause on every rank (=error).
//           With TEST_JITTER_US (and MGS_PLANNER=layerwise) each rank sleeps
//           randomly between enqueues; TEST_EXPECT_IN_FLIGHT: the buckets'
//           exchanges were in flight together.
//   warmup  one 100,000-element tensor for max(60, W + 10) steps: each step's
//           k (the sparse_target it added) follows DGC's density warm-up over
//           W = $TEST_WARMUP_STEPS steps, max(rho^((s+1)/(W+1)), rho), then
//           rho; W = 100 is what MGS_WARMUP_STEPS=auto (the default) gives at
//           the default MGS_DENSITY=0.001, 50 at 0.01, 0 at 0.1 or with 0 set.
//   init_fails  mgs_init must fail on every rank with MGS_ERR_CONFIG and a
//           message containing $EXPECT_ERROR (bad node groupings).
// Malformed index blocks are injected in tests/unit/core/sparse_agreed_test.cc
// (ranks as threads: MPI gives no hook to corrupt a broadcast).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mpi_harness.h"

using mpitest::cpuTensor;
using mpitest::g_rank;
using mpitest::StepTensors;
using mpitest::stepGrad;
using mpitest::gatherAll;
using mpitest::residualOf;

namespace {

int g_size = 0;

// Ten steps of six tensors (two below MGS_MIN_SPARSE_ELEMENTS, dense),
// odd steps in place.
// `agreed`: check the agreed exchange's invariants as well.
// `jitter_us` > 0: each rank sleeps a random 0..jitter_us before each enqueue.
void runSteps(bool agreed, const std::vector<int64_t>& sizes = {5000, 20000, 4096, 100000, 8192, 3000},
              int kSteps = 10, int jitter_us = 0) {
  std::mt19937 rng(1234u + 77u * static_cast<unsigned>(g_rank));
  for (int step = 0; step < kSteps; ++step) {
    const size_t L = sizes.size();
    StepTensors st(sizes, step);
    const bool in_place = step % 2 == 1;
    auto &x = st.x, &out = st.out, &before = st.before;
    auto& shapes = st.shapes;
    auto& h = st.h;
    for (size_t t = 0; t < L; ++t) {
      before[t] = residualOf("x" + std::to_string(t), sizes[t]);
    }
    for (size_t j = 0; j < L; ++j) {
      const size_t t = (g_rank % 2) ? L - 1 - j : j;  // ranks enqueue in different orders
      if (jitter_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % jitter_us));
      // Odd steps in place (output = input, as DistributedOptimizer
      // reduces p.grad): the agreed exchange's non-leaders then zero the
      // input as they fuse it and the scatter writes only the picks.
      if (in_place) out[t] = x[t];
      mgs_tensor_t in = cpuTensor(in_place ? out[t].data() : x[t].data(), MGS_FLOAT32, shapes[t]);
      mgs_tensor_t o = cpuTensor(out[t].data(), MGS_FLOAT32, shapes[t]);
      EXPECT_OK(mgs_allreduce_async(("x" + std::to_string(t)).c_str(), &in, &o, MGS_REDUCE_AVERAGE, 1, 1,
                                    MGS_FLAG_SPARSE_OK, &h[t]));
    }
    for (size_t t = 0; t < L; ++t) {
      EXPECT_OK(mgs_wait(h[t]));
      mgs_release(h[t]);
    }
    for (size_t t = 0; t < L; ++t) {
      if (sizes[t] < 4096) continue;  // dense, covered by mpi.sparse.*
      const std::string name = "x" + std::to_string(t);
      const std::vector<float> after = residualOf(name, sizes[t]);
      std::vector<float> acc(sizes[t]), sent(sizes[t]);
      int not_exact = 0;
      for (int64_t i = 0; i < sizes[t]; ++i) {
        acc[i] = before[t][i] + x[t][i];  // as the fuse stage adds
        sent[i] = acc[i] - after[i];
        // Error feedback is exact: an entry went whole or stayed whole.
        if (agreed && after[i] != 0.0f && std::memcmp(&after[i], &acc[i], 4) != 0) ++not_exact;
      }
      EXPECT(not_exact == 0, "step %d %s: %d residual entries are neither 0 nor the accumulator", step, name.c_str(),
             not_exact);
      const std::vector<float> all_acc = gatherAll("acc." + name, acc, MGS_FLOAT32);
      const std::vector<float> all_after = gatherAll("after." + name, after, MGS_FLOAT32);
      const std::vector<float> all_sent = gatherAll("sent." + name, sent, MGS_FLOAT32);
      const std::vector<float> results = gatherAll("res." + name, out[t], MGS_FLOAT32);
      const float inv = static_cast<float>(1.0 / g_size);
      int bad = 0, differ = 0, disagree = 0, nonzero = 0;
      for (int64_t i = 0; i < sizes[t]; ++i) {
        float ref = 0.0f;
        const bool sent0 = all_after[i] == 0.0f && all_acc[i] != 0.0f;
        for (int r = 0; r < g_size; ++r) {
          const size_t at = r * sizes[t] + i;
          if (agreed) {
            const bool s = all_after[at] == 0.0f && all_acc[at] != 0.0f;
            disagree += s != sent0;
            if (sent0) ref += all_acc[at];  // the dense sum at the agreed index
          } else {
            ref += all_sent[at];
          }
          if (std::memcmp(&results[i], &results[at], 4) != 0) ++differ;
        }
        ref *= inv;
        nonzero += out[t][i] != 0.0f;
        if (!(std::fabs(out[t][i] - ref) <= 1e-6f * std::max(1.0f, std::fabs(ref)))) ++bad;
      }
      EXPECT(bad == 0, "step %d %s: %d entries differ from the reference", step, name.c_str(), bad);
      EXPECT(differ == 0, "step %d %s: %d entries differ across ranks", step, name.c_str(), differ);
      EXPECT(disagree == 0, "step %d %s: ranks contributed at %d different indices", step, name.c_str(), disagree);
      if (agreed)
        EXPECT(nonzero > 0 && nonzero < sizes[t] / 2, "step %d %s: %d of %lld nonzero", step, name.c_str(), nonzero,
               (long long)sizes[t]);
    }
  }
}

// Host tensors: every finished bucket, whatever its exchange, is counted on
// the host path with all its bytes; nothing on the GPU paths, no host sync.
void checkHostPaths() {
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  const uint64_t all = st.sparse_buckets + st.sparse_dense_buckets;
  EXPECT(all > 0 && st.path_host_buckets == all, "host path %llu of %llu buckets", (unsigned long long)st.path_host_buckets,
         (unsigned long long)all);
  EXPECT(st.path_staged_buckets == 0 && st.path_resident_buckets == 0 && st.path_device_buckets == 0,
         "GPU paths counted for host tensors: staged %llu resident %llu device %llu",
         (unsigned long long)st.path_staged_buckets, (unsigned long long)st.path_resident_buckets,
         (unsigned long long)st.path_device_buckets);
  EXPECT(st.path_host_bytes == st.sparse_bytes_sent && st.path_staged_bytes + st.path_resident_bytes +
                                                               st.path_device_bytes ==
                                                           0,
         "path bytes: host %llu of %llu sent", (unsigned long long)st.path_host_bytes,
         (unsigned long long)st.sparse_bytes_sent);
  EXPECT(st.cuda_nccl_ops == 0 && st.cuda_staged_ops == 0 && st.device_host_syncs == 0,
         "CUDA counters for a host-only job: nccl %llu staged %llu syncs %llu", (unsigned long long)st.cuda_nccl_ops,
         (unsigned long long)st.cuda_staged_ops, (unsigned long long)st.device_host_syncs);
#ifdef MGS_EXPECT_NCCL
  EXPECT(mgs_built_with_nccl() == MGS_EXPECT_NCCL, "mgs_built_with_nccl() %d, the build found NCCL: %d",
         mgs_built_with_nccl(), MGS_EXPECT_NCCL);
#endif
}

std::vector<uint64_t> exchangeCounts() {
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  return {st.sparse_buckets, st.sparse_agreed_buckets, st.sparse_dense_buckets, st.sparse_hierarchical_buckets};
}

void scenarioAgreed() {
  runSteps(/*agreed=*/true);
  const auto c = exchangeCounts();
  EXPECT(c[0] > 0 && c[1] == c[0], "sparse buckets %llu, agreed %llu: every sparse bucket should be agreed",
         (unsigned long long)c[0], (unsigned long long)c[1]);
  if (g_rank == 0)
    std::printf("agreed: %llu sparse buckets, %llu agreed, %llu dense\n", (unsigned long long)c[0],
                (unsigned long long)c[1], (unsigned long long)c[2]);
}

void scenarioAgreedInFlight() {
  const char* j = std::getenv("TEST_JITTER_US");
  const int jitter = j ? std::atoi(j) : 2000;
  std::vector<int64_t> sizes;
  for (int t = 0; t < 16; ++t) sizes.push_back(4096 + 2731 * t);
  sizes.push_back(100);  // dense (below MGS_MIN_SPARSE_ELEMENTS)
  sizes.push_back(3000);
  runSteps(/*agreed=*/true, sizes, 12, jitter);
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  EXPECT(st.sparse_buckets > 0 && st.sparse_agreed_buckets == st.sparse_buckets,
         "sparse buckets %llu, agreed %llu: every sparse bucket should be agreed", (unsigned long long)st.sparse_buckets,
         (unsigned long long)st.sparse_agreed_buckets);
  // MPI has nonblocking collectives: the agreed exchanges overlap.
  EXPECT(st.sparse_in_flight_max >= 2, "at most %llu agreed exchange(s) in flight at once: they did not overlap",
         (unsigned long long)st.sparse_in_flight_max);
  if (g_rank == 0)
    std::printf("agreed_inflight: %llu agreed buckets, at most %llu in flight at once\n",
                (unsigned long long)st.sparse_agreed_buckets, (unsigned long long)st.sparse_in_flight_max);
}

void scenarioAuto() {
  runSteps(/*agreed=*/false);
  const auto c = exchangeCounts();
  const auto all = gatherAll("exchange.counts", c, MGS_INT64);
  for (int r = 1; r < g_size; ++r)
    for (size_t i = 0; i < c.size(); ++i)
      EXPECT(all[r * c.size() + i] == all[i], "rank %d counted %llu buckets of kind %zu, rank 0 %llu", r,
             (unsigned long long)all[r * c.size() + i], i, (unsigned long long)all[i]);
  EXPECT(c[0] + c[2] > 0, "no buckets counted");
  // 'auto' takes the allgather or dense, never an exchange that applies
  // fewer entries than the density says (allowedExchanges).
  EXPECT(c[1] == 0 && c[3] == 0, "auto took %llu agreed and %llu hierarchical buckets", (unsigned long long)c[1],
         (unsigned long long)c[3]);
  if (g_rank == 0)
    std::printf("auto: %llu sparse buckets (%llu agreed, %llu allgather), %llu dense\n", (unsigned long long)c[0],
                (unsigned long long)c[1], (unsigned long long)(c[0] - c[1]), (unsigned long long)c[2]);
}

void scenarioWarmup() {
  const char* w = std::getenv("TEST_WARMUP_STEPS");
  const char* d = std::getenv("MGS_DENSITY");
  const int W = w ? std::atoi(w) : -1;
  const double rho = d ? std::atof(d) : 0.001;
  EXPECT(W >= 0, "TEST_WARMUP_STEPS unset");
  // Resolved at init and in the statistics as soon as mgs_init returns (an
  // optimizer reads it before its first exchange): no cycle has to run first.
  mgs_stats_t at_init{};
  EXPECT_OK(mgs_get_stats(&at_init, sizeof at_init));
  EXPECT(at_init.sparse_warmup_steps == static_cast<uint64_t>(W),
         "right after mgs_init: sparse_warmup_steps %llu, want %d", (unsigned long long)at_init.sparse_warmup_steps, W);
  const int64_t n = 100000;
  const int kSteps = std::max(60, W + 10);
  std::vector<float> x(n), out(n);
  std::vector<int64_t> shape{n};
  uint64_t last = 0;
  int first_bad = -1;
  uint64_t k0 = 0, k_last = 0;
  for (int step = 0; step < kSteps; ++step) {
    for (int64_t i = 0; i < n; ++i) x[i] = stepGrad(step, 0, i);
    mgs_tensor_t in = cpuTensor(x.data(), MGS_FLOAT32, shape);
    mgs_tensor_t o = cpuTensor(out.data(), MGS_FLOAT32, shape);
    mgs_handle_t h = 0;
    EXPECT_OK(mgs_allreduce_async("w", &in, &o, MGS_REDUCE_AVERAGE, 1, 1, MGS_FLAG_SPARSE_OK, &h));
    EXPECT_OK(mgs_wait(h));
    mgs_release(h);
    mgs_stats_t st{};
    EXPECT_OK(mgs_get_stats(&st, sizeof st));
    const uint64_t k = st.sparse_target - last;
    last = st.sparse_target;
    if (step == 0) k0 = k;
    k_last = k;
    double density = rho;
    if (step < W) density = std::max(std::pow(std::pow(rho, 1.0 / (W + 1)), step + 1.0), rho);
    const double want = std::max(1.0, std::floor(density * n));
    // pow's last bit may differ from the runtime's: allow one entry.
    if (std::fabs(static_cast<double>(k) - want) > 1.0 && first_bad < 0) {
      first_bad = step;
      EXPECT(false, "step %d: k = %llu, want %.0f (warm-up over %d steps at density %g)", step,
             (unsigned long long)k, want, W, rho);
    }
  }
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  EXPECT(st.sparse_warmup_steps == static_cast<uint64_t>(W), "sparse_warmup_steps %llu, want %d",
         (unsigned long long)st.sparse_warmup_steps, W);
  if (g_rank == 0)
    std::printf("warmup: W = %d, density %g: k at step 0 = %llu, at step %d = %llu\n", W, rho,
                (unsigned long long)k0, kSteps - 1, (unsigned long long)k_last);
}

bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

void scenarioHierarchical() {
  EXPECT(g_size == 4, "run with 4 ranks (2 nodes of 2), not %d", g_size);
  if (g_size != 4) return;
  const char* nf = std::getenv("MGS_NONFINITE");
  const bool error_mode = nf && std::string(nf) == "error";
  // TEST_JITTER_US: each rank sleeps a random 0..jitter us before each
  // enqueue, so the buckets' phases complete at different times per rank.
  const char* j = std::getenv("TEST_JITTER_US");
  const int jitter = j ? std::atoi(j) : 0;
  std::mt19937 rng(99u + 31u * static_cast<unsigned>(g_rank));
  const std::vector<int64_t> sizes = {5000, 20000, 4096, 100000};
  const int kSteps = 8;
  // Non-finite values: a non-leader (rank 3) at step 1, a leader (rank 2) at step 2.
  struct Bad {
    int step, rank;
    size_t tensor;
  };
  const Bad kBad[] = {{1, 3, 1}, {2, 2, 0}};
  auto badAt = [&](int step, size_t t) -> const Bad* {
    for (const Bad& b : kBad)
      if (b.step == step && b.tensor == t) return &b;
    return nullptr;
  };
  const bool leader = g_rank % 2 == 0;
  const float inv = 1.0f / 4;
  int checked = 0;
  for (int step = 0; step < kSteps; ++step) {
    const size_t L = sizes.size();
    StepTensors st(sizes, step);
    const bool in_place = step % 2 == 1;
    auto &x = st.x, &out = st.out, &before = st.before;
    auto& shapes = st.shapes;
    auto& h = st.h;
    for (size_t t = 0; t < L; ++t) {
      if (const Bad* b = badAt(step, t); b && b->rank == g_rank) x[t][7] = std::nanf("");
      before[t] = residualOf("h" + std::to_string(t), sizes[t]);
    }
    for (size_t t = 0; t < L; ++t) {
      if (jitter > 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % jitter));
      mgs_tensor_t in = cpuTensor(x[t].data(), MGS_FLOAT32, shapes[t]);
      mgs_tensor_t o = cpuTensor(out[t].data(), MGS_FLOAT32, shapes[t]);
      EXPECT_OK(mgs_allreduce_async(("h" + std::to_string(t)).c_str(), &in, &o, MGS_REDUCE_AVERAGE, 1, 1,
                                    MGS_FLAG_SPARSE_OK, &h[t]));
    }
    std::vector<mgs_status_t> status(L);
    std::vector<std::string> message(L);
    for (size_t t = 0; t < L; ++t) {
      status[t] = mgs_wait(h[t]);
      if (status[t] != MGS_SUCCESS) message[t] = mgs_handle_error(h[t]);
      mgs_release(h[t]);
    }
    for (size_t t = 0; t < L; ++t) {
      const std::string name = "h" + std::to_string(t);
      const std::vector<float> after = residualOf(name, sizes[t]);
      // Steps 0-2 are layer-wise (MGS_PROFILE_STEPS=3): the bad step hits its tensor's bucket only.
      if (const Bad* b = badAt(step, t)) {
        int changed = 0;
        for (int64_t i = 0; i < sizes[t]; ++i) changed += !sameBits(after[i], before[t][i]);
        EXPECT(changed == 0, "rank %d: %d residual entries of %s changed on the non-finite step", g_rank, changed,
               name.c_str());
        if (error_mode) {
          EXPECT(status[t] == MGS_ERR_NUMERIC, "rank %d: %s: status %d, want MGS_ERR_NUMERIC", g_rank, name.c_str(),
                 (int)status[t]);
          const std::string want = "rank " + std::to_string(b->rank) + ": non-finite gradient in tensor '" + name + "'";
          EXPECT(message[t].find(want) != std::string::npos,
                 "rank %d: the error does not name rank %d, the tensor and the cause: %s", g_rank, b->rank,
                 message[t].c_str());
        } else {
          EXPECT(status[t] == MGS_SUCCESS, "rank %d: %s: %s", g_rank, name.c_str(), message[t].c_str());
          int nan = 0;
          for (float v : out[t]) nan += std::isnan(v);
          EXPECT(nan == sizes[t], "rank %d: %d of %lld outputs NaN on the non-finite step", g_rank, nan,
                 (long long)sizes[t]);
        }
        continue;
      }
      EXPECT(status[t] == MGS_SUCCESS, "rank %d step %d %s: %s", g_rank, step, name.c_str(), message[t].c_str());
      std::vector<float> acc(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i) acc[i] = before[t][i] + x[t][i];  // as the fuse stage adds
      const std::vector<float> all_acc = gatherAll("hacc." + name, acc, MGS_FLOAT32);
      const std::vector<float> all_after = gatherAll("hafter." + name, after, MGS_FLOAT32);
      const std::vector<float> results = gatherAll("hres." + name, out[t], MGS_FLOAT32);
      int kept_bad = 0, nonleader_bad = 0, sent = 0, bad = 0, differ = 0;
      for (int64_t i = 0; i < sizes[t]; ++i) {
        float ref = 0.0f;
        for (int node = 0; node < 2; ++node) {
          const size_t l = size_t(2 * node) * sizes[t] + i, o = size_t(2 * node + 1) * sizes[t] + i;
          // What came into the node: both accumulators, summed as the node's allreduce sums two values.
          const float sum = all_acc[l] + all_acc[o];
          // Conservation, bitwise: the leader keeps the sum whole or sends it whole; the other rank keeps +0.
          const bool kept = sameBits(all_after[l], sum), gone = sameBits(all_after[l], 0.0f);
          if (!kept && !gone) ++kept_bad;
          if (!sameBits(all_after[o], 0.0f)) ++nonleader_bad;
          if (gone && sum != 0.0f) {
            ref += sum;
            ++sent;
          }
        }
        ref *= inv;
        if (!(std::fabs(out[t][i] - ref) <= 1e-6f * std::max(1.0f, std::fabs(ref)))) ++bad;
        for (int r = 1; r < 4; ++r) differ += !sameBits(results[i], results[size_t(r) * sizes[t] + i]);
      }
      EXPECT(kept_bad == 0, "step %d %s: %d leader residual entries are neither +0 nor the node's sum, bitwise", step,
             name.c_str(), kept_bad);
      EXPECT(nonleader_bad == 0, "step %d %s: %d non-leader residual entries are not +0", step, name.c_str(),
             nonleader_bad);
      EXPECT(sent > 0 && sent < sizes[t], "step %d %s: %d entries sent over both nodes", step, name.c_str(), sent);
      EXPECT(bad == 0, "step %d %s: %d outputs differ from the leaders' sum", step, name.c_str(), bad);
      EXPECT(differ == 0, "step %d %s: %d outputs differ across ranks", step, name.c_str(), differ);
      ++checked;
    }
  }
  // The leader's residual holds what its node kept; a non-leader's is +0.
  const std::vector<float> r3 = residualOf("h3", sizes[3]);
  int nonzero = 0;
  for (float v : r3) nonzero += v != 0.0f;
  EXPECT(leader ? nonzero > sizes[3] / 2 : nonzero == 0, "rank %d: %d nonzero residual entries of h3", g_rank, nonzero);
  const auto c = exchangeCounts();
  EXPECT(c[0] > 0 && c[3] == c[0] && c[1] == 0, "%llu sparse buckets, %llu hierarchical, %llu agreed",
         (unsigned long long)c[0], (unsigned long long)c[3], (unsigned long long)c[1]);
  if (g_rank == 0) std::printf("hierarchical: %d tensor-steps checked bitwise\n", checked);
  if (std::getenv("TEST_EXPECT_IN_FLIGHT")) {  // MPI: the buckets' exchanges overlapped
    mgs_stats_t st{};
    EXPECT_OK(mgs_get_stats(&st, sizeof st));
    EXPECT(st.sparse_in_flight_max >= 2, "at most %llu hierarchical exchange(s) in flight at once",
           (unsigned long long)st.sparse_in_flight_max);
    if (g_rank == 0) std::printf("hierarchical: at most %llu in flight\n", (unsigned long long)st.sparse_in_flight_max);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "init_fails") {
    const char* want = std::getenv("EXPECT_ERROR");
    const mgs_status_t st = mgs_init();
    const std::string msg = mgs_last_error();
    if (st == MGS_SUCCESS) mgs_shutdown();
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");  // mgs_rank needs an initialised mgs
    const bool ok = st == MGS_ERR_CONFIG && want && msg.find(want) != std::string::npos;
    std::fprintf(stderr, "rank %s: mgs_init: status %d, '%s' (want MGS_ERR_CONFIG and '%s')\n", rank ? rank : "?",
                 (int)st, msg.c_str(), want ? want : "(EXPECT_ERROR unset)");
    return ok ? 0 : 1;
  }
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init failed: %s\n", mgs_last_error());
    return 1;
  }
  mgs_rank(&g_rank);
  mgs_size(&g_size);
  const std::map<std::string, void (*)()> scenarios = {
      {"agreed", scenarioAgreed}, {"agreed_inflight", scenarioAgreedInFlight}, {"auto", scenarioAuto}, {"hierarchical", scenarioHierarchical}, {"warmup", scenarioWarmup}};
  auto it = scenarios.find(scenario);
  if (it == scenarios.end()) {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    mgs_shutdown();
    return 2;
  }
  it->second();
  checkHostPaths();
  const int rc = mpitest::finish();
  mgs_shutdown();
  return rc;
}
