// libFuzzer target: the cost-model file reader (src/plan/cost_model_io).
// Beyond "no crash, no UB, no exception": whatever parses writes back to a
// document that parses to the same costs and is written identically again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "plan/cost_model_io.h"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

bool sameCosts(const mgs::plan::CommModel& a, const mgs::plan::CommModel& b) {
  for (double x : {0.0, 1.0, 1000.0, 65536.0, 1048576.0, 1e9, 1e15}) {
    const double ya = a.seconds(x), yb = b.seconds(x);
    if (!(ya == yb || (ya != ya && yb != yb))) return false;  // NaN == NaN here
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  mgs::plan::CostModel m;
  const mgs::Status st = mgs::plan::parseCostModel(text, &m);
  if (!st.ok()) {
    require(st.code() == mgs::Code::kInvalidArgument && !st.message().empty());
    return 0;
  }
  const std::string once = mgs::plan::costModelToJson(m);
  mgs::plan::CostModel back;
  require(mgs::plan::parseCostModel(once, &back).ok());
  require(mgs::plan::costModelToJson(back) == once);
  require(sameCosts(m.allreduce, back.allreduce) && sameCosts(m.allgather, back.allgather));
  require(back.workers == m.workers && back.sparsify.c_s == m.sparsify.c_s);
  return 0;
}
