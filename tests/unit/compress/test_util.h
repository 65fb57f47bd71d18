// Helpers for the selector tests: synthetic gradients, one select() call
// with fresh buffers, and the checks every selector must pass.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/dtype.h"
#include "compress/selector.h"

namespace mgs::compress::test {

enum class Dist { kNormal, kLaplace, kStudentT3 };
inline const char* distName(Dist d) { return d == Dist::kNormal ? "normal" : d == Dist::kLaplace ? "laplace" : "t3"; }

inline std::vector<float> makeData(Dist d, size_t n, uint64_t seed, float scale = 1e-3f) {
  std::mt19937_64 g(seed);
  std::vector<float> x(n);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::exponential_distribution<double> expo(1.0);
  std::student_t_distribution<double> t3(3.0);
  std::bernoulli_distribution coin(0.5);
  for (auto& v : x) {
    double s = d == Dist::kNormal ? normal(g) : d == Dist::kLaplace ? (coin(g) ? 1 : -1) * expo(g) : t3(g);
    v = static_cast<float>(s * scale);
  }
  return x;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Run {
  Status status;
  SelectResult result;
  std::vector<float> acc;       // float(x) + old residual, computed by the test
  std::vector<float> residual;  // after select
  std::vector<float> values;
  std::vector<uint32_t> indices;
};

inline std::unique_ptr<Selector> makeSelector(const std::string& name, SelectorOptions o) {
  std::unique_ptr<Selector> s;
  Status st = Selector::create(name, o, &s);
  REQUIRE(st.ok());
  return s;
}

// One select() on f32 input x (nullptr: in place, the residual already holds
// acc) with residual r0; run.acc is the expected acc = x + r0.
inline Run runSelectRaw(const Selector& sel, const float* x, std::vector<float> r0, uint64_t step, const char* name) {
  const size_t n = r0.size();
  Run run;
  run.acc.resize(n);
  for (size_t i = 0; i < n; ++i) run.acc[i] = x ? x[i] + r0[i] : r0[i];
  run.residual = std::move(r0);
  const size_t cap = sel.maxCount(n);
  run.values.assign(cap + 1, -7.0f);  // +1 sentinel: overruns are caught below
  run.indices.assign(cap + 1, 0xDEADBEEFu);
  std::vector<std::max_align_t> ws(sel.workspaceBytes(n) / sizeof(std::max_align_t) + 1);
  SelectArgs a;
  a.x = x;
  a.residual = run.residual.data();
  a.n = n;
  a.outValues = run.values.data();
  a.outIndices = run.indices.data();
  a.workspace = ws.data();
  a.workspaceBytes = ws.size() * sizeof(std::max_align_t);
  a.step = step;
  a.name = name;
  run.status = sel.select(a, &run.result);
  REQUIRE(run.values[cap] == -7.0f);
  REQUIRE(run.indices[cap] == 0xDEADBEEFu);
  run.values.resize(run.result.count);
  run.indices.resize(run.result.count);
  return run;
}

// One select() on f32 input x with residual r0 (empty = zeros).
inline Run runSelect(const Selector& sel, const std::vector<float>& x, std::vector<float> r0 = {}, uint64_t step = 0,
                     const char* name = "bucket0") {
  if (r0.empty()) r0.assign(x.size(), 0.0f);
  return runSelectRaw(sel, x.data(), std::move(r0), step, name);
}

// sent + new residual == acc bit for bit; sent entries zeroed; indices
// strictly ascending (hence distinct) and in range.
inline void checkInvariant(const Run& run) {
  const size_t n = run.acc.size();
  std::vector<char> sent(n, 0);
  size_t badIndex = 0, badValue = 0, badKept = 0;
  for (size_t j = 0; j < run.indices.size(); ++j) {
    const uint32_t i = run.indices[j];
    if (i >= n || (j > 0 && run.indices[j - 1] >= i)) {
      ++badIndex;
      continue;
    }
    sent[i] = 1;
    if (bits(run.values[j]) != bits(run.acc[i]) || bits(run.residual[i]) != bits(0.0f)) ++badValue;
  }
  for (size_t i = 0; i < n; ++i)
    if (!sent[i] && bits(run.residual[i]) != bits(run.acc[i])) ++badKept;
  REQUIRE(badIndex == 0);  // in range, strictly ascending
  REQUIRE(badValue == 0);  // sent value == acc, residual zeroed
  REQUIRE(badKept == 0);   // unsent residual == acc
}

// min |sent| >= max |kept|.
inline void checkTopOrder(const Run& run) {
  float minSent = INFINITY, maxKept = 0;
  for (float v : run.values) minSent = std::min(minSent, std::fabs(v));
  for (float v : run.residual) maxKept = std::max(maxKept, std::fabs(v));
  if (!run.values.empty()) REQUIRE(minSent >= maxKept);
}

}  // namespace mgs::compress::test
