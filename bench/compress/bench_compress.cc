// mgs-bench-compress: time the selectors against one copy pass of the same
// buffer and against an exact top-k baseline, measured in the same run.
//   mgs-bench-compress --device cpu --selector ldte --n 16777216 --density 0.001 --json
//   mgs-bench-compress --sweep            (n = 2^16..2^26, rho 0.1% and 1%, all selectors)
//   mgs-bench-compress --inplace ...      (CPU: x = nullptr, the residual holds acc = x)
// One JSON object per measurement (--json), else a table. Fields:
//   selector device dist n k count count_err median_ms passes gbps copy_ms copy_ratio
//   baseline baseline_ms speedup inplace
// gbps: input bytes (n * 4) per second. copy_ms: one read+write pass of the
// same n floats (memcpy / cudaMemcpy D2D). copy_ratio = median_ms / copy_ms.
// baseline: CPU std::nth_element on |acc| (on a copy; the copy is not timed);
// GPU: CUB radix sort of the |acc| keys.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_data.h"
#include "bench_gpu.h"
#include "bench_report.h"
#include "compress/selector.h"

namespace mgs::bench {
namespace {

// CPU: select() from the same residual every repetition (restored untimed):
// zero with x as the gradient, or (inplace) x itself with SelectArgs::x null,
// as the runtime calls it after adding the gradient into the residual.
Row runCpu(const std::string& name, const std::string& dist, size_t n, double density, int reps,
           const std::vector<float>& x, int threads, bool inplace) {
  compress::SelectorOptions o;
  o.density = density;
  o.numThreads = threads;
  std::unique_ptr<compress::Selector> sel;
  Status st = compress::Selector::create(name, o, &sel);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.toString().c_str());
    std::exit(2);
  }
  std::vector<float> r(n), r0(inplace ? x : std::vector<float>(n, 0.0f)), values(sel->maxCount(n));
  std::vector<uint32_t> idx(values.size());
  std::vector<std::max_align_t> ws(sel->workspaceBytes(n) / sizeof(std::max_align_t) + 1);
  compress::SelectArgs a;
  a.x = inplace ? nullptr : x.data();
  a.residual = r.data();
  a.n = n;
  a.outValues = values.data();
  a.outIndices = idx.data();
  a.workspace = ws.data();
  a.workspaceBytes = ws.size() * sizeof(std::max_align_t);
  compress::SelectResult res;
  std::vector<double> t;
  for (int i = 0; i <= reps; ++i) {
    std::memcpy(r.data(), r0.data(), n * 4);
    const double t0 = nowMs();
    st = sel->select(a, &res);
    if (i > 0) t.push_back(nowMs() - t0);  // first run warms caches and pages
  }
  Row row;
  row.selector = name;
  row.device = "cpu";
  row.dist = dist;
  row.n = n;
  row.k = res.k;
  row.count = res.count;
  row.ms = median(t);
  row.passes = res.passes;
  row.inplace = inplace;
  return row;
}

double cpuCopyMs(const std::vector<float>& x, int reps) {
  std::vector<float> y(x.size());
  std::vector<double> t;
  for (int i = 0; i <= reps; ++i) {
    const double t0 = nowMs();
    std::memcpy(y.data(), x.data(), x.size() * 4);
    if (i > 0) t.push_back(nowMs() - t0);
  }
  return median(t);
}

double cpuNthElementMs(const std::vector<float>& x, size_t k, int reps) {
  std::vector<float> mag(x.size()), work(x.size());
  for (size_t i = 0; i < x.size(); ++i) mag[i] = std::fabs(x[i]);
  std::vector<double> t;
  for (int i = 0; i <= reps; ++i) {
    work = mag;
    const double t0 = nowMs();
    std::nth_element(work.begin(), work.begin() + (k - 1), work.end(), std::greater<float>());
    if (i > 0) t.push_back(nowMs() - t0);
  }
  return median(t);
}

}  // namespace
}  // namespace mgs::bench

int main(int argc, char** argv) {
  using namespace mgs::bench;
  CLI::App app{"mgs-bench-compress: selector throughput vs a copy pass and exact top-k"};
  std::string device = "cpu", selector = "all", dist = "normal";
  std::vector<size_t> ns = {size_t{1} << 24};
  std::vector<double> densities = {0.001};
  int reps = 5, threads = 0;
  bool json = false, sweep = false, inplace = false;
  app.add_option("--device", device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--selector", selector, "topk, gaussiank, ldte, dgc, randomk, none or all");
  app.add_option("--n", ns, "buffer sizes");
  app.add_option("--density", densities, "densities rho");
  app.add_option("--dist", dist, "normal, laplace or t3")->check(CLI::IsMember({"normal", "laplace", "t3"}));
  app.add_option("--reps", reps, "timed repetitions (median reported)");
  app.add_option("--threads", threads, "CPU threads (0: OpenMP default)");
  app.add_flag("--json", json, "one JSON object per line");
  app.add_flag("--inplace", inplace, "in-place mode (x = nullptr, the residual holds acc)");
  app.add_flag("--sweep", sweep, "n = 2^16..2^26 (x4), rho = 0.001 and 0.01");
  CLI11_PARSE(app, argc, argv);
  if (sweep) {
    ns.clear();
    for (int e = 16; e <= 26; e += 2) ns.push_back(size_t{1} << e);
    densities = {0.001, 0.01};
  }
  std::vector<std::string> names = {"topk", "gaussiank", "ldte", "dgc", "randomk", "none"};
  if (selector != "all") names = {selector};
  if (device == "cuda" && !gpuAvailable()) {
    std::fprintf(stderr, "mgs-bench-compress: --device cuda needs a build with CUDA and a visible GPU\n");
    return 77;
  }
  if (!json)
    std::printf("%-9s %-5s %-7s %9s %7s %7s %6s %9s %3s %7s %8s %6s %9s %7s\n", "selector", "dev", "dist", "n", "k",
                "count", "err", "ms", "ps", "GB/s", "copy_ms", "x_copy", "base_ms", "speedup");
  for (size_t n : ns) {
    const auto x = makeGradients(dist, n, 1);
    for (double rho : densities) {
      const size_t k = mgs::compress::kForDensity(n, rho);
      if (device == "cuda") {
        runGpuSweep(names, dist, x, rho, reps, json, inplace);
        continue;
      }
      const double copyMs = cpuCopyMs(x, reps);
      const double baseMs = cpuNthElementMs(x, k, std::min(reps, 3));
      for (const auto& name : names) {
        Row row = runCpu(name, dist, n, rho, reps, x, threads, inplace);
        row.copyMs = copyMs;
        row.baseline = "std::nth_element";
        row.baselineMs = baseMs;
        print(row, json);
      }
    }
  }
  return 0;
}
