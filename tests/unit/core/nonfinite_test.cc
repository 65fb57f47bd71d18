#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "core/nonfinite.h"

using namespace mgs;

TEST_CASE("fuseIntoFloat equals the in-place add bit for bit and counts NaN/Inf", "[nonfinite]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> g;
  for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}}) {
    for (double prescale : {1.0, 0.37}) {
      std::vector<float> x(n), r(n);
      for (size_t i = 0; i < n; ++i) {
        x[i] = g(rng) * 1e3f;
        r[i] = g(rng) * 1e-4f;  // |x| >> |r|: acc - x would not give r back
      }
      const std::vector<float> r_old = r;
      std::vector<float> in_place = r, out(n, -1.0f);
      addIntoFloat(x.data(), MGS_FLOAT32, n, prescale, false, in_place.data());
      CHECK(fuseIntoFloat(x.data(), MGS_FLOAT32, n, prescale, r.data(), out.data()) == 0);
      CHECK((n == 0 || std::memcmp(out.data(), in_place.data(), n * sizeof(float)) == 0));
      CHECK((n == 0 || std::memcmp(r.data(), r_old.data(), n * sizeof(float)) == 0));  // the residual is untouched
      // Without a base: the overwrite form.
      std::vector<float> over(n), out2(n);
      addIntoFloat(x.data(), MGS_FLOAT32, n, prescale, true, over.data());
      CHECK(fuseIntoFloat(x.data(), MGS_FLOAT32, n, prescale, nullptr, out2.data()) == 0);
      CHECK((n == 0 || std::memcmp(out2.data(), over.data(), n * sizeof(float)) == 0));
    }
  }
  // 16-bit inputs over several conversion chunks: the same bits as addIntoFloat.
  for (DataType dt : {MGS_FLOAT16, MGS_BFLOAT16}) {
    const size_t n = 3000;
    std::vector<uint16_t> h(n);
    std::vector<float> r(n), in_place, out(n);
    for (size_t i = 0; i < n; ++i) {
      const float v = g(rng);
      h[i] = dt == MGS_FLOAT16 ? floatToHalf(v) : floatToBfloat16(v);
      r[i] = g(rng) * 1e-3f;
    }
    in_place = r;
    addIntoFloat(h.data(), dt, n, 0.5, false, in_place.data());
    CHECK(fuseIntoFloat(h.data(), dt, n, 0.5, r.data(), out.data()) == 0);
    CHECK((n == 0 || std::memcmp(out.data(), in_place.data(), n * sizeof(float)) == 0));
  }
  // NaN, +-Inf in x, and a finite sum that overflows.
  std::vector<float> x(40, 1.0f), r(40, 0.5f), out(40);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[10] = std::numeric_limits<float>::infinity();
  x[39] = -std::numeric_limits<float>::infinity();
  x[20] = std::numeric_limits<float>::max();
  r[20] = std::numeric_limits<float>::max();
  CHECK(fuseIntoFloat(x.data(), MGS_FLOAT32, x.size(), 1.0, r.data(), out.data()) == 4);
  // f16 and bf16 inputs: 0x7c00 is +Inf, 0x7fc0 a bf16 NaN.
  const std::vector<uint16_t> h = {0x3c00, 0x7c00, 0x0000}, b = {0x3f80, 0x7fc0, 0x7f80};
  std::vector<float> o(3);
  CHECK(fuseIntoFloat(h.data(), MGS_FLOAT16, 3, 1.0, nullptr, o.data()) == 1);
  CHECK(o[0] == 1.0f);
  CHECK(fuseIntoFloat(b.data(), MGS_BFLOAT16, 3, 1.0, nullptr, o.data()) == 2);
}

TEST_CASE("countNonFinite and fillNaN for every floating dtype", "[nonfinite]") {
  const std::vector<float> f = {1, std::numeric_limits<float>::infinity(), 0, std::nanf("")};
  CHECK(countNonFinite(f.data(), MGS_FLOAT32, f.size()) == 2);
  const std::vector<double> d = {1, -std::numeric_limits<double>::infinity(), 3};
  CHECK(countNonFinite(d.data(), MGS_FLOAT64, d.size()) == 1);
  const std::vector<uint16_t> h = {0x3c00, 0x7e00, 0xfc00, 0x7bff};  // 1, NaN, -Inf, max finite
  CHECK(countNonFinite(h.data(), MGS_FLOAT16, h.size()) == 2);
  const std::vector<int32_t> i = {0x7f800000, 1};  // integers are never non-finite
  CHECK(countNonFinite(i.data(), MGS_INT32, i.size()) == 0);

  std::vector<float> out(5, 1.0f);
  fillNaN(out.data(), MGS_FLOAT32, out.size());
  for (float v : out) CHECK(std::isnan(v));
  std::vector<double> od(3, 1.0);
  fillNaN(od.data(), MGS_FLOAT64, od.size());
  for (double v : od) CHECK(std::isnan(v));
  std::vector<uint16_t> oh(3, 0), ob(3, 0);
  fillNaN(oh.data(), MGS_FLOAT16, oh.size());
  fillNaN(ob.data(), MGS_BFLOAT16, ob.size());
  for (uint16_t v : oh) CHECK(std::isnan(halfToFloat(v)));
  for (uint16_t v : ob) CHECK(std::isnan(bfloat16ToFloat(v)));
}
