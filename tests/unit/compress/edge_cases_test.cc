// Defined behaviour on degenerate input (algorithms.md section 11): n = 0 and
// 1, k >= n, all zeros, all equal, ties at the threshold, NaN and +-Inf, and
// half-precision input.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace mgs::compress::test {
namespace {
const char* kAll[] = {"topk", "gaussiank", "ldte", "dgc", "randomk", "none"};
}

TEST_CASE("edge: n = 0 selects nothing and touches nothing", "[compress][edge]") {
  for (const char* name : kAll) {
    auto sel = makeSelector(name, SelectorOptions{});
    SelectArgs a;  // every pointer null: n == 0 must not dereference
    SelectResult r;
    REQUIRE(sel->select(a, &r).ok());
    REQUIRE(r.count == 0);
    REQUIRE(r.k == 0);
    REQUIRE(sel->maxCount(0) == 0);
  }
}

TEST_CASE("edge: n = 1 and k >= n send everything", "[compress][edge]") {
  for (const char* name : kAll) {
    CAPTURE(name);
    SelectorOptions o;
    o.density = 0.001;
    auto sel = makeSelector(name, o);
    Run one = runSelect(*sel, {0.25f}, {0.5f});
    REQUIRE(one.result.count == 1);
    REQUIRE(one.values[0] == 0.75f);
    checkInvariant(one);
    o.density = 1.0;
    auto dense = makeSelector(name, o);
    const auto x = makeData(Dist::kNormal, 1000, 3);
    Run all = runSelect(*dense, x);
    REQUIRE(all.result.count == 1000);
    checkInvariant(all);
  }
}

TEST_CASE("edge: an all-zero buffer sends nothing (count 0 is legal)", "[compress][edge]") {
  for (const char* name : {"topk", "gaussiank", "ldte", "dgc"}) {
    CAPTURE(name);
    SelectorOptions o;
    o.density = 0.01;
    Run run = runSelect(*makeSelector(name, o), std::vector<float>(5000, 0.0f));
    REQUIRE(run.status.ok());
    REQUIRE(run.result.count == 0);
    checkInvariant(run);
  }
  // randomk picks positions, not values: it still sends k (zeros).
  SelectorOptions o;
  o.density = 0.01;
  Run rk = runSelect(*makeSelector("randomk", o), std::vector<float>(5000, 0.0f));
  REQUIRE(rk.result.count == 50);
  checkInvariant(rk);
}

TEST_CASE("edge: fewer nonzeros than k sends all nonzeros", "[compress][edge]") {
  std::vector<float> x(10000, 0.0f);
  x[3] = 1;
  x[700] = -2;
  x[9999] = 0.5f;
  for (const char* name : {"topk", "gaussiank", "ldte", "dgc"}) {
    CAPTURE(name);
    SelectorOptions o;
    o.density = 0.01;
    Run run = runSelect(*makeSelector(name, o), x);
    REQUIRE(run.result.count == 3);
    REQUIRE(run.indices == std::vector<uint32_t>{3, 700, 9999});
    checkInvariant(run);
  }
}

TEST_CASE("edge: all-equal buffers give exactly k, lowest indices first", "[compress][edge]") {
  const float v = GENERATE(0.5f, -0.25f);
  for (const char* name : {"topk", "gaussiank", "ldte", "dgc"}) {
    CAPTURE(name, v);
    SelectorOptions o;
    o.density = 0.01;
    Run run = runSelect(*makeSelector(name, o), std::vector<float>(10000, v));
    REQUIRE(run.result.count == 100);
    for (uint32_t j = 0; j < 100; ++j) REQUIRE(run.indices[j] == j);
    checkInvariant(run);
  }
}

TEST_CASE("edge: a tie block straddling k is cut in index order", "[compress][edge]") {
  // 50 large values, then 1000 copies of the next magnitude with mixed signs.
  std::vector<float> x = makeData(Dist::kNormal, 20000, 9, 1e-3f);
  for (int i = 0; i < 50; ++i) x[17000 + i * 50] = 1.0f + i;  // after the tie block
  for (int i = 0; i < 1000; ++i) x[i * 17 + 5] = (i % 2 ? 0.5f : -0.5f);
  for (const char* name : {"topk", "gaussiank", "ldte", "dgc"}) {
    CAPTURE(name);
    SelectorOptions o;
    o.density = 0.01;  // k = 200: 50 large + the first 150 of the tie block
    Run run = runSelect(*makeSelector(name, o), x);
    REQUIRE(run.result.count == 200);
    checkInvariant(run);
    checkTopOrder(run);
    size_t ties = 0;
    for (size_t j = 0; j < run.indices.size(); ++j)
      if (std::fabs(run.values[j]) == 0.5f) {
        REQUIRE(run.indices[j] == ties * 17 + 5);
        ++ties;
      }
    REQUIRE(ties == 150);
  }
}

TEST_CASE("edge: NaN and Inf are detected, reported and dropped from the residual", "[compress][edge][nonfinite]") {
  const float bad = GENERATE(std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity());
  auto x = makeData(Dist::kNormal, 4096, 1);
  x[100] = bad;
  x[3000] = bad;
  for (const char* name : kAll) {
    CAPTURE(name, bad);
    SelectorOptions o;
    o.density = 0.01;
    Run err = runSelect(*makeSelector(name, o), x, {}, 0, "layer4.weight+bias");
    REQUIRE(err.status.code() == Code::kNumeric);
    REQUIRE(err.status.message().find("layer4.weight+bias") != std::string::npos);
    REQUIRE(err.result.nonFinite == 2);
    REQUIRE(err.result.count == 0);
    size_t nf = 0;
    for (float r : err.residual) nf += !std::isfinite(r);
    REQUIRE(nf == 0);
    REQUIRE(err.residual[100] == 0.0f);
    REQUIRE(err.residual[5] == err.acc[5]);  // finite entries are kept

    o.nonFinite = NonFinitePolicy::kSkip;
    Run skip = runSelect(*makeSelector(name, o), x);
    REQUIRE(skip.status.ok());
    REQUIRE(skip.result.count == 0);
    REQUIRE(skip.result.nonFinite == 2);
    for (float r : skip.residual) REQUIRE(std::isfinite(r));

    o.nonFinite = NonFinitePolicy::kZero;
    Run zero = runSelect(*makeSelector(name, o), x);
    REQUIRE(zero.status.ok());
    REQUIRE(zero.result.count > 0);
    for (float v : zero.values) REQUIRE(std::isfinite(v));
    for (float r : zero.residual) REQUIRE(std::isfinite(r));
  }
}

TEST_CASE("edge: float16 and bfloat16 input accumulate into an fp32 residual", "[compress][edge][dtype]") {
  const auto dtype = GENERATE(MGS_FLOAT16, MGS_BFLOAT16);
  const size_t n = 50000;
  const auto xf = makeData(Dist::kLaplace, n, 4, 0.01f);
  std::vector<uint16_t> xh(n);
  std::vector<float> widened(n);
  for (size_t i = 0; i < n; ++i) {
    xh[i] = dtype == MGS_FLOAT16 ? floatToHalf(xf[i]) : floatToBfloat16(xf[i]);
    widened[i] = dtype == MGS_FLOAT16 ? halfToFloat(xh[i]) : bfloat16ToFloat(xh[i]);
  }
  const auto r0 = makeData(Dist::kNormal, n, 5, 1e-3f);
  for (const char* name : {"topk", "ldte", "gaussiank"}) {
    CAPTURE(name, dtype);
    SelectorOptions o;
    o.density = 0.01;
    auto sel = makeSelector(name, o);
    // Reference: the same selector on the widened f32 input.
    Run ref = runSelect(*sel, widened, r0);
    std::vector<float> r = r0, values(sel->maxCount(n));
    std::vector<uint32_t> idx(values.size());
    std::vector<std::max_align_t> ws(sel->workspaceBytes(n) / sizeof(std::max_align_t) + 1);
    SelectArgs a;
    a.x = xh.data();
    a.dtype = dtype;
    a.residual = r.data();
    a.n = n;
    a.outValues = values.data();
    a.outIndices = idx.data();
    a.workspace = ws.data();
    a.workspaceBytes = ws.size() * sizeof(std::max_align_t);
    SelectResult res;
    REQUIRE(sel->select(a, &res).ok());
    idx.resize(res.count);
    REQUIRE(idx == ref.indices);
    size_t diff = 0;
    for (size_t i = 0; i < n; ++i) diff += bits(r[i]) != bits(ref.residual[i]);
    REQUIRE(diff == 0);
  }
}

TEST_CASE("edge: bad arguments are errors, not crashes", "[compress][edge]") {
  auto sel = makeSelector("topk", SelectorOptions{});
  std::vector<float> x(100, 1.0f), r(100, 0.0f), v(100);
  std::vector<uint32_t> idx(100);
  SelectArgs a;
  a.x = x.data();
  a.residual = r.data();
  a.n = 100;
  a.outValues = v.data();
  a.outIndices = idx.data();
  SelectResult res;
  REQUIRE(sel->select(a, &res).code() == Code::kInvalidArgument);  // no workspace
  a.dtype = MGS_INT32;
  REQUIRE(sel->select(a, &res).code() == Code::kInvalidArgument);
}

}  // namespace mgs::compress::test
