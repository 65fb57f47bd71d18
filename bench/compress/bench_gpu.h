// The CUDA half of mgs-bench-compress (bench_gpu.cc with CUDA, else a stub).
#pragma once

#include <string>
#include <vector>

namespace mgs::bench {

bool gpuAvailable();
// Times every selector on the device for x at density rho, with the copy pass
// (cudaMemcpy D2D) and a CUB radix sort of the keys measured in the same run.
void runGpuSweep(const std::vector<std::string>& names, const std::string& dist,
                 const std::vector<float>& x, double rho, int reps, bool json);

}  // namespace mgs::bench
