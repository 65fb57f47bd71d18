#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "comm/reduce.h"

using namespace mgs;

TEST_CASE("reduceInto combines every dtype", "[reduce]") {
  std::vector<float> a = {1.5f, -2.0f, 3.0f}, b = {0.25f, 5.0f, -3.0f};
  REQUIRE(reduceInto(a.data(), b.data(), 3, MGS_FLOAT32, CommOp::kSum).ok());
  CHECK(a == std::vector<float>{1.75f, 3.0f, 0.0f});
  std::vector<int64_t> i = {5, -1, 7}, j = {3, 4, 2};
  REQUIRE(reduceInto(i.data(), j.data(), 3, MGS_INT64, CommOp::kMax).ok());
  CHECK(i == std::vector<int64_t>{5, 4, 7});
  std::vector<uint8_t> u = {0xF0, 0x0F}, v = {0x3C, 0xFF};
  REQUIRE(reduceInto(u.data(), v.data(), 2, MGS_UINT8, CommOp::kBitAnd).ok());
  CHECK(u == std::vector<uint8_t>{0x30, 0x0F});
  std::vector<double> d = {1.0, 2.0}, e = {-4.0, 0.5};
  REQUIRE(reduceInto(d.data(), e.data(), 2, MGS_FLOAT64, CommOp::kMin).ok());
  CHECK(d == std::vector<double>{-4.0, 0.5});
}

TEST_CASE("16-bit floats are summed in float32 and rounded once per hop", "[reduce]") {
  // 2048 + 1 is not representable in binary16 (spacing 2 there): round to even.
  std::vector<uint16_t> a = {floatToHalf(2048.0f), floatToHalf(0.5f)}, b = {floatToHalf(1.0f), floatToHalf(0.25f)};
  REQUIRE(reduceInto(a.data(), b.data(), 2, MGS_FLOAT16, CommOp::kSum).ok());
  CHECK(halfToFloat(a[0]) == 2048.0f);
  CHECK(halfToFloat(a[1]) == 0.75f);
  // bfloat16 keeps float32's range: 1e30 + 1e30 does not overflow.
  std::vector<uint16_t> c = {floatToBfloat16(1e30f)}, d = {floatToBfloat16(1e30f)};
  REQUIRE(reduceInto(c.data(), d.data(), 1, MGS_BFLOAT16, CommOp::kSum).ok());
  CHECK(bfloat16ToFloat(c[0]) == Approx(2e30f).epsilon(0.01));
  std::vector<uint16_t> m = {floatToHalf(-3.0f)}, n = {floatToHalf(2.0f)};
  REQUIRE(reduceInto(m.data(), n.data(), 1, MGS_FLOAT16, CommOp::kMax).ok());
  CHECK(halfToFloat(m[0]) == 2.0f);
}

TEST_CASE("reduceInto refuses a bitwise AND of floats", "[reduce]") {
  float a = 1, b = 2;
  CHECK(!reducible(MGS_FLOAT32, CommOp::kBitAnd));
  CHECK(reduceInto(&a, &b, 1, MGS_FLOAT32, CommOp::kBitAnd).code() == Code::kInternal);
  CHECK(reduceInto(&a, &b, 0, MGS_FLOAT32, CommOp::kSum).ok());
}
