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
