// The single-pass CPU path (selector.cc): a sample of acc fixes a candidate
// floor tc, one fused pass writes the residual and lists every finite entry
// with key >= tc, and the threshold search runs over that list. Each branch
// is forced here: the candidate path itself (passes == 1), the fallback to
// full histogram passes when the sample overestimates tc, the overflow
// fallback (adversarial data and a capped region size), an estimate above tc,
// thread-count independence and the in-place mode (SelectArgs::x == nullptr).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "compress/cpu_passes.h"
#include "compress/selector_plan.h"
#include "test_util.h"

namespace mgs::compress::test {
namespace {

// Whether index i of an n-buffer is read by the sample (cpu::sampleKeys).
bool inSample(size_t i, size_t n) {
  if (n <= cpu::kSampleMax) return true;
  const size_t step = n / (cpu::kSampleMax / cpu::kSampleBlock);
  return i % step < cpu::kSampleBlock && i / step < cpu::kSampleMax / cpu::kSampleBlock;
}

// x = scaleIn * N(0,1) where the sample looks and scaleOut * N(0,1) elsewhere.
std::vector<float> splitData(size_t n, float scaleIn, float scaleOut, uint64_t seed) {
  auto x = makeData(Dist::kNormal, n, seed, 1.0f);
  for (size_t i = 0; i < n; ++i) x[i] *= inSample(i, n) ? scaleIn : scaleOut;
  return x;
}

// One select() in place: the residual holds acc, x is null.
Run runInplace(const Selector& sel, const std::vector<float>& acc) {
  return runSelectRaw(sel, nullptr, acc, 0, "inplace");
}

std::vector<uint32_t> allBits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bits(v[i]);
  return b;
}

// Bitwise the same selection, residual and statistics.
void requireSame(const Run& a, const Run& b) {
  REQUIRE(a.status.code() == b.status.code());
  REQUIRE(a.result.count == b.result.count);
  REQUIRE(bits(a.result.threshold) == bits(b.result.threshold));
  REQUIRE(a.result.inBand == b.result.inBand);
  REQUIRE(a.result.exact == b.result.exact);
  REQUIRE(a.result.mean == b.result.mean);
  REQUIRE(a.result.stddev == b.result.stddev);
  REQUIRE(a.result.maxAbs == b.result.maxAbs);
  REQUIRE(a.indices == b.indices);
  REQUIRE(allBits(a.values) == allBits(b.values));
  REQUIRE(allBits(a.residual) == allBits(b.residual));
}

// The documented guarantees of each selector (as in selector_test.cc).
void checkGuarantees(const std::string& name, const Run& run) {
  REQUIRE(run.status.ok());
  checkInvariant(run);
  const size_t k = run.result.k, count = run.result.count;
  if (name == "topk") {
    REQUIRE(count == k);
    REQUIRE(run.result.exact);
    checkTopOrder(run);
  } else if (name == "gaussiank" || name == "ldte") {
    REQUIRE(count >= k);
    REQUIRE(count <= static_cast<size_t>(std::floor(1.1 * k)));
    checkTopOrder(run);
  } else if (name == "dgc") {
    REQUIRE(count <= k);
    REQUIRE(count >= static_cast<size_t>(std::ceil(0.8 * k)));
    checkTopOrder(run);
  } else if (name == "randomk") {
    REQUIRE(count == k);
  }
}

// The exact top-k of |acc| with ties by lower index, ascending.
std::vector<uint32_t> referenceTopk(const std::vector<float>& acc, size_t k) {
  std::vector<uint32_t> order(acc.size());
  std::iota(order.begin(), order.end(), 0u);
  auto mag = [&](uint32_t i) { return std::isfinite(acc[i]) ? std::fabs(acc[i]) : 0.0f; };
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(),
                   [&](uint32_t a, uint32_t b) { return mag(a) != mag(b) ? mag(a) > mag(b) : a < b; });
  std::vector<uint32_t> ref(order.begin(), order.begin() + k);
  std::sort(ref.begin(), ref.end());
  return ref;
}

// Sets the candidate region cap for one scope.
struct CapLimit {
  explicit CapLimit(size_t cap) { cpu::testCandidateCapLimit = cap; }
  ~CapLimit() { cpu::testCandidateCapLimit = 0; }
};

const char* kMagnitude[] = {"topk", "gaussiank", "ldte", "dgc"};

}  // namespace

TEST_CASE("candidates: one full pass on ordinary data", "[compress][candidates]") {
  const auto dist = GENERATE(Dist::kNormal, Dist::kLaplace, Dist::kStudentT3);
  const auto rho = GENERATE(0.01, 0.001);
  const size_t n = (size_t{1} << 21) + 5;
  const auto x = makeData(dist, n, 21);
  for (const char* name : {"topk", "gaussiank", "ldte", "dgc", "randomk"}) {
    CAPTURE(distName(dist), rho, name);
    SelectorOptions o;
    o.density = rho;
    Run run = runSelect(*makeSelector(name, o), x);
    checkGuarantees(name, run);
    REQUIRE(run.result.passes == 1);
    if (std::string(name) == "topk") REQUIRE(run.indices == referenceTopk(run.acc, run.result.k));
    if (std::string(name) == "randomk") {
      // The hash-key candidates give randomk's documented set: the k largest keys.
      std::vector<uint32_t> order(n);
      std::iota(order.begin(), order.end(), 0u);
      const uint64_t seed = stepSeed(o.seed, 0);
      auto key = [&](uint32_t i) { return randomKey(seed, i); };
      std::nth_element(order.begin(), order.begin() + (run.result.k - 1), order.end(),
                       [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
      std::vector<uint32_t> ref(order.begin(), order.begin() + run.result.k);
      std::sort(ref.begin(), ref.end());
      REQUIRE(run.indices == ref);
      CapLimit limit(1);
      requireSame(run, runSelect(*makeSelector(name, o), x));
    }
  }
}

TEST_CASE("candidates: a sample that overestimates falls back to full passes", "[compress][candidates]") {
  // The sample sees only large values, so tc sits above the k-th largest key
  // of the buffer: the search has to move below tc.
  const size_t n = size_t{1} << 20;
  const auto x = splitData(n, 1.0f, 1e-3f, 5);
  const auto rho = GENERATE(0.01, 0.001);
  for (const char* name : kMagnitude) {
    CAPTURE(rho, name);
    SelectorOptions o;
    o.density = rho;
    auto sel = makeSelector(name, o);
    Run run = runSelect(*sel, x);
    checkGuarantees(name, run);
    REQUIRE(run.result.passes >= 3);  // fused pass + histogram pass(es) + compaction
    if (std::string(name) == "topk") REQUIRE(run.indices == referenceTopk(run.acc, run.result.k));
    CapLimit limit(1);  // the same search from the same lo, all full passes
    requireSame(run, runSelect(*sel, x));
  }
}

TEST_CASE("candidates: an overflowing candidate list falls back with the same result", "[compress][candidates]") {
  const auto rho = GENERATE(0.01, 0.001);
  const size_t n = (size_t{1} << 20) + 3;
  SECTION("adversarial data: the sample sees only small values") {
    const auto x = splitData(n, 1e-3f, 1.0f, 6);
    for (const char* name : kMagnitude) {
      CAPTURE(rho, name);
      SelectorOptions o;
      o.density = rho;
      o.numThreads = 2;
      Run run = runSelect(*makeSelector(name, o), x);
      checkGuarantees(name, run);
      REQUIRE(run.result.passes >= 3);
      if (std::string(name) == "topk") REQUIRE(run.indices == referenceTopk(run.acc, run.result.k));
      o.numThreads = 1;
      requireSame(run, runSelect(*makeSelector(name, o), x));
    }
  }
  SECTION("ordinary data, capped regions") {
    const auto x = makeData(Dist::kStudentT3, n, 8);
    const size_t cap = GENERATE(size_t{1}, size_t{100});
    for (const char* name : kMagnitude) {
      CAPTURE(rho, name, cap);
      SelectorOptions o;
      o.density = rho;
      auto sel = makeSelector(name, o);
      Run fast = runSelect(*sel, x);
      REQUIRE(fast.result.passes == 1);
      CapLimit limit(cap);
      Run slow = runSelect(*sel, x);
      REQUIRE(slow.result.passes >= 3);
      requireSame(fast, slow);
      checkGuarantees(name, slow);
    }
  }
}

TEST_CASE("candidates: an estimate far above tc stops at tc on the way down", "[compress][candidates]") {
  // A few huge outliers inflate the standard deviation and mean |acc|: the
  // first window lies far above the bulk, and the search moves down to tc.
  const size_t n = size_t{1} << 20;
  auto x = makeData(Dist::kNormal, n, 9);
  for (size_t i : {size_t{77}, size_t{5000}, size_t{400000}}) x[i] = 1e6f;
  for (const char* name : {"topk", "gaussiank", "ldte"}) {
    CAPTURE(name);
    SelectorOptions o;
    o.density = 0.001;
    auto sel = makeSelector(name, o);
    Run run = runSelect(*sel, x);
    checkGuarantees(name, run);
    REQUIRE(run.result.passes == 1);
    CapLimit limit(1);
    requireSame(run, runSelect(*sel, x));
  }
}

TEST_CASE("candidates: bitwise the same for any thread count", "[compress][candidates]") {
  const auto name = GENERATE(as<std::string>{}, "topk", "gaussiank", "ldte", "dgc", "randomk");
  const auto dist = GENERATE(Dist::kNormal, Dist::kStudentT3);
  const auto rho = GENERATE(0.01, 0.001);
  const size_t n = (size_t{1} << 20) + 3;
  const auto x = makeData(dist, n, 31);
  const auto r0 = makeData(Dist::kLaplace, n, 32);
  CAPTURE(name, distName(dist), rho);
  SelectorOptions o;
  o.density = rho;
  o.numThreads = 1;
  Run one = runSelect(*makeSelector(name, o), x, r0, 4);
  checkGuarantees(name, one);
  for (int t : {2, 3, 7}) {
    CAPTURE(t);
    o.numThreads = t;
    Run many = runSelect(*makeSelector(name, o), x, r0, 4);
    requireSame(one, many);
    REQUIRE(one.result.passes == many.result.passes);
  }
}

TEST_CASE("in-place mode (x == nullptr) equals the accumulating call", "[compress][inplace]") {
  const auto name = GENERATE(as<std::string>{}, "topk", "gaussiank", "ldte", "dgc", "randomk", "none");
  const auto n = GENERATE(size_t{1}, size_t{1000}, size_t{65537}, (size_t{1} << 20) + 3);
  const auto rho = GENERATE(0.01, 0.001);
  const auto dtype = GENERATE(MGS_FLOAT32, MGS_FLOAT16);
  CAPTURE(name, n, rho, dtypeName(dtype));
  SelectorOptions o;
  o.density = rho;
  auto sel = makeSelector(name, o);
  const auto xf = makeData(Dist::kStudentT3, n, 41);
  const auto r0 = makeData(Dist::kNormal, n, 42);
  // Accumulating call on x (f32, or f16 bytes), residual r0.
  std::vector<uint16_t> xh(n);
  for (size_t i = 0; i < n; ++i) xh[i] = floatToHalf(xf[i]);
  Run ref;
  ref.residual = r0;
  ref.acc.resize(n);
  for (size_t i = 0; i < n; ++i) ref.acc[i] = (dtype == MGS_FLOAT16 ? halfToFloat(xh[i]) : xf[i]) + r0[i];
  const size_t cap = sel->maxCount(n);
  ref.values.resize(cap);
  ref.indices.resize(cap);
  std::vector<std::max_align_t> ws(sel->workspaceBytes(n) / sizeof(std::max_align_t) + 1);
  SelectArgs a;
  a.x = dtype == MGS_FLOAT16 ? static_cast<const void*>(xh.data()) : xf.data();
  a.dtype = dtype;
  a.residual = ref.residual.data();
  a.n = n;
  a.outValues = ref.values.data();
  a.outIndices = ref.indices.data();
  a.workspace = ws.data();
  a.workspaceBytes = ws.size() * sizeof(std::max_align_t);
  ref.status = sel->select(a, &ref.result);
  REQUIRE(ref.status.ok());
  ref.values.resize(ref.result.count);
  ref.indices.resize(ref.result.count);
  checkInvariant(ref);
  // In place on the same acc.
  Run in = runInplace(*sel, ref.acc);
  checkInvariant(in);
  requireSame(ref, in);
  REQUIRE(ref.result.passes == in.result.passes);
}

TEST_CASE("candidates never hold NaN or Inf", "[compress][candidates]") {
  const size_t n = size_t{1} << 20;
  auto x = makeData(Dist::kStudentT3, n, 51);
  // In the sample (0, 1) and outside it (5000, 700001).
  x[0] = NAN;
  x[1] = INFINITY;
  x[5000] = -INFINITY;
  x[700001] = NAN;
  REQUIRE(inSample(0, n));
  REQUIRE(!inSample(5000, n));
  for (const char* name : kMagnitude) {
    CAPTURE(name);
    SelectorOptions o;
    o.density = 0.001;
    o.nonFinite = NonFinitePolicy::kZero;
    Run run = runSelect(*makeSelector(name, o), x);
    REQUIRE(run.status.ok());
    REQUIRE(run.result.nonFinite == 4);
    auto finite = [](const std::vector<float>& v) {
      return std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); });
    };
    REQUIRE(finite(run.values));
    REQUIRE(finite(run.residual));
    if (std::string(name) == "topk") REQUIRE(run.indices == referenceTopk(run.acc, run.result.k));
    // The in-place call on the same acc agrees (the residual holds the NaNs).
    Run in = runInplace(*makeSelector(name, o), run.acc);
    REQUIRE(in.indices == run.indices);
    REQUIRE(allBits(in.residual) == allBits(run.residual));
    o.nonFinite = NonFinitePolicy::kError;
    Run err = runSelect(*makeSelector(name, o), x);
    REQUIRE(err.status.code() == Code::kNumeric);
    REQUIRE(finite(err.residual));
  }
}

}  // namespace mgs::compress::test

namespace mgs::compress::test {

// dgc is left out: its strided sample's capacity (dgcSampleCapacity) follows
// the stride plan and is not monotone in n (a known limitation, not the
// candidate list's).
TEST_CASE("workspaceBytes never shrinks as n grows", "[compress][candidates]") {
  for (const char* name : {"topk", "gaussiank", "ldte", "randomk", "none"}) {
    for (double rho : {0.5, 0.03, 0.01, 0.001, 0.0001}) {
      for (int threads : {1, 2, 5}) {
        CAPTURE(name, rho, threads);
        SelectorOptions o;
        o.density = rho;
        o.numThreads = threads;
        auto sel = makeSelector(name, o);
        size_t prev = 0, bad = 0;
        for (size_t n = 1; n < (size_t{1} << 24); n = n * 5 / 4 + 1) {
          const size_t b = sel->workspaceBytes(n);
          bad += b < prev;
          prev = b;
        }
        REQUIRE(bad == 0);
      }
    }
  }
}

}  // namespace mgs::compress::test

namespace mgs::compress::test {

TEST_CASE("the AVX2 and the baseline fused pass give bitwise the same result", "[compress][candidates]") {
  // On a machine without AVX2 both runs take the baseline path (still equal).
  const auto name = GENERATE(as<std::string>{}, "topk", "gaussiank", "ldte", "dgc", "randomk", "none");
  const auto rho = GENERATE(0.1, 0.001);
  const size_t n = (size_t{1} << 20) + 13;
  auto x = makeData(Dist::kStudentT3, n, 61);
  const auto r0 = makeData(Dist::kNormal, n, 62, 1e-4f);
  x[12345] = NAN;
  CAPTURE(name, rho);
  SelectorOptions o;
  o.density = rho;
  o.nonFinite = NonFinitePolicy::kZero;
  auto sel = makeSelector(name, o);
  Run fast = runSelect(*sel, x, r0);
  cpu::testForceBaseline = true;
  Run base = runSelect(*sel, x, r0);
  Run baseInplace = runInplace(*sel, base.acc);
  cpu::testForceBaseline = false;
  REQUIRE(fast.result.nonFinite == 1);
  requireSame(fast, base);
  REQUIRE(baseInplace.indices == base.indices);
  REQUIRE(allBits(baseInplace.residual) == allBits(base.residual));
}

}  // namespace mgs::compress::test
