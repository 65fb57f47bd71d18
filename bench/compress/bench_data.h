// Synthetic gradients and timing helpers for mgs-bench-compress.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace mgs::bench {

// Normal, Laplace or Student-t(3), scaled like gradients (1e-3). Generated in
// parallel blocks with per-block seeds, so 2^26 values take a second, not ten.
inline std::vector<float> makeGradients(const std::string& dist, size_t n, uint64_t seed) {
  std::vector<float> x(n);
  const size_t blocks = 64;
  auto fill = [&](size_t b0, size_t b1) {
    for (size_t b = b0; b < b1; ++b) {
      std::mt19937_64 g(seed * 1000003 + b);
      std::normal_distribution<float> normal(0, 1);
      std::exponential_distribution<float> expo(1);
      std::student_t_distribution<float> t3(3);
      const size_t lo = n * b / blocks, hi = n * (b + 1) / blocks;
      for (size_t i = lo; i < hi; ++i) {
        float v = dist == "laplace" ? ((g() & 1) ? expo(g) : -expo(g)) : dist == "t3" ? t3(g) : normal(g);
        x[i] = v * 1e-3f;
      }
    }
  };
  const unsigned t = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < t; ++i) pool.emplace_back(fill, blocks * i / t, blocks * (i + 1) / t);
  for (auto& th : pool) th.join();
  return x;
}

inline double nowMs() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace mgs::bench
