// CUDA half of mgs-bench-compress. Ran on an H100 (2026-11-26); the A/B of
// the two launch shapes (2026-11-27) has not run yet.
// Times GpuSelector::enqueue() with cudaEvents on one stream: the call makes
// no host sync, so the time is the device's. Each repetition restores the
// residual (untimed) so that every timed call sees the same data.
#include "bench_gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "bench_data.h"
#include "bench_report.h"
#include "gpu_selector.h"
#include "select_kernels.h"

namespace mgs::bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "mgs-bench-compress (cuda): %s: %s\n", what, cudaGetErrorString(e));
    std::exit(3);
  }
}

template <typename F>
double timeMs(F f, int reps) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  std::vector<double> t;
  for (int i = 0; i <= reps; ++i) {  // the first run warms up and is dropped
    f(false);
    check(cudaEventRecord(a, nullptr), "record");
    f(true);
    check(cudaEventRecord(b, nullptr), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    if (i > 0) t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

std::string deviceName() {
  cudaDeviceProp p{};
  int d = 0;
  cudaGetDevice(&d);
  cudaGetDeviceProperties(&p, d);
  return p.name;
}

template <typename T>
T* devAlloc(size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}

}  // namespace

bool gpuAvailable() { return cuda::visibleDevices() > 0; }

void runGpuSweep(const std::vector<std::string>& names, const std::string& dist, const std::vector<float>& x,
                 double rho, int reps, bool json, bool inplace, double bandEps) {
  const size_t n = x.size();
  static const std::string dev = "cuda:" + deviceName();
  // Residual of a previous step: Normal, 10x smaller than the gradient.
  std::vector<float> r0 = makeGradients("normal", n, 7);
  for (auto& v : r0) v *= 0.1f;
  if (inplace)
    for (size_t i = 0; i < n; ++i) r0[i] += x[i];
  float* dx = devAlloc<float>(n);
  float* dr0 = devAlloc<float>(n);
  float* dr = devAlloc<float>(n);
  float* dy = devAlloc<float>(n);
  check(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice), "upload x");
  check(cudaMemcpy(dr0, r0.data(), n * 4, cudaMemcpyHostToDevice), "upload r");
  auto copy = [&](bool timed) {
    if (timed) check(cudaMemcpyAsync(dy, dx, n * 4, cudaMemcpyDeviceToDevice, nullptr), "copy");
  };
  const double copyMs = timeMs(copy, reps);

  uint32_t* dcount = devAlloc<uint32_t>(1);
  int32_t* dfail = devAlloc<int32_t>(1);
  auto* dinfo = devAlloc<cuda::DeviceSelectInfo>(1);
  for (const auto& name : names) {
    compress::SelectorOptions o;
    o.density = rho;
    o.bandEps = bandEps;
    std::unique_ptr<cuda::GpuSelector> sel;
    if (!cuda::GpuSelector::create(name, o, &sel).ok()) std::exit(2);
    size_t wsBytes = 0;
    if (!sel->workspaceBytes(n, &wsBytes).ok()) std::exit(2);
    const size_t cap = std::max<size_t>(sel->maxCount(n), 1);
    void* dws = devAlloc<char>(wsBytes);
    float* dv = devAlloc<float>(cap);
    uint32_t* di = devAlloc<uint32_t>(cap);
    compress::SelectArgs a;
    a.x = inplace ? nullptr : dx;
    a.residual = dr;
    a.n = n;
    a.outValues = dv;
    a.outIndices = di;
    a.workspace = dws;
    a.workspaceBytes = wsBytes;
    a.name = "bench";
    auto run = [&](bool timed) {
      if (!timed) {
        check(cudaMemcpyAsync(dr, dr0, n * 4, cudaMemcpyDeviceToDevice, nullptr), "reset residual");
        return;
      }
      const Status st = sel->enqueue(a, cuda::DeviceSelectOutputs{dcount, dfail, dinfo}, nullptr);
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.toString().c_str());
        std::exit(2);
      }
    };
    // Both launch shapes in the same run: the default (one cooperative launch
    // for the passes, a compaction grid sized to the list) and the per-pass
    // shapes that ran on an H100. Same bits (tests/gpu), so the same count.
    std::vector<uint32_t> firstIdx;
    for (const bool perPass : {true, false}) {
      cuda::kernels::setPerPassLaunchesForTesting(perPass);
      Row row;
      row.ms = timeMs(run, reps);
      cuda::kernels::setPerPassLaunchesForTesting(false);
      cuda::DeviceSelectInfo info{};
      check(cudaMemcpy(&info, dinfo, sizeof(info), cudaMemcpyDeviceToHost), "info");
      if (info.failure != 0) {
        std::fprintf(stderr, "%s: device failure code %d\n", name.c_str(), info.failure);
        std::exit(2);
      }
      std::vector<uint32_t> idx(info.count);
      if (info.count) check(cudaMemcpy(idx.data(), di, info.count * 4, cudaMemcpyDeviceToHost), "indices");
      if (perPass) {
        firstIdx = idx;
      } else if (idx != firstIdx) {
        std::fprintf(stderr, "%s: the launch shapes selected different entries (%zu vs %zu)\n", name.c_str(),
                     idx.size(), firstIdx.size());
        std::exit(2);
      }
      row.selector = name;
      row.device = dev;
      row.dist = dist;
      row.n = n;
      row.k = info.k;
      row.count = info.count;
      row.passes = info.passes;
      row.syncs = 0;  // enqueue() makes none
      row.inplace = inplace;
      row.copyMs = copyMs;
      row.baseline = "cudaMemcpy D2D";
      row.baselineMs = copyMs;
      row.launches = perPass ? "per-pass" : "one-launch";
      print(row, json);
    }
    for (void* p : {dws, static_cast<void*>(dv), static_cast<void*>(di)}) cudaFree(p);
  }
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dr0), static_cast<void*>(dr), static_cast<void*>(dy),
                  static_cast<void*>(dcount), static_cast<void*>(dfail), static_cast<void*>(dinfo)})
    cudaFree(p);
}

}  // namespace mgs::bench
