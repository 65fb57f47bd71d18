// MGS_PLAN_FILE under mpirun (issue 31, item 4): a small sparse training job
// whose final weights two runs must reproduce bit for bit when they read the
// same plan file (plan_file_repeat.sh, plan_file_mismatch.sh drive it).
//
//   mgs_mpi_plan_file_test train WEIGHTS_OUT [STEPS] [MODEL]
//       trains (seeded, the same seed every run), prints the weights' hash and
//       the plan counters on rank 0, writes the weights (float32) to WEIGHTS_OUT.
//       MODEL "other" makes one layer larger (a plan file of the base model
//       must then be refused).
//   mgs_mpi_plan_file_test expect_error TEXT [STEPS] [MODEL]
//       the same job must fail, at init or at its first sparse operation, with
//       a message containing TEXT; every rank prints "rank R: expected error"
//       and exits 0 when it saw it.
//   mgs_mpi_plan_file_test compare A B
//       no MPI: compares two weight files (bitwise, and the largest difference).
//
// The job: six sparse layers and two small dense ones (below
// MGS_MIN_SPARSE_ELEMENTS), gradients of a noisy quadratic in the weights,
// so every step's gradient depends on what earlier steps applied. Each rank
// sleeps a random 0..TEST_JITTER_US (default 1500) us before each gradient,
// seeded from the clock: the timings the planner sees differ from run to run,
// as they do in real jobs; the gradients never do.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mpi_harness.h"

using mpitest::cpuTensor;
using mpitest::g_rank;
using mpitest::gradValue;

namespace {

int g_size = 0;

std::vector<int64_t> layerSizes(const std::string& model) {
  std::vector<int64_t> s = {30000, 64, 6000, 50000, 128, 12000, 40000, 8000};
  if (model == "other") s[3] = 50016;
  return s;
}

std::string layerName(size_t t) { return "layer" + std::to_string(t) + (t == 1 || t == 4 ? ".bias" : ".weight"); }

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Returns the first failed operation's message ("" when all succeeded).
std::string train(const std::string& model, int steps, std::vector<std::vector<float>>* weights) {
  const std::vector<int64_t> sizes = layerSizes(model);
  const size_t L = sizes.size();
  auto& w = *weights;
  w.assign(L, {});
  for (size_t t = 0; t < L; ++t) {
    w[t].resize(sizes[t]);
    for (int64_t i = 0; i < sizes[t]; ++i) w[t][i] = 10.0f * gradValue((uint64_t(t) << 32) ^ uint64_t(i));
  }
  const char* jitter_env = std::getenv("TEST_JITTER_US");
  const int jitter_us = jitter_env ? std::atoi(jitter_env) : 1500;
  std::mt19937 rng(static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()) + g_rank);
  std::uniform_int_distribution<int> sleep_us(0, std::max(0, jitter_us));
  const float lr = 0.2f;
  std::string error;
  for (int step = 0; step < steps && error.empty(); ++step) {
    std::vector<std::vector<float>> g(L), out(L);
    std::vector<std::vector<int64_t>> shapes(L);
    std::vector<mgs_handle_t> h(L, 0);
    std::vector<bool> started(L, false);
    // "Backward": last layer first.
    for (size_t k = 0; k < L && error.empty(); ++k) {
      const size_t t = L - 1 - k;
      g[t].resize(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i) {
        const float target = gradValue((uint64_t(t + 17) << 32) ^ uint64_t(i));
        const float noise = gradValue((uint64_t(step) << 40) ^ (uint64_t(g_rank) << 32) ^ (uint64_t(t) << 24) ^ i);
        g[t][i] = 0.5f * (w[t][i] - target) + 20.0f * noise;
      }
      out[t].assign(sizes[t], 0.0f);
      shapes[t] = {sizes[t]};
      if (jitter_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us(rng)));
      mgs_tensor_t in = cpuTensor(g[t].data(), MGS_FLOAT32, shapes[t]);
      mgs_tensor_t o = cpuTensor(out[t].data(), MGS_FLOAT32, shapes[t]);
      if (mgs_allreduce_async(layerName(t).c_str(), &in, &o, MGS_REDUCE_AVERAGE, 1, 1, MGS_FLAG_SPARSE_OK, &h[t]) !=
          MGS_SUCCESS)
        error = mgs_last_error();
      else
        started[t] = true;
    }
    for (size_t t = 0; t < L; ++t) {
      if (!started[t]) continue;
      if (mgs_wait(h[t]) != MGS_SUCCESS && error.empty()) error = mgs_last_error();
      mgs_release(h[t]);
    }
    if (!error.empty()) break;
    for (size_t t = 0; t < L; ++t)
      for (int64_t i = 0; i < sizes[t]; ++i) w[t][i] -= lr * out[t][i];
  }
  return error;
}

int compare(const char* a_path, const char* b_path) {
  auto load = [](const char* path) {
    std::ifstream f(path, std::ios::binary);
    std::vector<float> v;
    float x;
    while (f.read(reinterpret_cast<char*>(&x), sizeof x)) v.push_back(x);
    return v;
  };
  const std::vector<float> a = load(a_path), b = load(b_path);
  if (a.empty() || a.size() != b.size()) {
    std::printf("compare: %zu against %zu weights\n", a.size(), b.size());
    return 2;
  }
  size_t differ = 0;
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++differ;
    max_diff = std::max(max_diff, std::fabs(double(a[i]) - double(b[i])));
    max_abs = std::max(max_abs, std::fabs(double(a[i])));
  }
  std::printf("compare: %zu of %zu weights differ; largest difference %.3g (%.3g of the largest weight)\n", differ,
              a.size(), max_diff, max_abs > 0 ? max_diff / max_abs : 0.0);
  return differ == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "compare" && argc == 4) return compare(argv[2], argv[3]);
  if ((mode != "train" && mode != "expect_error") || argc < 3) {
    std::fprintf(stderr,
                 "usage: %s train WEIGHTS_OUT [STEPS] [MODEL] | expect_error TEXT [STEPS] [MODEL] | compare A B\n",
                 argv[0]);
    return 2;
  }
  const int steps = argc > 3 ? std::atoi(argv[3]) : 40;
  const std::string model = argc > 4 ? argv[4] : "base";
  if (mode == "expect_error") {
    const std::string expected = argv[2];
    std::string error;
    if (mgs_init() != MGS_SUCCESS) {
      error = mgs_last_error();
    } else {
      mgs_rank(&g_rank);
      std::vector<std::vector<float>> w;
      error = train(model, steps, &w);
    }
    int rank = g_rank;
    if (rank < 0) {  // init failed before the rank was known: Open MPI's variable says it
      const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
      rank = r ? std::atoi(r) : -1;
    }
    mgs_shutdown();
    if (error.find(expected) != std::string::npos) {
      std::printf("rank %d: expected error: %s\n", rank, error.c_str());
      return 0;
    }
    std::fprintf(stderr, "rank %d: expected an error containing '%s', got '%s'\n", rank, expected.c_str(),
                 error.c_str());
    return 1;
  }
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init failed: %s\n", mgs_last_error());
    return 1;
  }
  mgs_rank(&g_rank);
  mgs_size(&g_size);
  std::vector<std::vector<float>> w;
  const std::string error = train(model, steps, &w);
  EXPECT(error.empty(), "training failed: %s", error.c_str());
  // Every rank applied the same averaged gradients: the same weights.
  uint64_t hash = 1469598103934665603ull;
  for (const auto& layer : w) hash = fnv1a(layer.data(), layer.size() * sizeof(float), hash);
  const std::vector<int64_t> all = mpitest::gatherAll("hash", std::vector<int64_t>{int64_t(hash)}, MGS_INT64);
  for (int r = 1; r < g_size; ++r) EXPECT(all[r] == all[0], "rank %d's weights differ from rank 0's", r);
  mgs_stats_t st{};
  EXPECT_OK(mgs_get_stats(&st, sizeof st));
  if (g_rank == 0) {
    std::printf("weights fnv1a64 %016" PRIx64 "; plans %llu, buckets %llu, plan trials %llu\n", hash,
                (unsigned long long)st.plans, (unsigned long long)st.plan_buckets, (unsigned long long)st.plan_trials);
    std::ofstream f(argv[2], std::ios::binary | std::ios::trunc);
    for (const auto& layer : w) f.write(reinterpret_cast<const char*>(layer.data()), layer.size() * sizeof(float));
    EXPECT(f.good(), "could not write %s", argv[2]);
  }
  const int rc = mpitest::finish();
  mgs_shutdown();
  return rc;
}
