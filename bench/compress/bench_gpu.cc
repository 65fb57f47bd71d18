// CUDA half of mgs-bench-compress. Times with cudaEvents on the default
// stream; select()'s own host syncs are inside the timed region, as a caller
// pays them.
#include "bench_gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "bench_data.h"
#include "bench_report.h"
#include "compress_kernels.h"
#include "gpu_selector.h"

namespace mgs::bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(3);
  }
}

template <typename F>
double timeMs(F f, int reps) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  std::vector<double> t;
  for (int i = 0; i <= reps; ++i) {
    f(false);  // untimed setup
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

}  // namespace

bool gpuAvailable() { return cuda::visibleDevices() > 0; }

void runGpuSweep(const std::vector<std::string>& names, const std::string& dist,
                 const std::vector<float>& x, double rho, int reps, bool json) {
  const size_t n = x.size();
  static const std::string dev = "cuda:" + deviceName();
  float *dx, *dr, *dy, *dv;
  uint32_t *di, *dkeys, *dsorted;
  check(cudaMalloc(reinterpret_cast<void**>(&dx), n * 4), "malloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dr), n * 4), "malloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dy), n * 4), "malloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dv), n * 4), "malloc");
  check(cudaMalloc(reinterpret_cast<void**>(&di), n * 4), "malloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dkeys), n * 4), "malloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dsorted), n * 4), "malloc");
  check(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice), "upload");

  auto copy = [&](bool timed) {
    if (timed) check(cudaMemcpyAsync(dy, dx, n * 4, cudaMemcpyDeviceToDevice, nullptr), "copy");
  };
  const double copyMs = timeMs<decltype(copy)>(copy, reps);

  size_t sortTemp = 0;
  check(static_cast<cudaError_t>(cuda::kernels::compressTempBytes(n, n, &sortTemp)), "temp");
  void* dtemp;
  check(cudaMalloc(&dtemp, sortTemp), "malloc");
  auto sort = [&](bool timed) {
    if (timed)
      check(static_cast<cudaError_t>(cuda::kernels::sampleKeysDescending(dx, 0, 1, n, dkeys, dsorted,
                                                                         dtemp, sortTemp, nullptr)),
            "radix sort");
  };
  const double sortMs = timeMs<decltype(sort)>(sort, std::min(reps, 3));

  for (const auto& name : names) {
    compress::SelectorOptions o;
    o.density = rho;
    std::unique_ptr<cuda::GpuSelector> sel;
    if (!cuda::GpuSelector::create(name, o, &sel).ok()) std::exit(2);
    size_t wsBytes = 0;
    if (!sel->workspaceBytes(n, &wsBytes).ok()) std::exit(2);
    void* dws;
    check(cudaMalloc(&dws, wsBytes), "malloc ws");
    compress::SelectArgs a;
    a.x = dx;
    a.residual = dr;
    a.n = n;
    a.outValues = dv;
    a.outIndices = di;
    a.workspace = dws;
    a.workspaceBytes = wsBytes;
    compress::SelectResult res;
    auto run = [&](bool timed) {
      if (!timed) {
        check(cudaMemsetAsync(dr, 0, n * 4, nullptr), "reset residual");
        return;
      }
      const Status st = sel->select(a, &res, nullptr);
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.toString().c_str());
        std::exit(2);
      }
    };
    Row row;
    row.ms = timeMs<decltype(run)>(run, reps);
    row.selector = name;
    row.device = dev;
    row.dist = dist;
    row.n = n;
    row.k = res.k;
    row.count = res.count;
    row.passes = res.passes;
    row.syncs = res.hostSyncs;
    row.copyMs = copyMs;
    row.baseline = "cub::DeviceRadixSort";
    row.baselineMs = sortMs;
    print(row, json);
    cudaFree(dws);
  }
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dr), static_cast<void*>(dy),
                  static_cast<void*>(dv), static_cast<void*>(di), static_cast<void*>(dkeys),
                  static_cast<void*>(dsorted), dtemp})
    cudaFree(p);
}

}  // namespace mgs::bench
