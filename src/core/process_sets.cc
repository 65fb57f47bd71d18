#include "core/process_sets.h"

#include <algorithm>

namespace mgs {

bool ProcessSetInfo::contains(int rank) const { return indexOf(rank) >= 0; }

int ProcessSetInfo::indexOf(int rank) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
  return it != ranks.end() && *it == rank ? static_cast<int>(it - ranks.begin()) : -1;
}

void ProcessSetTable::reset(int world_size) {
  std::lock_guard<std::mutex> lk(mu_);
  sets_.clear();
  ProcessSetInfo global;
  global.id = 0;
  for (int r = 0; r < world_size; ++r) global.ranks.push_back(r);
  sets_[0] = std::move(global);
  next_id_ = 1;
}

bool ProcessSetTable::get(int32_t id, ProcessSetInfo* out) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return false;
  *out = it->second;
  return true;
}

int32_t ProcessSetTable::find(const std::vector<int32_t>& ranks) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& [id, set] : sets_)
    if (set.ranks == ranks) return id;
  return -1;
}

int32_t ProcessSetTable::add(const std::vector<int32_t>& ranks) {
  std::lock_guard<std::mutex> lk(mu_);
  ProcessSetInfo set;
  set.id = next_id_++;
  set.ranks = ranks;
  sets_[set.id] = set;
  return set.id;
}

void ProcessSetTable::remove(int32_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (id != 0) sets_.erase(id);
}

Status ProcessSetTable::validate(std::vector<int32_t>* ranks, int world_size) {
  if (ranks->empty()) return Status(Code::kInvalidArgument, "a process set needs at least one rank");
  std::sort(ranks->begin(), ranks->end());
  for (size_t i = 0; i < ranks->size(); ++i) {
    const int32_t r = (*ranks)[i];
    if (r < 0 || r >= world_size)
      return Status(Code::kInvalidArgument, "process set rank " + std::to_string(r) + " is not in [0, " +
                                                std::to_string(world_size) + ")");
    if (i > 0 && (*ranks)[i - 1] == r)
      return Status(Code::kInvalidArgument, "rank " + std::to_string(r) + " appears twice in the process set");
  }
  return Status::OK();
}

std::string ProcessSetTable::describe(const ProcessSetInfo& set) {
  std::string out = "process set " + std::to_string(set.id) + " (ranks [";
  for (size_t i = 0; i < set.ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(set.ranks[i]);
  return out + "])";
}

}  // namespace mgs
