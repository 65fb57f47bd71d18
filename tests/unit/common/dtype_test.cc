#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

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
