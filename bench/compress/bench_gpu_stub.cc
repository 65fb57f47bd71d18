// Build without CUDA: the device path is unavailable.
#include "bench_gpu.h"

namespace mgs::bench {
bool gpuAvailable() { return false; }
void runGpuSweep(const std::vector<std::string>&, const std::string&, const std::vector<float>&, double, int, bool,
                 bool, double) {}
}  // namespace mgs::bench
