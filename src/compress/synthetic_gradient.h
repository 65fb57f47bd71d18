// The synthetic gradient calibration times selectors on (Laplace-like,
// scale 1e-3, a fixed linear congruential sequence): the CPU selector at
// init (core/calibration.cc) and the GPU selector at the first bucket of CUDA
// tensors (src/device/cuda/cuda_local_stage.cc) see the same values.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace mgs::compress {

inline void syntheticGradient(float* x, size_t n) {
  uint32_t seed = 12345;
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const double u = (seed >> 8) * (1.0 / 16777216.0) - 0.5;
    x[i] = static_cast<float>((u < 0 ? 1 : -1) * std::log(1 - 2 * std::fabs(u) + 1e-12) * 1e-3);
  }
}

}  // namespace mgs::compress
