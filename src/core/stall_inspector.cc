#include "core/stall_inspector.h"

#include <cstdio>

namespace mgs {

std::string StallInspector::rankList(const std::vector<bool>& submitted, bool want, const std::vector<bool>& members) {
  std::string s;
  for (size_t r = 0; r < submitted.size(); ++r)
    if (submitted[r] == want && (members.empty() || members[r])) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s.empty() ? "none" : s;
}

StallVerdict StallInspector::inspect(std::vector<StallEntry*>& entries, Clock::time_point now) const {
  StallVerdict v;
  for (StallEntry* e : entries) {
    const double age = std::chrono::duration<double>(now - e->first_seen).count();
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", age);
    const std::string what = std::string(opTypeName(e->type)) + " of tensor '" + e->name + "' was submitted by ranks " +
                             rankList(e->submitted, true, e->members) + " but not by ranks " +
                             rankList(e->submitted, false, e->members) +
                             " for " + secs + " s";
    if (abort_s_ > 0 && age >= abort_s_) {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", abort_s_);
      v.aborts.emplace_back(e->name, what + " (MGS_STALL_ABORT_S=" + limit + "): aborted");
      continue;
    }
    const bool due = e->last_warned == Clock::time_point{} ||
                     std::chrono::duration<double>(now - e->last_warned).count() >= warning_s_;
    if (age >= warning_s_ && due) {
      v.warnings.push_back("stall: " + what + "; a rank may be stuck, or ranks submit different tensors");
      e->last_warned = now;
    }
  }
  return v;
}

}  // namespace mgs
