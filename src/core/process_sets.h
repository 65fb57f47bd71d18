// Process sets (Horovod's): subsets of the ranks that run collectives among
// themselves. Set 0 is every rank. Sets are added and removed by operations
// every rank takes part in, negotiated like any other, so every rank assigns
// the same ids in the same order; ids are never reused within a runtime.
//
// The table is written by the coordinator (when an add or remove runs) and
// read by framework threads at enqueue (is the set known, is this rank in
// it, is a broadcast's root in it) and by the negotiation (rank 0: how many
// ranks an op of a set waits for, who may submit it).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace mgs {

struct ProcessSetInfo {
  int32_t id = 0;
  std::vector<int32_t> ranks;  // ascending world ranks
  bool contains(int rank) const;
  // This rank's index in `ranks`, or -1.
  int indexOf(int rank) const;
};

class ProcessSetTable {
 public:
  // Forget every set but the global one, over `world_size` ranks.
  void reset(int world_size);
  // The set `id`, or false if there is none (never added, or removed).
  bool get(int32_t id, ProcessSetInfo* out) const;
  // The id a set with exactly these ranks has, or -1.
  int32_t find(const std::vector<int32_t>& ranks) const;
  // Registers a new set; returns its id (the next one).
  int32_t add(const std::vector<int32_t>& ranks);
  void remove(int32_t id);
  // Ranks sorted, unique and within [0, world_size): else kInvalidArgument saying why.
  static Status validate(std::vector<int32_t>* ranks, int world_size);
  // "process set 3 (ranks [0, 2])"
  static std::string describe(const ProcessSetInfo& set);

 private:
  mutable std::mutex mu_;
  std::map<int32_t, ProcessSetInfo> sets_;
  int32_t next_id_ = 1;
};

}  // namespace mgs
