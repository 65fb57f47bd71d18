#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/dtype.h"
#include "core/residual_store.h"

using namespace mgs;

namespace {
std::vector<float> get(const ResidualStore& s, const std::string& name, size_t n) {
  std::vector<float> v(n, -1.0f);
  REQUIRE(s.copyOut(name, v.data(), n).ok());
  return v;
}
}  // namespace

TEST_CASE("residual slabs follow the bucket layout and keep every value", "[residual]") {
  ResidualStore s;
  const std::string a = "a", b = "b", c = "c";
  float* ab;
  {
    auto lk = s.lock();
    ab = s.contiguous({{&a, 2}, {&b, 3}});
    for (int i = 0; i < 5; ++i) CHECK(ab[i] == 0.0f);  // new residuals start at zero
    for (int i = 0; i < 5; ++i) ab[i] = float(i + 1);
    // Same layout again: the same storage, no copy.
    CHECK(s.contiguous({{&a, 2}, {&b, 3}}) == ab);
  }
  CHECK(get(s, "a", 2) == std::vector<float>{1, 2});
  CHECK(get(s, "b", 3) == std::vector<float>{3, 4, 5});

  // A new plan: b and c merged in the other order; a alone.
  {
    auto lk = s.lock();
    float* cb = s.contiguous({{&c, 2}, {&b, 3}});
    CHECK(cb != ab);
    CHECK(std::vector<float>(cb, cb + 5) == std::vector<float>{0, 0, 3, 4, 5});
    cb[0] = 7;
    float* a1 = s.contiguous({{&a, 2}});
    CHECK(std::vector<float>(a1, a1 + 2) == std::vector<float>{1, 2});
    CHECK(s.contiguous({{&c, 2}, {&b, 3}}) == cb);
  }
  CHECK(get(s, "c", 2) == std::vector<float>{7, 0});
  CHECK(get(s, "b", 3) == std::vector<float>{3, 4, 5});

  // A size change starts that tensor from zero; restore writes in place.
  {
    auto lk = s.lock();
    float* a4 = s.contiguous({{&a, 4}});
    CHECK(std::vector<float>(a4, a4 + 4) == std::vector<float>{0, 0, 0, 0});
  }
  std::vector<float> r = {9, 8, 7};
  REQUIRE(s.copyIn("b", r.data(), 3).ok());
  CHECK(get(s, "b", 3) == r);
  {
    auto lk = s.lock();
    float* cb = s.contiguous({{&c, 2}, {&b, 3}});
    CHECK(std::vector<float>(cb, cb + 5) == std::vector<float>{7, 0, 9, 8, 7});
  }
  std::vector<float> wrong(5);
  CHECK(s.copyOut("b", wrong.data(), 5).code() == Code::kInvalidArgument);
  CHECK(s.copyOut("zzz", wrong.data(), 5).code() == Code::kInvalidArgument);
}

TEST_CASE("gradients are added into the residual with the prescale rounded first", "[residual]") {
  std::vector<float> g = {1.0f, -2.0f, 0.1f};
  std::vector<float> r = {0.5f, 0.5f, 0.2f};
  addIntoFloat(g.data(), MGS_FLOAT32, 3, 1.0, false, r.data());
  CHECK(r == std::vector<float>{1.5f, -1.5f, 0.1f + 0.2f});
  std::vector<uint16_t> h = {floatToHalf(1.5f), floatToHalf(-4.0f)};
  std::vector<float> r2 = {1.0f, 1.0f};
  addIntoFloat(h.data(), MGS_FLOAT16, 2, 0.5, false, r2.data());
  CHECK(r2 == std::vector<float>{1.75f, -1.0f});
  addIntoFloat(h.data(), MGS_FLOAT16, 2, 3.0, true, r2.data());
  CHECK(r2 == std::vector<float>{4.5f, -12.0f});
  std::vector<uint16_t> bf = {floatToBfloat16(2.0f)};
  std::vector<float> r3 = {1.0f};
  addIntoFloat(bf.data(), MGS_BFLOAT16, 1, 1.0, false, r3.data());
  CHECK(r3[0] == 3.0f);
}

TEST_CASE("adopt makes a scratch slab the residual and hands back the old one", "[residual]") {
  ResidualStore s;
  const std::string a = "a", b = "b", c = "c";
  float* old;
  {
    auto lk = s.lock();
    old = s.contiguous({{&a, 2}, {&b, 3}});
    for (int i = 0; i < 5; ++i) old[i] = float(i + 1);
  }
  auto scratch = std::make_shared<std::vector<float>>(std::vector<float>{10, 11, 12, 13, 14});
  float* fresh = scratch->data();
  ResidualStore::Slab back;
  {
    auto lk = s.lock();
    back = s.adopt({{&a, 2}, {&b, 3}}, scratch);
    // The adopted slab is the layout's storage now: no copy on the next step.
    CHECK(s.contiguous({{&a, 2}, {&b, 3}}) == fresh);
  }
  REQUIRE(back != nullptr);
  CHECK(back->data() == old);
  CHECK(get(s, "a", 2) == std::vector<float>{10, 11});
  CHECK(get(s, "b", 3) == std::vector<float>{12, 13, 14});

  // A slab still shared with another tensor is not handed back.
  {
    auto lk = s.lock();
    s.contiguous({{&a, 2}, {&c, 1}});
    auto one = std::make_shared<std::vector<float>>(std::vector<float>{5, 6});
    CHECK(s.adopt({{&a, 2}}, one) == nullptr);  // c still lives in the {a, c} slab
  }
  CHECK(get(s, "a", 2) == std::vector<float>{5, 6});
  CHECK(get(s, "c", 1) == std::vector<float>{0});
}
