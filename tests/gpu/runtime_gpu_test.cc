// The runtime end to end with CUDA tensors: P = 2, 3, 4 ranks as threads of
// this process, each with its own Runtime over the thread communicator, all
// on device 0 (MGS_BACKEND=mpi: NCCL refuses two ranks on one GPU, so the
// compact blocks cross the host). The same job runs twice with the same
// gradients, once with CPU tensors and once with CUDA tensors; exact top-k
// selects the same entries either way, so every output of every rank and
// step, and every residual at the end, must be bitwise the same. Planned
// layer-wise (one tensor per bucket) and as one bucket (several CUDA members
// fused into one device slab), so that the plan does not depend on timings.
// Full build only (it needs the runtime); exits 77 without a GPU. Written
// after the first GPU runs (2026-11-26) and not yet run on a GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_main.h"
#include "thread_ranks.h"

namespace mgs {
namespace {

using test::cpuDesc;
using test::laplace;
using test::runRanks;
using test::waitRelease;

const std::vector<int64_t> kSizes = {3000, 1200, 5000};
constexpr int kSteps = 5;

struct RankRecord {
  std::vector<std::vector<std::vector<float>>> out;  // [step][tensor]
  std::vector<std::vector<float>> residual;          // [tensor], after the last step
  std::string error;
};


TensorDesc cudaDesc(void* data, int64_t n) {
  TensorDesc t = cpuDesc(data, MGS_FLOAT32, {n});
  t.device = 0;  // no stream or event: the runtime syncs the legacy stream, after our blocking copies
  return t;
}

Config sparseConfig(const std::string& planner) {
  Config c;
  c.compressor = "topk";
  c.density = 0.01;
  c.profile_steps = 2;
  c.min_sparse_elements = 1000;
  c.calibration = "off";
  c.dense_fallback = false;
  c.backend = "mpi";
  c.planner = planner;
  return c;
}

std::vector<RankRecord> run(int P, const Config& config, bool cuda) {
  std::vector<RankRecord> rec(P);
  runRanks(P, config, [&](Runtime& rt, int rank) {
    RankRecord& me = rec[rank];
    const size_t L = kSizes.size();
    std::vector<void*> din(L, nullptr), dout(L, nullptr);
    auto fail = [&](const std::string& what) {
      if (me.error.empty()) me.error = "rank " + std::to_string(rank) + ": " + what;
    };
    if (cuda)
      for (size_t t = 0; t < L; ++t)
        if (cudaMalloc(&din[t], 4 * kSizes[t]) != cudaSuccess || cudaMalloc(&dout[t], 4 * kSizes[t]) != cudaSuccess)
          fail("cudaMalloc");
    std::mt19937 rng(rank * 7919 + 1);
    me.out.resize(kSteps);
    for (int s = 0; s < kSteps && me.error.empty(); ++s) {
      std::vector<std::vector<float>> x(L), out(L);
      std::vector<uint64_t> ids(L, 0);
      for (size_t t = 0; t < L; ++t) {
        x[t].resize(kSizes[t]);
        for (auto& v : x[t]) v = laplace(rng);
        out[t].assign(kSizes[t], -7.0f);
      }
      for (size_t t = 0; t < L; ++t) {
        TensorDesc in, o;
        if (cuda) {
          if (cudaMemcpy(din[t], x[t].data(), 4 * kSizes[t], cudaMemcpyHostToDevice) != cudaSuccess ||
              cudaMemcpy(dout[t], out[t].data(), 4 * kSizes[t], cudaMemcpyHostToDevice) != cudaSuccess)
            fail("cudaMemcpy to the device");
          in = cudaDesc(din[t], kSizes[t]);
          o = cudaDesc(dout[t], kSizes[t]);
        } else {
          in = cpuDesc(x[t].data(), MGS_FLOAT32, {kSizes[t]});
          o = cpuDesc(out[t].data(), MGS_FLOAT32, {kSizes[t]});
        }
        const Status st =
            rt.enqueueAllreduce("t" + std::to_string(t), in, o, MGS_REDUCE_AVERAGE, 1, 1, MGS_FLAG_SPARSE_OK, &ids[t]);
        if (!st.ok()) fail("enqueue: " + st.toString());
      }
      for (size_t t = 0; t < L; ++t) {
        if (ids[t] == 0) continue;
        const Status st = waitRelease(rt, ids[t]);
        if (!st.ok()) fail("step " + std::to_string(s) + ": " + st.toString());
      }
      if (cuda)
        for (size_t t = 0; t < L; ++t)
          if (cudaMemcpy(out[t].data(), dout[t], 4 * kSizes[t], cudaMemcpyDeviceToHost) != cudaSuccess)
            fail("cudaMemcpy to the host");
      me.out[s] = std::move(out);
    }
    me.residual.resize(L);
    for (size_t t = 0; t < L; ++t) {
      me.residual[t].resize(kSizes[t]);
      rt.residuals().read("t" + std::to_string(t), me.residual[t].data(), kSizes[t]);
    }
    for (size_t t = 0; t < L; ++t) {
      cudaFree(din[t]);
      cudaFree(dout[t]);
    }
  });
  return rec;
}

}  // namespace

TEST_CASE("runtime with CUDA tensors, P ranks as threads on one GPU: bitwise the CPU tensors' run") {
  for (const char* planner : {"layerwise", "single"}) {
    for (int P : {2, 3, 4}) {
      INFO("planner " << planner << ", P = " << P);
      const Config c = sparseConfig(planner);
      const std::vector<RankRecord> cpu = run(P, c, false);
      const std::vector<RankRecord> gpu = run(P, c, true);
      for (int r = 0; r < P; ++r) {
        INFO("rank " << r << (gpu[r].error.empty() ? "" : ": " + gpu[r].error) << (cpu[r].error.empty() ? "" : " / CPU: " + cpu[r].error));
        REQUIRE(cpu[r].error.empty());
        REQUIRE(gpu[r].error.empty());
        size_t nonzero = 0;
        for (int s = 0; s < kSteps; ++s)
          for (size_t t = 0; t < kSizes.size(); ++t) {
            INFO("step " << s << ", tensor t" << t);
            REQUIRE(std::memcmp(gpu[r].out[s][t].data(), cpu[r].out[s][t].data(), 4 * kSizes[t]) == 0);
            for (float v : gpu[r].out[s][t]) nonzero += v != 0.0f;
          }
        for (size_t t = 0; t < kSizes.size(); ++t)
          REQUIRE(std::memcmp(gpu[r].residual[t].data(), cpu[r].residual[t].data(), 4 * kSizes[t]) == 0);
        REQUIRE(nonzero > 0);  // something was sent: the comparison is not of two empty results
      }
    }
  }
}

}  // namespace mgs

int main(int argc, char** argv) { return mgs::test::runGpuTests(argc, argv, "the runtime's CUDA tests"); }
