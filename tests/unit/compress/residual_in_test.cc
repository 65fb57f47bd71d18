// SelectArgs::residualIn (the runtime's deferred residual commit): reading the
// old residual from one buffer and writing acc into another gives the same
// selection and the same new residual, bit for bit, as the in-place call, and
// leaves the old residual untouched.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>

#include "test_util.h"

using namespace mgs;
using namespace mgs::compress;
using namespace mgs::compress::test;

TEST_CASE("residualIn: same selection as in place, old residual untouched", "[selector][residual_in]") {
  for (const char* name : {"topk", "gaussiank", "ldte", "dgc", "randomk", "none"}) {
    for (size_t n : {size_t{1}, size_t{5000}, size_t{300000}}) {
      INFO(name << " n=" << n);
      SelectorOptions o;
      o.density = 0.01;
      auto sel = makeSelector(name, o);
      const std::vector<float> x = makeData(Dist::kLaplace, n, 11), r0 = makeData(Dist::kNormal, n, 12, 1e-4f);
      const Run ref = runSelect(*sel, x, r0, 3);
      REQUIRE(ref.status.ok());

      std::vector<float> old = r0, out(n, 123.0f), values(sel->maxCount(n)), none;
      std::vector<uint32_t> idx(values.size());
      std::vector<std::max_align_t> ws(sel->workspaceBytes(n) / sizeof(std::max_align_t) + 1);
      SelectArgs a;
      a.x = x.data();
      a.residualIn = old.data();
      a.residual = out.data();
      a.n = n;
      a.outValues = values.data();
      a.outIndices = idx.data();
      a.workspace = ws.data();
      a.workspaceBytes = ws.size() * sizeof(std::max_align_t);
      a.step = 3;
      SelectResult res;
      REQUIRE(sel->select(a, &res).ok());
      REQUIRE(res.count == ref.result.count);
      CHECK(std::memcmp(values.data(), ref.values.data(), res.count * sizeof(float)) == 0);
      CHECK(std::memcmp(idx.data(), ref.indices.data(), res.count * sizeof(uint32_t)) == 0);
      CHECK(std::memcmp(out.data(), ref.residual.data(), n * sizeof(float)) == 0);
      CHECK(std::memcmp(old.data(), r0.data(), n * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("residualIn: a non-finite gradient leaves the old residual untouched", "[selector][residual_in]") {
  SelectorOptions o;
  o.density = 0.01;
  auto sel = makeSelector("gaussiank", o);
  const size_t n = 100000;
  std::vector<float> x = makeData(Dist::kLaplace, n, 5);
  x[777] = std::numeric_limits<float>::infinity();
  const std::vector<float> r0 = makeData(Dist::kNormal, n, 6, 1e-4f);
  std::vector<float> old = r0, out(n), values(sel->maxCount(n));
  std::vector<uint32_t> idx(values.size());
  std::vector<std::max_align_t> ws(sel->workspaceBytes(n) / sizeof(std::max_align_t) + 1);
  SelectArgs a;
  a.x = x.data();
  a.residualIn = old.data();
  a.residual = out.data();
  a.n = n;
  a.outValues = values.data();
  a.outIndices = idx.data();
  a.workspace = ws.data();
  a.workspaceBytes = ws.size() * sizeof(std::max_align_t);
  SelectResult res;
  CHECK(sel->select(a, &res).code() == Code::kNumeric);
  CHECK(res.nonFinite == 1);
  CHECK(std::memcmp(old.data(), r0.data(), n * sizeof(float)) == 0);
}
