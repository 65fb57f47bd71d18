// SelectArgs::parts (a merged bucket's members read where they lie): the
// selection over parts equals, bit for bit, the in-place selection over the
// buffer the parts would fuse into (float(x) * scale + residual), for any
// mix of dtypes, scales and part sizes (zero-length parts and parts that end
// inside a 512-value block included), with and without the candidate list,
// on the baseline and the AVX2 code; the old residual stays intact.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>

#include "compress/cpu_passes.h"
#include "test_util.h"

using namespace mgs;
using namespace mgs::compress;
using namespace mgs::compress::test;

namespace {

struct Member {
  DataType dtype;
  float scale;
  std::vector<float> f32;
  std::vector<uint16_t> h;  // f16 or bf16 bits
};

Member makeMember(DataType t, size_t n, float scale, uint64_t seed) {
  Member m{t, scale, {}, {}};
  const std::vector<float> v = makeData(Dist::kLaplace, n, seed);
  if (t == MGS_FLOAT32) {
    m.f32 = v;
  } else {
    for (float f : v) m.h.push_back(t == MGS_FLOAT16 ? floatToHalf(f * 100) : floatToBfloat16(f));
  }
  return m;
}

size_t sizeOf(const Member& m) { return m.dtype == MGS_FLOAT32 ? m.f32.size() : m.h.size(); }

// float(x) * scale (rounded) + r: what the runtime's fuse pass writes.
std::vector<float> fused(const std::vector<Member>& ms, const std::vector<float>& r) {
  std::vector<float> acc;
  for (const Member& m : ms)
    for (size_t i = 0; i < sizeOf(m); ++i) {
      float v = m.dtype == MGS_FLOAT32   ? m.f32[i]
                : m.dtype == MGS_FLOAT16 ? halfToFloat(m.h[i])
                                         : bfloat16ToFloat(m.h[i]);
      if (m.scale != 1.0f) v = v * m.scale;
      acc.push_back(r[acc.size()] + v);
    }
  return acc;
}

std::vector<GradientPart> partsOf(const std::vector<Member>& ms) {
  std::vector<GradientPart> p;
  for (const Member& m : ms)
    p.push_back({m.dtype == MGS_FLOAT32 ? static_cast<const void*>(m.f32.data()) : m.h.data(), m.dtype, m.scale,
                 sizeOf(m)});
  return p;
}

struct Out {
  Status status;
  SelectResult res;
  std::vector<float> residual, values;
  std::vector<uint32_t> indices;
};

Out select(const Selector& sel, const std::vector<GradientPart>* parts, const float* rin, std::vector<float> residual) {
  const size_t n = residual.size();
  Out o;
  o.residual = std::move(residual);
  o.values.assign(sel.maxCount(n), 0.0f);
  o.indices.assign(o.values.size(), 0);
  std::vector<std::max_align_t> ws(sel.workspaceBytes(n) / sizeof(std::max_align_t) + 1);
  SelectArgs a;
  if (parts) a.parts = GradientParts{parts->data(), parts->size()};
  a.residualIn = rin;
  a.residual = o.residual.data();
  a.n = n;
  a.outValues = o.values.data();
  a.outIndices = o.indices.data();
  a.workspace = ws.data();
  a.workspaceBytes = ws.size() * sizeof(std::max_align_t);
  a.step = 7;
  a.name = "parts";
  o.status = sel.select(a, &o.res);
  return o;
}

std::vector<Member> mixedMembers(uint64_t seed) {
  // Sizes that straddle 512-value blocks and 2^16-value chunks, a zero-length
  // member, every dtype, scaled and unscaled.
  return {makeMember(MGS_FLOAT32, 1000, 1.0f, seed), makeMember(MGS_FLOAT16, 70001, 1.0f, seed + 1),
          makeMember(MGS_FLOAT32, 0, 1.0f, seed + 2), makeMember(MGS_FLOAT32, 131072, 0.25f, seed + 3),
          makeMember(MGS_BFLOAT16, 777, 0.5f, seed + 4), makeMember(MGS_FLOAT32, 99999, 1.0f, seed + 5),
          makeMember(MGS_FLOAT32, 3, 1.0f, seed + 6)};
}

}  // namespace

TEST_CASE("parts: the same selection as in place on the fused buffer, bit for bit", "[selector][parts]") {
  const std::vector<Member> ms = mixedMembers(40);
  const std::vector<GradientPart> parts = partsOf(ms);
  size_t n = 0;
  for (const auto& p : parts) n += p.n;
  const std::vector<float> r0 = makeData(Dist::kNormal, n, 41, 1e-4f);
  const std::vector<float> acc = fused(ms, r0);
  for (bool baseline : {false, true}) {
    cpu::testForceBaseline = baseline;
    for (const char* name : {"topk", "gaussiank", "ldte", "dgc", "randomk", "none"}) {
      for (double density : {0.001, 0.3}) {  // with and without the candidate list
        for (int threads : {1, 2}) {
          INFO(name << " density=" << density << " threads=" << threads << " baseline=" << baseline);
          SelectorOptions o;
          o.density = density;
          o.numThreads = threads;
          auto sel = makeSelector(name, o);
          const Out ref = select(*sel, nullptr, nullptr, acc);
          REQUIRE(ref.status.ok());
          std::vector<float> old = r0;
          const Out got = select(*sel, &parts, old.data(), std::vector<float>(n, 5.0f));
          REQUIRE(got.status.ok());
          REQUIRE(got.res.count == ref.res.count);
          CHECK(got.res.count > 0);
          CHECK(std::memcmp(got.values.data(), ref.values.data(), ref.res.count * sizeof(float)) == 0);
          CHECK(std::memcmp(got.indices.data(), ref.indices.data(), ref.res.count * sizeof(uint32_t)) == 0);
          CHECK(std::memcmp(got.residual.data(), ref.residual.data(), n * sizeof(float)) == 0);
          CHECK(bits(static_cast<float>(got.res.stddev)) == bits(static_cast<float>(ref.res.stddev)));
          CHECK(got.res.mean == ref.res.mean);
          CHECK(std::memcmp(old.data(), r0.data(), n * sizeof(float)) == 0);
        }
      }
    }
  }
  cpu::testForceBaseline = false;
}

TEST_CASE("parts: one float32 part is the call with x", "[selector][parts]") {
  const size_t n = 300000;
  const std::vector<float> x = makeData(Dist::kLaplace, n, 50), r0 = makeData(Dist::kNormal, n, 51, 1e-4f);
  SelectorOptions o;
  o.density = 0.01;
  auto sel = makeSelector("gaussiank", o);
  const Run ref = runSelect(*sel, x, r0, 7);
  REQUIRE(ref.status.ok());
  const std::vector<GradientPart> parts{{x.data(), MGS_FLOAT32, 1.0f, n}};
  const Out got = select(*sel, &parts, r0.data(), std::vector<float>(n));
  REQUIRE(got.status.ok());
  REQUIRE(got.res.count == ref.result.count);
  CHECK(std::memcmp(got.indices.data(), ref.indices.data(), got.res.count * sizeof(uint32_t)) == 0);
  CHECK(std::memcmp(got.residual.data(), ref.residual.data(), n * sizeof(float)) == 0);
}

TEST_CASE("parts: a non-finite member value fails the call, the old residual intact", "[selector][parts]") {
  std::vector<Member> ms = mixedMembers(60);
  ms[3].f32[12345] = std::numeric_limits<float>::quiet_NaN();
  ms[1].h[5] = 0x7c00;  // f16 +Inf
  const std::vector<GradientPart> parts = partsOf(ms);
  size_t n = 0;
  for (const auto& p : parts) n += p.n;
  const std::vector<float> r0 = makeData(Dist::kNormal, n, 61, 1e-4f);
  std::vector<float> old = r0;
  SelectorOptions o;
  o.density = 0.001;
  auto sel = makeSelector("gaussiank", o);
  const Out got = select(*sel, &parts, old.data(), std::vector<float>(n));
  CHECK(got.status.code() == Code::kNumeric);
  CHECK(got.res.nonFinite == 2);
  CHECK(std::memcmp(old.data(), r0.data(), n * sizeof(float)) == 0);
}

TEST_CASE("parts: inconsistent parts are refused with the cause", "[selector][parts]") {
  const std::vector<float> x(100, 1.0f);
  std::vector<int64_t> i64(100, 1);
  SelectorOptions o;
  auto sel = makeSelector("topk", o);
  std::vector<GradientPart> shortParts{{x.data(), MGS_FLOAT32, 1.0f, 60}};
  Out got = select(*sel, &shortParts, nullptr, std::vector<float>(100));
  CHECK(got.status.code() == Code::kInvalidArgument);
  CHECK_THAT(got.status.message(), Catch::Contains("hold 60 values, n = 100"));
  std::vector<GradientPart> badType{{i64.data(), MGS_INT64, 1.0f, 100}};
  got = select(*sel, &badType, nullptr, std::vector<float>(100));
  CHECK(got.status.code() == Code::kInvalidArgument);
  CHECK_THAT(got.status.message(), Catch::Contains("part 0 has dtype"));
  std::vector<GradientPart> nullPart{{nullptr, MGS_FLOAT32, 1.0f, 100}};
  got = select(*sel, &nullPart, nullptr, std::vector<float>(100));
  CHECK(got.status.code() == Code::kInvalidArgument);
}
