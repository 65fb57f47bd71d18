// mgs-bench-compress-gpu: the GPU half of mgs-bench-compress without CLI11,
// for GPU machines that lack its development files (scripts/gpu_check.sh).
//   mgs-bench-compress-gpu [--n N] [--density R ...] [--reps K] [--dist D]
//                          [--selector S ...] [--band-eps E] [--inplace]
// Prints one JSON object per measurement. Exits 77 without a visible GPU.
// Ran on an H100 (2026-11-26, scripts/gpu_check.sh).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_data.h"
#include "bench_gpu.h"

int main(int argc, char** argv) {
  using namespace mgs::bench;
  size_t n = 25600000;  // ResNet-50's gradient, about
  std::vector<double> densities;
  std::vector<std::string> names;
  std::string dist = "t3";
  int reps = 10;
  double bandEps = 0.03;  // the goal band [k, 1.03k]
  bool inplace = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mgs-bench-compress-gpu: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto more = [&]() { return i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0; };
    if (a == "--n") {
      n = std::strtoull(next(), nullptr, 10);
    } else if (a == "--density") {
      do densities.push_back(std::atof(next()));
      while (more());
    } else if (a == "--selector") {
      do names.push_back(next());
      while (more());
    } else if (a == "--reps") {
      reps = std::atoi(next());
    } else if (a == "--dist") {
      dist = next();
    } else if (a == "--band-eps") {
      bandEps = std::atof(next());
    } else if (a == "--inplace") {
      inplace = true;
    } else {
      std::fprintf(stderr, "mgs-bench-compress-gpu: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (densities.empty()) densities = {0.001, 0.01};
  if (names.empty()) names = {"topk", "gaussiank", "ldte", "dgc"};
  if (dist != "normal" && dist != "laplace" && dist != "t3") {
    std::fprintf(stderr, "mgs-bench-compress-gpu: --dist must be normal, laplace or t3\n");
    return 2;
  }
  if (!gpuAvailable()) {
    std::fprintf(stderr, "mgs-bench-compress-gpu: no CUDA device visible\n");
    return 77;
  }
  const auto x = makeGradients(dist, n, 1);
  for (double rho : densities) runGpuSweep(names, dist, x, rho, reps, true, inplace, bandEps);
  return 0;
}
