// Every selector on Normal, Laplace and Student-t(3) data over sizes and
// densities: the residual invariant and each selector's count guarantee.
#include <cmath>

#include "compress/selector_plan.h"
#include "test_util.h"

namespace mgs::compress::test {
namespace {

void checkSelector(const std::string& name, const Run& run, size_t n, double rho, const SelectorOptions& o) {
  REQUIRE(run.status.ok());
  checkInvariant(run);
  const size_t k = kForDensity(n, rho);
  const size_t count = run.result.count;
  REQUIRE(run.result.k == k);
  REQUIRE(run.result.nonFinite == 0);
  if (name == "none" || k >= n) {
    REQUIRE(count == n);
  } else if (name == "topk") {
    REQUIRE(count == k);
    REQUIRE(run.result.exact);
    checkTopOrder(run);
  } else if (name == "gaussiank" || name == "ldte") {
    REQUIRE(count >= k);
    REQUIRE(count <= static_cast<size_t>(std::floor((1 + o.bandEps) * k)));
    REQUIRE(run.result.inBand);
    checkTopOrder(run);  // a threshold selector sends everything above its threshold
  } else if (name == "dgc") {
    REQUIRE(count <= k);
    REQUIRE(count >= static_cast<size_t>(std::ceil(0.8 * k)));
    checkTopOrder(run);
  } else if (name == "randomk") {
    REQUIRE(count == k);
  }
}

}  // namespace

TEST_CASE("selectors: invariant and counts over distributions, sizes and densities", "[compress][selector]") {
  const auto name = GENERATE(as<std::string>{}, "topk", "gaussiank", "ldte", "dgc", "randomk", "none");
  const auto dist = GENERATE(Dist::kNormal, Dist::kLaplace, Dist::kStudentT3);
  const auto rho = GENERATE(0.1, 0.01, 0.001);
  const auto n = GENERATE(size_t{1}, size_t{2}, size_t{17}, size_t{1000}, size_t{65537}, (size_t{1} << 20) + 3);
  SelectorOptions o;
  o.density = rho;
  auto sel = makeSelector(name, o);
  CAPTURE(name, distName(dist), rho, n);
  const auto x = makeData(dist, n, 1234 + n);
  // Second step with the residual of the first: error feedback in action.
  Run first = runSelect(*sel, x, {}, 0);
  checkSelector(name, first, n, rho, o);
  const auto x2 = makeData(dist, n, 99 + n);
  Run second = runSelect(*sel, x2, first.residual, 1);
  checkSelector(name, second, n, rho, o);
}

TEST_CASE("selectors: band and exactness at 2^22", "[compress][selector][large]") {
  const auto name = GENERATE(as<std::string>{}, "topk", "gaussiank", "ldte", "dgc");
  const auto dist = GENERATE(Dist::kNormal, Dist::kLaplace, Dist::kStudentT3);
  const size_t n = size_t{1} << 22;
  const double rho = 0.001;
  SelectorOptions o;
  o.density = rho;
  auto sel = makeSelector(name, o);
  CAPTURE(name, distName(dist));
  Run run = runSelect(*sel, makeData(dist, n, 7));
  checkSelector(name, run, n, rho, o);
  // accumulate + at most 3 histogram passes + compaction for the closed-form seeds
  if (name != "dgc") REQUIRE(run.result.passes <= 5);
}

TEST_CASE("topk equals std::nth_element's top-k set", "[compress][selector]") {
  const auto dist = GENERATE(Dist::kNormal, Dist::kLaplace, Dist::kStudentT3);
  const size_t n = 100003;
  SelectorOptions o;
  o.density = 0.01;
  auto sel = makeSelector("topk", o);
  const auto x = makeData(dist, n, 5);
  Run run = runSelect(*sel, x);
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  const size_t k = run.result.k;
  // |x| descending, lower index first among ties: the documented order.
  auto cmp = [&](uint32_t a, uint32_t b) {
    const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa != fb ? fa > fb : a < b;
  };
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), cmp);
  std::vector<uint32_t> ref(order.begin(), order.begin() + k);
  std::sort(ref.begin(), ref.end());
  REQUIRE(run.indices == ref);
}

TEST_CASE("exactTrim makes gaussiank and ldte return exactly k", "[compress][selector]") {
  const auto name = GENERATE(as<std::string>{}, "gaussiank", "ldte");
  SelectorOptions o;
  o.density = 0.001;
  o.exactTrim = true;
  auto sel = makeSelector(name, o);
  Run run = runSelect(*sel, makeData(Dist::kStudentT3, 300000, 3));
  REQUIRE(run.result.count == run.result.k);
  checkInvariant(run);
  checkTopOrder(run);
}

TEST_CASE("randomk: same seed and step give the same indices on any data", "[compress][selector][randomk]") {
  SelectorOptions o;
  o.density = 0.01;
  o.seed = 42;
  auto a = makeSelector("randomk", o);
  o.numThreads = 1;  // a rank with another thread count must agree
  auto b = makeSelector("randomk", o);
  const size_t n = 200001;
  Run r1 = runSelect(*a, makeData(Dist::kNormal, n, 1), {}, 17);
  Run r2 = runSelect(*b, makeData(Dist::kLaplace, n, 2), {}, 17);
  REQUIRE(r1.result.count == r1.result.k);
  REQUIRE(r1.indices == r2.indices);
  Run r3 = runSelect(*a, makeData(Dist::kNormal, n, 1), {}, 18);
  REQUIRE(r3.indices != r1.indices);
  o.seed = 43;
  auto c = makeSelector("randomk", o);
  Run r4 = runSelect(*c, makeData(Dist::kNormal, n, 1), {}, 17);
  REQUIRE(r4.indices != r1.indices);
  // Roughly uniform: the mean index is near n/2 (k = 2000, sd of mean ~ n/155).
  double mean = 0;
  for (auto i : r1.indices) mean += i;
  mean /= r1.indices.size();
  REQUIRE(std::fabs(mean - n / 2.0) < n * 0.03);
}

TEST_CASE("selectors: result does not depend on the thread count", "[compress][selector]") {
  const auto name = GENERATE(as<std::string>{}, "topk", "gaussiank", "ldte", "dgc", "randomk");
  const auto x = makeData(Dist::kStudentT3, 123457, 11);
  SelectorOptions o;
  o.density = 0.01;
  o.numThreads = 1;
  Run one = runSelect(*makeSelector(name, o), x);
  o.numThreads = 3;
  Run three = runSelect(*makeSelector(name, o), x);
  REQUIRE(one.indices == three.indices);
  REQUIRE(one.result.threshold == three.result.threshold);
  REQUIRE(one.result.mean == three.result.mean);  // chunk-order sums, not thread order
}

TEST_CASE("parse names and k", "[compress][selector]") {
  SelectorKind kind;
  for (const char* n : {"none", "topk", "gaussiank", "ldte", "dgc", "randomk"}) {
    REQUIRE(parseSelectorKind(n, &kind).ok());
    REQUIRE(std::string(selectorName(kind)) == n);
  }
  const Status bad = parseSelectorKind("top-k", &kind);
  REQUIRE(bad.code() == Code::kInvalidArgument);
  REQUIRE(bad.message().find("top-k") != std::string::npos);
  std::unique_ptr<Selector> s;
  SelectorOptions o;
  o.density = 0;
  REQUIRE(Selector::create("topk", o, &s).code() == Code::kInvalidArgument);
  REQUIRE(kForDensity(0, 0.1) == 0);
  REQUIRE(kForDensity(5, 0.1) == 1);
  REQUIRE(kForDensity(1000, 0.001) == 1);
  REQUIRE(kForDensity(1000, 0.01) == 10);
  REQUIRE(kForDensity(10, 1.0) == 10);
  REQUIRE(normalQuantileAbs(0.0005) == Approx(3.2905267).epsilon(1e-7));
  REQUIRE(normalQuantileAbs(0.005) == Approx(2.5758293).epsilon(1e-7));
}

}  // namespace mgs::compress::test

namespace mgs::compress::test {

TEST_CASE("error feedback loses nothing over many steps", "[compress][selector]") {
  // sum of everything sent + the final residual == sum of all gradients
  // (up to fp32 rounding of the running sums): the residual is the only
  // place unsent mass goes.
  const auto name = GENERATE(as<std::string>{}, "topk", "gaussiank", "ldte", "dgc", "randomk");
  const size_t n = 20011, steps = 30;
  SelectorOptions o;
  o.density = 0.01;
  auto sel = makeSelector(name, o);
  std::vector<double> sentSum(n, 0.0), gradSum(n, 0.0);
  std::vector<float> r(n, 0.0f);
  for (size_t s = 0; s < steps; ++s) {
    const auto x = makeData(s % 2 ? Dist::kLaplace : Dist::kStudentT3, n, 1000 + s);
    for (size_t i = 0; i < n; ++i) gradSum[i] += x[i];
    Run run = runSelect(*sel, x, r, s);
    REQUIRE(run.status.ok());
    checkInvariant(run);
    for (size_t j = 0; j < run.indices.size(); ++j) sentSum[run.indices[j]] += run.values[j];
    r = run.residual;
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(sentSum[i] + r[i] - gradSum[i]));
  REQUIRE(worst < 1e-7);  // values ~1e-3..1e-1, 30 fp32 adds
}

}  // namespace mgs::compress::test
