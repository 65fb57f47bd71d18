// The runtime end to end with CUDA tensors: P = 2, 3, 4 ranks as threads of
// this process, each with its own Runtime over the thread communicator, all
// on device 0 (MGS_BACKEND=mpi: NCCL refuses two ranks on one GPU, so the
// compact blocks cross the host). The same job runs twice with the same
// gradients, once with CPU tensors and once with CUDA tensors; exact top-k
// selects the same entries either way, so every output of every rank and
// step, and every residual at the end, must be bitwise the same. Planned
// layer-wise (one tensor per bucket) and as one bucket (several CUDA members
// fused into one device slab), so that the plan does not depend on timings.
// A second case runs the same job on MGS_BACKEND=nccl with the device thread
// communicator (src/comm/cuda_thread) standing for NCCL: device buckets and
// fused dense CUDA allreduces at P = 2..4 on one GPU.
// Full build only (it needs the runtime); exits 77 without a GPU. Written
// after the first GPU runs (2026-11-26) and not yet run on a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/cuda_thread/cuda_thread_communicator.h"
#include "common/check.h"
#include "gpu_main.h"
#include "thread_ranks.h"

namespace mgs {
namespace {

using test::cpuDesc;
using test::laplace;
using test::runRanks;
using test::waitRelease;

const std::vector<int64_t> kSizes = {3000, 1200, 5000};
// Small dense allreduces (no MGS_FLAG_SPARSE_OK), fused into one group.
const std::vector<int64_t> kDenseSizes = {17, 300, 64};
constexpr int kSteps = 5;

struct RankRecord {
  std::vector<std::vector<std::vector<float>>> out;    // [step][tensor]
  std::vector<std::vector<std::vector<float>>> dense;  // [step][dense tensor] (with_dense)
  std::vector<std::vector<float>> residual;            // [tensor], after the last step
  SparseStats sparse;
  uint64_t cuda_nccl_ops = 0, cuda_staged_ops = 0;
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

// dworld: the device thread communicator in place of NCCL (MGS_BACKEND=nccl
// in the config), else none. with_dense: small dense allreduces each step too.
std::vector<RankRecord> run(int P, const Config& config, bool cuda,
                            std::shared_ptr<CudaThreadWorld> dworld = nullptr, bool with_dense = false) {
  std::vector<RankRecord> rec(P);
  test::DeviceMaker device;
  if (dworld)
    device = [dworld](int rank, Communicator&, device::DeviceComm* out) {
      std::unique_ptr<CudaThreadCommunicator> c;
      MGS_RETURN_IF_ERROR(CudaThreadCommunicator::create(dworld, rank, &c));
      out->stream = c->stream();
      out->device = c->device();
      out->comm = std::move(c);
      return Status::OK();
    };
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
      // Small dense allreduces (fused by the executor), CUDA or host.
      const size_t D = with_dense ? kDenseSizes.size() : 0;
      std::vector<std::vector<float>> dx(D), dy(D);
      std::vector<void*> ddin(D, nullptr), ddout(D, nullptr);
      std::vector<uint64_t> dids(D, 0);
      for (size_t t = 0; t < D; ++t) {
        dx[t].resize(kDenseSizes[t]);
        for (auto& v : dx[t]) v = laplace(rng);
        dy[t].assign(kDenseSizes[t], -7.0f);
        TensorDesc in = cpuDesc(dx[t].data(), MGS_FLOAT32, {kDenseSizes[t]}), o = cpuDesc(dy[t].data(), MGS_FLOAT32, {kDenseSizes[t]});
        if (cuda) {
          if (cudaMalloc(&ddin[t], 4 * kDenseSizes[t]) != cudaSuccess || cudaMalloc(&ddout[t], 4 * kDenseSizes[t]) != cudaSuccess ||
              cudaMemcpy(ddin[t], dx[t].data(), 4 * kDenseSizes[t], cudaMemcpyHostToDevice) != cudaSuccess)
            fail("dense: cudaMalloc/cudaMemcpy");
          in = cudaDesc(ddin[t], kDenseSizes[t]);
          o = cudaDesc(ddout[t], kDenseSizes[t]);
        }
        const Status st = rt.enqueueAllreduce("d" + std::to_string(t), in, o, MGS_REDUCE_AVERAGE, 1, 1, 0, &dids[t]);
        if (!st.ok()) fail("dense enqueue: " + st.toString());
      }
      for (size_t t = 0; t < L; ++t) {
        if (ids[t] == 0) continue;
        const Status st = waitRelease(rt, ids[t]);
        if (!st.ok()) fail("step " + std::to_string(s) + ": " + st.toString());
      }
      for (size_t t = 0; t < D; ++t) {
        if (dids[t] == 0) continue;
        const Status st = waitRelease(rt, dids[t]);
        if (!st.ok()) fail("step " + std::to_string(s) + ", dense: " + st.toString());
        if (cuda && cudaMemcpy(dy[t].data(), ddout[t], 4 * kDenseSizes[t], cudaMemcpyDeviceToHost) != cudaSuccess)
          fail("dense: cudaMemcpy to the host");
        cudaFree(ddin[t]);
        cudaFree(ddout[t]);
      }
      if (with_dense) me.dense.push_back(std::move(dy));
      if (cuda)
        for (size_t t = 0; t < L; ++t)
          if (cudaMemcpy(out[t].data(), dout[t], 4 * kSizes[t], cudaMemcpyDeviceToHost) != cudaSuccess)
            fail("cudaMemcpy to the host");
      me.out[s] = std::move(out);
    }
    me.sparse = rt.sparseStats();
    const NegotiationStats ns = rt.negotiationStats();
    me.cuda_nccl_ops = ns.cuda_nccl_ops;
    me.cuda_staged_ops = ns.cuda_staged_ops;
    me.residual.resize(L);
    for (size_t t = 0; t < L; ++t) {
      me.residual[t].resize(kSizes[t]);
      rt.residuals().read("t" + std::to_string(t), me.residual[t].data(), kSizes[t]);
    }
    for (size_t t = 0; t < L; ++t) {
      cudaFree(din[t]);
      cudaFree(dout[t]);
    }
  }, nullptr, device);
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

TEST_CASE("runtime over the device thread communicator, P ranks on one GPU: device buckets, fused dense, bitwise") {
  // MGS_BACKEND=nccl with the device thread communicator standing for NCCL
  // (NCCL refuses two ranks on one device): sparse buckets of CUDA tensors
  // run as device buckets (the whole bucket enqueued), small dense CUDA
  // allreduces go fused through the device communicator. Sparse outputs and
  // residuals must be bitwise the CPU run's; the dense sums within float
  // rounding of it (the device scales with its own kernel); every sparse
  // bucket is counted on the device path, every dense op on the device
  // communicator, none staged. Written 2026-12-01: never run on a GPU.
  for (int P : {2, 3, 4}) {
    INFO("P = " << P);
    Config c = sparseConfig("layerwise");
    const std::vector<RankRecord> cpu = run(P, c, false, nullptr, true);
    c.backend = "nccl";
    const std::vector<RankRecord> gpu = run(P, c, true, std::make_shared<CudaThreadWorld>(P, 0, 60.0), true);
    for (int r = 0; r < P; ++r) {
      INFO("rank " << r << (gpu[r].error.empty() ? "" : ": " + gpu[r].error) << (cpu[r].error.empty() ? "" : " / CPU: " + cpu[r].error));
      REQUIRE(cpu[r].error.empty());
      REQUIRE(gpu[r].error.empty());
      for (int s = 0; s < kSteps; ++s) {
        for (size_t t = 0; t < kSizes.size(); ++t) {
          INFO("step " << s << ", tensor t" << t);
          REQUIRE(std::memcmp(gpu[r].out[s][t].data(), cpu[r].out[s][t].data(), 4 * kSizes[t]) == 0);
        }
        for (size_t t = 0; t < kDenseSizes.size(); ++t)
          for (int64_t i = 0; i < kDenseSizes[t]; ++i) {
            INFO("step " << s << ", dense d" << t << "[" << i << "]");
            const float a = gpu[r].dense[s][t][i], b = cpu[r].dense[s][t][i];
            REQUIRE(std::fabs(a - b) <= 1e-6f * std::max(1.0f, std::fabs(b)));
          }
      }
      for (size_t t = 0; t < kSizes.size(); ++t)
        REQUIRE(std::memcmp(gpu[r].residual[t].data(), cpu[r].residual[t].data(), 4 * kSizes[t]) == 0);
      const SparseStats& st = gpu[r].sparse;
      REQUIRE(st.buckets > 0);
      REQUIRE(st.path_buckets[static_cast<int>(BucketPath::kDevice)] == st.buckets + st.dense_buckets);
      REQUIRE(st.path_buckets[static_cast<int>(BucketPath::kStaged)] == 0);
      REQUIRE(gpu[r].cuda_staged_ops == 0);
      REQUIRE(gpu[r].cuda_nccl_ops >= static_cast<uint64_t>(kSteps) * kDenseSizes.size());
    }
  }
}

TEST_CASE("runtime over the device thread communicator: MGS_EXCHANGE=agreed runs as device buckets, bitwise") {
  // The agreed exchange's device bucket (the leader's block broadcast, the
  // values' allreduce with one verdict slot per rank, the verdict and the
  // scatter on the device) against the CPU agreed exchange: outputs and
  // residuals bitwise, every sparse bucket an agreed one on the device
  // path, none staged. Written 2026-12-01: never run on a GPU.
  for (int P : {2, 3, 4}) {
    INFO("P = " << P);
    Config c = sparseConfig("layerwise");
    c.exchange = "agreed";
    const std::vector<RankRecord> cpu = run(P, c, false);
    c.backend = "nccl";
    const std::vector<RankRecord> gpu = run(P, c, true, std::make_shared<CudaThreadWorld>(P, 0, 60.0));
    for (int r = 0; r < P; ++r) {
      INFO("rank " << r << (gpu[r].error.empty() ? "" : ": " + gpu[r].error) << (cpu[r].error.empty() ? "" : " / CPU: " + cpu[r].error));
      REQUIRE(cpu[r].error.empty());
      REQUIRE(gpu[r].error.empty());
      for (int s = 0; s < kSteps; ++s)
        for (size_t t = 0; t < kSizes.size(); ++t) {
          INFO("step " << s << ", tensor t" << t);
          REQUIRE(std::memcmp(gpu[r].out[s][t].data(), cpu[r].out[s][t].data(), 4 * kSizes[t]) == 0);
        }
      for (size_t t = 0; t < kSizes.size(); ++t)
        REQUIRE(std::memcmp(gpu[r].residual[t].data(), cpu[r].residual[t].data(), 4 * kSizes[t]) == 0);
      const SparseStats& st = gpu[r].sparse;
      REQUIRE(st.buckets > 0);
      REQUIRE(st.agreed_buckets == st.buckets);
      REQUIRE(cpu[r].sparse.agreed_buckets == cpu[r].sparse.buckets);
      REQUIRE(st.path_buckets[static_cast<int>(BucketPath::kDevice)] == st.buckets + st.dense_buckets);
      REQUIRE(st.path_buckets[static_cast<int>(BucketPath::kStaged)] == 0);
      REQUIRE(st.bytes_sent == cpu[r].sparse.bytes_sent);
    }
  }
}

TEST_CASE("runtime over the device thread communicator: dense fallback buckets run as device buckets, bitwise") {
  // Where the 1/P rule sends every bucket dense (MGS_DENSE_FALLBACK, density
  // * P >= 1): the fused acc and the verdict slots in one device allreduce,
  // the verdict and the outputs on the device, against the CPU dense
  // exchange: outputs bitwise (the same rank-order sum, the same float
  // product), residuals +0, every bucket dense and on the device path, none
  // staged. Written 2026-12-02: never run on a GPU.
  for (int P : {2, 3, 4}) {
    INFO("P = " << P);
    Config c = sparseConfig("layerwise");
    c.exchange = "auto";
    c.dense_fallback = true;
    c.density = 0.5;
    const std::vector<RankRecord> cpu = run(P, c, false);
    c.backend = "nccl";
    const std::vector<RankRecord> gpu = run(P, c, true, std::make_shared<CudaThreadWorld>(P, 0, 60.0));
    for (int r = 0; r < P; ++r) {
      INFO("rank " << r << (gpu[r].error.empty() ? "" : ": " + gpu[r].error) << (cpu[r].error.empty() ? "" : " / CPU: " + cpu[r].error));
      REQUIRE(cpu[r].error.empty());
      REQUIRE(gpu[r].error.empty());
      for (int s = 0; s < kSteps; ++s)
        for (size_t t = 0; t < kSizes.size(); ++t) {
          INFO("step " << s << ", tensor t" << t);
          REQUIRE(std::memcmp(gpu[r].out[s][t].data(), cpu[r].out[s][t].data(), 4 * kSizes[t]) == 0);
        }
      for (size_t t = 0; t < kSizes.size(); ++t)
        for (float v : gpu[r].residual[t]) REQUIRE(v == 0.0f);
      const SparseStats& st = gpu[r].sparse;
      REQUIRE(st.dense_buckets > 0);
      REQUIRE(st.buckets == 0);
      REQUIRE(cpu[r].sparse.dense_buckets == st.dense_buckets);
      REQUIRE(st.path_buckets[static_cast<int>(BucketPath::kDevice)] == st.dense_buckets);
      REQUIRE(st.path_buckets[static_cast<int>(BucketPath::kStaged)] == 0);
      REQUIRE(st.bytes_sent == cpu[r].sparse.bytes_sent);
    }
  }
}

TEST_CASE("runtime over the device thread communicator: MGS_EXCHANGE=hierarchical runs as device buckets, bitwise") {
  // Two nodes of two thread ranks (MGS_NODE_SIZE=2): the slots and the
  // node's sum, the leader's GPU selection, the leaders' allgather and the
  // node broadcast on communicators split from the device thread
  // communicator, the verdict and the scatter on the device; against the
  // CPU hierarchical exchange: outputs and residuals bitwise, every bucket on
  // the device path, none staged. Written 2026-12-02: never run on a GPU.
  const int P = 4;
  Config c = sparseConfig("layerwise");
  c.exchange = "hierarchical";
  c.node_size = 2;
  const std::vector<RankRecord> cpu = run(P, c, false);
  c.backend = "nccl";
  const std::vector<RankRecord> gpu = run(P, c, true, std::make_shared<CudaThreadWorld>(P, 0, 60.0));
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r << (gpu[r].error.empty() ? "" : ": " + gpu[r].error) << (cpu[r].error.empty() ? "" : " / CPU: " + cpu[r].error));
    REQUIRE(cpu[r].error.empty());
    REQUIRE(gpu[r].error.empty());
    for (int s = 0; s < kSteps; ++s)
      for (size_t t = 0; t < kSizes.size(); ++t) {
        INFO("step " << s << ", tensor t" << t);
        REQUIRE(std::memcmp(gpu[r].out[s][t].data(), cpu[r].out[s][t].data(), 4 * kSizes[t]) == 0);
      }
    for (size_t t = 0; t < kSizes.size(); ++t)
      REQUIRE(std::memcmp(gpu[r].residual[t].data(), cpu[r].residual[t].data(), 4 * kSizes[t]) == 0);
    const SparseStats& st = gpu[r].sparse;
    REQUIRE(st.buckets > 0);
    REQUIRE(st.path_buckets[static_cast<int>(BucketPath::kDevice)] == st.buckets + st.dense_buckets);
    REQUIRE(st.path_buckets[static_cast<int>(BucketPath::kStaged)] == 0);
    REQUIRE(st.bytes_sent == cpu[r].sparse.bytes_sent);
    REQUIRE(st.selected == cpu[r].sparse.selected);
  }
}

}  // namespace mgs

const char* const mgs::test::kGpuTestsWhat = "the runtime's CUDA tests";
