// A tiny harness for tests that run under mpirun: every rank runs the same
// scenario; EXPECT records failures (never aborts, so ranks cannot diverge
// into a hang); finish() sums failures over ranks and sets the exit code.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mgs/mgs.h"

namespace mpitest {

inline int g_failures = 0;
inline int g_rank = -1;

#define EXPECT(cond, ...)                                                                                         \
  do {                                                                                                            \
    if (!(cond)) {                                                                                                \
      ++::mpitest::g_failures;                                                                                    \
      std::fprintf(stderr, "[rank %d] %s:%d: EXPECT(%s) failed: ", ::mpitest::g_rank, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                                          \
      std::fprintf(stderr, "\n");                                                                                 \
    }                                                                                                             \
  } while (0)

#define EXPECT_OK(call) EXPECT((call) == MGS_SUCCESS, "%s -> %s", #call, mgs_last_error())

inline mgs_tensor_t cpuTensor(void* data, mgs_dtype_t dtype, const std::vector<int64_t>& shape) {
  mgs_tensor_t t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  t.shape = shape.data();
  t.device = MGS_DEVICE_CPU;
  return t;
}

// This rank's residual of `name` (zeros when it has none; *has says which).
inline std::vector<float> residualOf(const std::string& name, size_t n, bool* has = nullptr) {
  std::vector<float> r(n, 0.0f);
  const bool ok = mgs_residual_copy(name.c_str(), r.data(), n) == MGS_SUCCESS;
  if (!ok) std::fill(r.begin(), r.end(), 0.0f);
  if (has) *has = ok;
  return r;
}

// `v` (the same length on every rank) from every rank, rank-major, through
// mgs's own allgather.
template <typename T>
std::vector<T> gatherAll(const std::string& name, const std::vector<T>& v, mgs_dtype_t dtype = MGS_FLOAT32) {
  int size = 1;
  EXPECT_OK(mgs_size(&size));
  std::vector<int64_t> shape{1, static_cast<int64_t>(v.size())};
  mgs_tensor_t t = cpuTensor(const_cast<T*>(v.data()), dtype, shape);
  mgs_handle_t h = 0;
  std::vector<T> all(v.size() * static_cast<size_t>(size));
  EXPECT_OK(mgs_allgather_async(name.c_str(), &t, &h));
  EXPECT_OK(mgs_wait(h));
  std::vector<int64_t> oshape{size, static_cast<int64_t>(v.size())};
  mgs_tensor_t o = cpuTensor(all.data(), dtype, oshape);
  EXPECT_OK(mgs_allgather_copy_output(h, &o));
  mgs_release(h);
  return all;
}

// Deterministic Laplace-like gradient values.
inline float gradValue(uint64_t seed) {
  seed = (seed + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  seed ^= seed >> 31;
  const double u = ((seed >> 11) * (1.0 / 9007199254740992.0)) - 0.5;
  return static_cast<float>((u < 0 ? 1 : -1) * std::log(1 - 2 * std::fabs(u) + 1e-12) * 1e-2);
}
// This rank's gradient value i of tensor t at `step`.
inline float stepGrad(int step, size_t t, int64_t i) {
  return gradValue((uint64_t(step) << 40) ^ (uint64_t(g_rank) << 32) ^ (uint64_t(t) << 24) ^ uint64_t(i));
}

// One step's tensors: x[t] this rank's gradients (stepGrad), out[t] filled
// with -1 (an output never written shows), before[t] for a residual
// snapshot, shapes[t] and h[t] for the enqueue.
struct StepTensors {
  std::vector<std::vector<float>> x, out, before;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<mgs_handle_t> h;
  StepTensors(const std::vector<int64_t>& sizes, int step)
      : x(sizes.size()), out(sizes.size()), before(sizes.size()), shapes(sizes.size()), h(sizes.size()) {
    for (size_t t = 0; t < sizes.size(); ++t) {
      x[t].resize(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i) x[t][i] = stepGrad(step, t, i);
      out[t].assign(sizes[t], -1.0f);
      shapes[t] = {sizes[t]};
    }
  }
};

// Sum of failures over all ranks (through mgs itself); 0 means success.
inline int finish() {
  int64_t total = g_failures;
  std::vector<int64_t> shape{1};
  mgs_tensor_t t = cpuTensor(&total, MGS_INT64, shape);
  mgs_handle_t h = 0;
  if (mgs_allreduce_async("mpitest.failures", &t, &t, MGS_REDUCE_SUM, 1, 1, 0, &h) != MGS_SUCCESS ||
      mgs_wait(h) != MGS_SUCCESS) {
    std::fprintf(stderr, "[rank %d] could not gather failure counts: %s\n", g_rank, mgs_last_error());
    return 1;
  }
  mgs_release(h);
  if (g_rank == 0) std::printf("%s: %lld failure(s) across ranks\n", total ? "FAILED" : "PASSED", (long long)total);
  return total ? 1 : 0;
}

}  // namespace mpitest
