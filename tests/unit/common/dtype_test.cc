#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype.h"

TEST_CASE("half conversion round-trips every finite half exactly", "[dtype]") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    if ((bits & 0x7c00) == 0x7c00) continue;  // Inf/NaN checked below
    const float f = mgs::halfToFloat(bits);
    INFO("half bits " << h);
    REQUIRE(mgs::floatToHalf(f) == bits);
  }
  CHECK(std::isinf(mgs::halfToFloat(0x7c00)));
  CHECK(std::isnan(mgs::halfToFloat(0x7e00)));
  CHECK(mgs::floatToHalf(1e6f) == 0x7c00);                   // overflow -> +Inf
  CHECK(mgs::floatToHalf(1.0f + 1.0f / 4096) == 0x3c00);     // below half an ulp: rounds down
  CHECK(mgs::floatToHalf(1.0f + 3.0f / 2048) == 0x3c02);     // tie -> even
  CHECK(mgs::halfToFloat(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
}

TEST_CASE("bfloat16 conversion rounds to nearest even", "[dtype]") {
  CHECK(mgs::bfloat16ToFloat(mgs::floatToBfloat16(1.0f)) == 1.0f);
  CHECK(mgs::floatToBfloat16(1.0f + 1.0f / 256) == 0x3f80);  // tie, even stays
  CHECK(mgs::floatToBfloat16(1.0f + 3.0f / 256) == 0x3f82);  // tie, rounds up to even
  CHECK(std::isnan(mgs::bfloat16ToFloat(mgs::floatToBfloat16(NAN))));
}

TEST_CASE("scaleHost truncates integers and scales floats", "[dtype]") {
  int32_t i[3] = {7, -7, 10};
  mgs::scaleHost(i, MGS_INT32, 3, 0.5);
  CHECK(i[0] == 3);
  CHECK(i[1] == -3);
  CHECK(i[2] == 5);
  double d[2] = {1.5, -2};
  mgs::scaleHost(d, MGS_FLOAT64, 2, 2.0);
  CHECK(d[0] == 3.0);
  CHECK(d[1] == -4.0);
  CHECK(mgs::dtypeSize(MGS_BFLOAT16) == 2);
  CHECK(mgs::dtypeName(static_cast<mgs_dtype_t>(99)) == "invalid(99)");
}

TEST_CASE("integer scaling saturates instead of overflowing", "[dtype]") {
  // Found by fuzz_abi: an int allreduce with a huge postscale factor converted
  // an out-of-range double to an integer (undefined behaviour).
  int32_t i32[3] = {1000, -1000, 7};
  mgs::scaleHost(i32, MGS_INT32, 3, 1e300);
  CHECK(i32[0] == std::numeric_limits<int32_t>::max());
  CHECK(i32[1] == std::numeric_limits<int32_t>::min());
  int64_t i64[2] = {3, -3};
  mgs::scaleHost(i64, MGS_INT64, 2, 1e300);
  CHECK(i64[0] == std::numeric_limits<int64_t>::max());
  CHECK(i64[1] == std::numeric_limits<int64_t>::min());
  uint8_t u8[2] = {200, 3};
  mgs::scaleHost(u8, MGS_UINT8, 2, -2.0);
  CHECK(u8[0] == 0);
  mgs::scaleHost(i32, MGS_INT32, 3, std::nan(""));
  CHECK(i32[2] == 0);
  int32_t exact[2] = {7, -7};
  mgs::scaleHost(exact, MGS_INT32, 2, 0.5);  // rounds toward zero
  CHECK(exact[0] == 3);
  CHECK(exact[1] == -3);
}

namespace {
// Same value, or both NaN (array conversions may keep NaN payloads).
bool sameOrBothNaN16(uint16_t a, uint16_t b, uint16_t exp_mask, uint16_t mant_mask) {
  const bool na = (a & exp_mask) == exp_mask && (a & mant_mask);
  const bool nb = (b & exp_mask) == exp_mask && (b & mant_mask);
  return na ? nb : a == b;
}

// Floats that probe every rounding case of a 16-bit format: each half/bf16
// value, the midpoints between neighbours (ties go to even), a hair either
// side, and values past the range.
std::vector<float> roundingProbes() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float f = mgs::halfToFloat(static_cast<uint16_t>(h));
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    for (int d : {-4097, -4096, -4095, -1, 0, 1, 4095, 4096, 4097}) {
      const uint32_t b = bits + static_cast<uint32_t>(d);
      float g;
      std::memcpy(&g, &b, 4);
      v.push_back(g);
    }
  }
  for (float f : {65504.0f, 65519.0f, 65520.0f, 1e30f, -1e30f, 1e-30f, 0.0f, -0.0f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min()})
    v.push_back(f);
  return v;
}
}  // namespace

TEST_CASE("array half conversions equal the scalar ones on every input", "[dtype]") {
  INFO("hardware conversion: " << mgs::halfConversionIsVectorised());
  std::vector<uint16_t> all(0x10000 + 5);  // + a tail that is not a multiple of 8
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);
  for (uint32_t h = 0; h < 0x10000; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> wide(all.size());
  mgs::halfToFloatN(all.data(), all.size(), wide.data());
  for (size_t i = 0; i < all.size(); ++i) {
    const float want = mgs::halfToFloat(all[i]);
    INFO("half bits " << all[i]);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(wide[i]));
    } else {
      REQUIRE(std::memcmp(&want, &wide[i], 4) == 0);
    }
  }
  const std::vector<float> probes = roundingProbes();
  std::vector<uint16_t> h(probes.size()), b(probes.size());
  mgs::floatToHalfN(probes.data(), probes.size(), h.data());
  mgs::floatToBfloat16N(probes.data(), probes.size(), b.data());
  for (size_t i = 0; i < probes.size(); ++i) {
    INFO("float " << probes[i]);
    REQUIRE(sameOrBothNaN16(h[i], mgs::floatToHalf(probes[i]), 0x7c00, 0x03ff));
    REQUIRE(sameOrBothNaN16(b[i], mgs::floatToBfloat16(probes[i]), 0x7f80, 0x007f));
  }
  std::vector<float> back(b.size());
  mgs::bfloat16ToFloatN(b.data(), b.size(), back.data());
  for (size_t i = 0; i < b.size(); ++i) {
    const float want = mgs::bfloat16ToFloat(b[i]);
    REQUIRE((std::isnan(want) ? std::isnan(back[i]) : std::memcmp(&want, &back[i], 4) == 0));
  }
}

TEST_CASE("16-bit fusing and scaling match the per-element arithmetic", "[dtype]") {
  // addIntoFloat and scaleHost go through the array conversions in chunks;
  // the result must be the per-element formula, chunk edges included.
  const size_t n = 2500;  // spans chunk boundaries
  for (auto dt : {MGS_FLOAT16, MGS_BFLOAT16}) {
    std::vector<uint16_t> x(n);
    for (size_t i = 0; i < n; ++i) {
      const float v = std::sin(0.37f * static_cast<float>(i)) * 100.0f;
      x[i] = dt == MGS_FLOAT16 ? mgs::floatToHalf(v) : mgs::floatToBfloat16(v);
    }
    auto wide = [&](uint16_t v) { return dt == MGS_FLOAT16 ? mgs::halfToFloat(v) : mgs::bfloat16ToFloat(v); };
    std::vector<float> acc(n, 0.25f);
    mgs::addIntoFloat(x.data(), dt, n, 0.5, false, acc.data());
    for (size_t i = 0; i < n; ++i) REQUIRE(acc[i] == 0.25f + wide(x[i]) * 0.5f);
    std::vector<uint16_t> y = x;
    mgs::scaleHost(y.data(), dt, n, 3.0);
    for (size_t i = 0; i < n; ++i) {
      const float s = wide(x[i]) * 3.0f;
      REQUIRE(y[i] == (dt == MGS_FLOAT16 ? mgs::floatToHalf(s) : mgs::floatToBfloat16(s)));
    }
  }
}
