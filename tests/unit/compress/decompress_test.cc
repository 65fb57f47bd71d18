// Sparse aggregation: duplicates across ranks add, variable counts (0
// included), the 1/P average, rank-order summation, bad indices.
#include <random>

#include "compress/decompress.h"
#include "test_util.h"

namespace mgs::compress::test {

TEST_CASE("scatterAdd: identical selections on P ranks sum and average", "[compress][decompress]") {
  const size_t P = GENERATE(size_t{1}, size_t{2}, size_t{3}, size_t{4});
  const size_t n = 1000;
  std::vector<float> vals, v = {0.5f, -1.0f, 2.0f};
  std::vector<uint32_t> idx, i = {3, 500, 999};
  std::vector<size_t> counts(P, 3);
  for (size_t r = 0; r < P; ++r) {
    vals.insert(vals.end(), v.begin(), v.end());
    idx.insert(idx.end(), i.begin(), i.end());
  }
  std::vector<float> out(n, 123.0f);
  REQUIRE(scatterAdd(vals.data(), idx.data(), counts.data(), P, n, 1.0f / P, out.data()).ok());
  REQUIRE(out[3] == Approx(0.5f));
  REQUIRE(out[500] == Approx(-1.0f));
  REQUIRE(out[999] == Approx(2.0f));
  REQUIRE(out[0] == 0.0f);
  REQUIRE(out[998] == 0.0f);
}

TEST_CASE("scatterAdd: variable counts and rank-order sums match a sequential loop bitwise", "[compress][decompress]") {
  const size_t n = 300000, P = 4;
  std::mt19937 g(3);
  std::uniform_int_distribution<uint32_t> pick(0, n - 1);
  std::normal_distribution<float> val(0, 1);
  std::vector<size_t> counts = {5000, 0, 12345, 1};
  std::vector<float> vals;
  std::vector<uint32_t> idx;
  for (size_t r = 0; r < P; ++r)
    for (size_t j = 0; j < counts[r]; ++j) {
      vals.push_back(val(g));
      idx.push_back(j % 7 == 0 ? static_cast<uint32_t>(j % 97) : pick(g));  // many duplicates
    }
  std::vector<float> ref(n, 0.0f);
  for (size_t j = 0; j < vals.size(); ++j) ref[idx[j]] += vals[j];
  for (auto& x : ref) x *= 0.25f;
  const int threads = GENERATE(1, 3);
  std::vector<float> out(n);
  REQUIRE(scatterAdd(vals.data(), idx.data(), counts.data(), P, n, 0.25f, out.data(), threads).ok());
  size_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff += bits(out[i]) != bits(ref[i]);
  REQUIRE(diff == 0);
}

TEST_CASE("scatterAdd: edge cases", "[compress][decompress]") {
  std::vector<size_t> zero = {0, 0};
  std::vector<float> out(10, 5.0f);
  REQUIRE(scatterAdd(nullptr, nullptr, zero.data(), 2, 10, 0.5f, out.data()).ok());
  for (float x : out) REQUIRE(bits(x) == bits(0.0f));
  REQUIRE(scatterAdd(nullptr, nullptr, zero.data(), 2, 0, 0.5f, nullptr).ok());
  float v = 1.0f;
  uint32_t bad = 10;
  size_t one = 1;
  const Status st = scatterAdd(&v, &bad, &one, 1, 10, 1.0f, out.data());
  REQUIRE(st.code() == Code::kInvalidArgument);
}

TEST_CASE("select then scatterAdd round-trips the sent values", "[compress][decompress]") {
  SelectorOptions o;
  o.density = 0.01;
  auto sel = makeSelector("ldte", o);
  const auto x = makeData(Dist::kLaplace, 100000, 8);
  Run run = runSelect(*sel, x);
  std::vector<float> dense(x.size());
  size_t count = run.result.count;
  REQUIRE(scatterAdd(run.values.data(), run.indices.data(), &count, 1, x.size(), 1.0f, dense.data()).ok());
  size_t diff = 0;
  for (size_t i = 0; i < x.size(); ++i) diff += bits(dense[i] + run.residual[i]) != bits(run.acc[i]);
  REQUIRE(diff == 0);
}

}  // namespace mgs::compress::test

namespace mgs::compress::test {

// The naive definition of the one scatter-add: zero, add every pair in rank
// order, then scale each touched entry once by its part's scale.
static std::vector<float> naiveParts(const std::vector<std::vector<float>>& vals,
                                     const std::vector<std::vector<uint32_t>>& idx, const std::vector<size_t>& offsets,
                                     const std::vector<float>& scales) {
  const size_t n = offsets.back();
  std::vector<float> out(n, 0.0f);
  std::vector<char> touched(n, 0);
  for (size_t r = 0; r < vals.size(); ++r)
    for (size_t j = 0; j < vals[r].size(); ++j) {
      out[idx[r][j]] += vals[r][j];
      touched[idx[r][j]] = 1;
    }
  for (size_t i = 0; i < n; ++i) {
    if (!touched[i]) continue;
    size_t m = 0;
    while (offsets[m + 1] <= i) ++m;
    if (scales[m] != 1.0f) out[i] *= scales[m];
  }
  return out;
}

TEST_CASE("scatterAddParts: parts with their own scales equal the naive loop bitwise, any thread count",
          "[compress][decompress]") {
  const int threads = GENERATE(1, 3);
  const size_t P = GENERATE(size_t{1}, size_t{3});
  // Parts of 0, 1, 5000 and 70000 elements (an empty part, one not a
  // multiple of 64, one spanning several thread slices).
  const std::vector<size_t> offsets = {0, 0, 1, 5001, 75001};
  const std::vector<float> scales = {2.0f, -0.5f, 1.0f, 0.25f};
  const size_t n = offsets.back();
  std::mt19937 rng(static_cast<unsigned>(P * 10 + threads));
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(n - 1));
  std::normal_distribution<float> g;
  std::vector<std::vector<float>> vals(P);
  std::vector<std::vector<uint32_t>> idx(P);
  for (size_t r = 0; r < P; ++r) {
    const size_t c = 3000 + 500 * r;
    for (size_t j = 0; j < c; ++j) {
      // Many duplicates: across ranks and within one rank's list.
      idx[r].push_back(j % 7 == 0 ? static_cast<uint32_t>(j % 64) : pick(rng));
      vals[r].push_back(j % 11 == 0 ? -0.0f : g(rng));
    }
  }
  idx[0][0] = 0;  // the one-element part is touched
  const auto want = naiveParts(vals, idx, offsets, scales);

  std::vector<std::vector<float>> parts(4);
  std::vector<float*> ptrs;
  for (size_t m = 0; m < 4; ++m) {
    parts[m].assign(offsets[m + 1] - offsets[m], 7.0f);  // garbage: must be overwritten
    ptrs.push_back(parts[m].data());
  }
  std::vector<RankPairs> pairs;
  for (size_t r = 0; r < P; ++r) pairs.push_back({vals[r].data(), idx[r].data(), vals[r].size()});
  ScatterOutput out;
  out.parts = ptrs.data();
  out.offsets = offsets.data();
  out.scales = scales.data();
  out.numParts = 4;
  std::vector<uint64_t> touched((n + 63) / 64, 0);
  REQUIRE(scatterAddParts(pairs.data(), P, out, touched.data(), threads).ok());
  size_t diff = 0;
  for (size_t m = 0; m < 4; ++m)
    for (size_t i = 0; i < parts[m].size(); ++i) diff += bits(parts[m][i]) != bits(want[offsets[m] + i]);
  REQUIRE(diff == 0);
  for (uint64_t w : touched) REQUIRE(w == 0);  // left zeroed for the next call

  // A bad index fails before anything is written.
  std::vector<float> before = parts[2];
  const uint32_t bad = static_cast<uint32_t>(n);
  const float one = 1.0f;
  const RankPairs badPairs = {&one, &bad, 1};
  const Status st = scatterAddParts(&badPairs, 1, out, touched.data(), threads);
  REQUIRE(st.code() == Code::kInvalidArgument);
  REQUIRE(st.message().find("index " + std::to_string(n)) != std::string::npos);
  REQUIRE(parts[2] == before);
}

TEST_CASE("scatterAdd: a negative scale leaves untouched entries +0 (as the CUDA kernel)", "[compress][decompress]") {
  const float v = 2.0f;
  const uint32_t i = 3;
  const size_t one = 1;
  std::vector<float> out(8, 1.0f);
  REQUIRE(scatterAdd(&v, &i, &one, 1, out.size(), -0.5f, out.data()).ok());
  for (size_t j = 0; j < out.size(); ++j) REQUIRE(bits(out[j]) == bits(j == i ? -1.0f : 0.0f));
}

}  // namespace mgs::compress::test
