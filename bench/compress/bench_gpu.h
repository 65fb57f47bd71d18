// The CUDA half of mgs-bench-compress (bench_gpu.cc with CUDA, else a stub).
#pragma once

#include <string>
#include <vector>

namespace mgs::bench {

bool gpuAvailable();
// Times every selector on the device for x at density rho, with a
// device-to-device copy of x measured in the same run (2 read-equivalents).
// The residual starts as a nonzero Normal buffer (error feedback on); with
// inplace the residual already holds acc (x = nullptr). bandEps: the
// gaussiank/ldte band (the goal is [k, 1.03k]).
void runGpuSweep(const std::vector<std::string>& names, const std::string& dist, const std::vector<float>& x,
                 double rho, int reps, bool json, bool inplace, double bandEps = 0.1);

}  // namespace mgs::bench
