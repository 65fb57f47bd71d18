// libFuzzer target: the planning-instance and trace readers (tools/) and, for
// small instances that parse, the planners themselves (src/plan): any
// instance is either refused with a message or planned into groups that
// cover every layer once, in order.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "instance_io.h"
#include "plan/plan.h"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  mgs::tools::Trace trace;
  (void)mgs::tools::parseTrace(j, &trace);
  mgs::plan::PlanInput in;
  const mgs::Status st = mgs::tools::parseInstance(j, &in);
  if (!st.ok()) {
    require(!st.message().empty());
    return 0;
  }
  // Brute-force-sized instances only: the DPs are polynomial, but a fuzzer
  // run should spend its time on the readers.
  if (in.layers.size() > 12) return 0;
  in.front_cap = std::min(in.front_cap, 64);
  for (const char* planner : {"mgs", "mgwfbp", "mgs-greedy", "fusion"}) {
    mgs::plan::Plan plan;
    if (!mgs::plan::computePlan(planner, in, &plan).ok()) continue;
    int next = 0;
    for (const auto& g : plan.groups)
      for (int l : g) require(l == next++);
    require(next == static_cast<int>(in.layers.size()));
  }
  return 0;
}
