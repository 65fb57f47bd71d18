// Stall inspector (rank 0): looks at the tensors some ranks submitted and
// others did not, warns after MGS_STALL_WARNING_S naming the missing ranks,
// and, with MGS_STALL_ABORT_S > 0, tells the controller to fail them.
#pragma once

#include <string>
#include <vector>

#include "core/request.h"

namespace mgs {

struct StallEntry {
  std::string name;
  OpType type;
  std::vector<bool> submitted;  // per rank
  Clock::time_point first_seen;
  Clock::time_point last_warned;  // time_point{} if never
  std::vector<bool> members;      // per rank, for an op of a process set (empty: every rank)
};

struct StallVerdict {
  std::vector<std::string> warnings;                        // one message per stalled tensor to warn about
  std::vector<std::pair<std::string, std::string>> aborts;  // (name, message)
};

class StallInspector {
 public:
  StallInspector(double warning_s, double abort_s) : warning_s_(warning_s), abort_s_(abort_s) {}
  // Updates last_warned of the entries it warns about.
  StallVerdict inspect(std::vector<StallEntry*>& entries, Clock::time_point now) const;
  // "ranks 0, 2" style list of the ranks where submitted == want (among
  // `members` where that is not empty).
  static std::string rankList(const std::vector<bool>& submitted, bool want,
                              const std::vector<bool>& members = {});

 private:
  double warning_s_;
  double abort_s_;
};

}  // namespace mgs
