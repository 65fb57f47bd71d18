// What of the sparse pipeline's progress, besides the residuals
// (ResidualStore), decides what the next steps select and send: the step
// counter (the randomk/dgc seeds, MGS_WARMUP_STEPS) and how many times each
// agreed-index bucket was applied (which rank leads it next:
// BlockExchange::agreedLeader). A job resumed from a checkpoint continues
// bitwise only with both restored (mgs_sparse_state_copy/restore). Without
// them a resumed job starts every agreed bucket at its first leader, and at
// P = 2 every odd number of steps done gives every bucket the other leader:
// other indices selected, a different result, whatever the residuals.
//
// Owned by the Runtime so that framework threads can read and restore it
// while the coordinator thread uses it; every access takes the mutex (a few
// per bucket, uncontended). The schedule's own step counter belongs to the
// coordinator: a restored step is handed over at the start of the next step
// (takeRestoredStep), and the coordinator publishes the number of the step
// that comes next (stepBegan).
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/wire.h"

namespace mgs {

class SparseProgress {
 public:
  // --- the coordinator thread

  // How many times the agreed bucket `name` was applied.
  uint64_t agreedTurns(const std::string& name) const {
    std::lock_guard<std::mutex> lk(mu_);
    const auto it = turns_.find(name);
    return it == turns_.end() ? 0 : it->second;
  }
  void agreedApplied(const std::string& name) {
    std::lock_guard<std::mutex> lk(mu_);
    // Bounded (a job may make up new names forever): every rank inserts the
    // same names in the same order, so every rank clears at the same time.
    if (turns_.size() >= kMaxAgreedTurns && !turns_.count(name)) turns_.clear();
    ++turns_[name];
  }
  // The schedule's step `step` began (its first sparse gradient arrived):
  // the step after it is the next one a checkpoint resumes at.
  void stepBegan(uint64_t step) {
    std::lock_guard<std::mutex> lk(mu_);
    next_step_ = step + 1;
  }
  // A restored step counter the schedule has not taken over yet: the number
  // of the step that begins now.
  bool takeRestoredStep(uint64_t* step) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!restored_) return false;
    restored_ = false;
    *step = next_step_;
    return true;
  }

  // --- any thread

  // An opaque byte string: magic, version, world size, the next step's
  // number, then every agreed bucket's name and turns (sorted by name, so
  // equal states give equal bytes).
  std::string save(int world_size) const {
    std::vector<std::pair<std::string, uint64_t>> turns;
    uint64_t next = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      turns.assign(turns_.begin(), turns_.end());
      next = next_step_;
    }
    std::sort(turns.begin(), turns.end());
    WireWriter w;
    w.put(kMagic);
    w.put(kVersion);
    w.put(static_cast<uint32_t>(world_size));
    w.put(next);
    w.put(static_cast<uint32_t>(turns.size()));
    for (const auto& [name, n] : turns) {
      w.putString(name);
      w.put(n);
    }
    return std::move(w.str());
  }

  // Replaces the state with one save() made (on a job of `world_size` ranks:
  // the leaders are taken mod the world size). The agreed turns apply at
  // once, the step counter from the next step on; call it between steps.
  Status restore(const std::string& bytes, int world_size) {
    WireReader r(bytes);
    uint32_t magic = 0, version = 0, saved_size = 0, count = 0;
    uint64_t next = 0;
    if (!r.get(&magic) || magic != kMagic)
      return Status(Code::kInvalidArgument, "not a sparse state saved by mgs_sparse_state_copy");
    if (!r.get(&version) || version != kVersion)
      return Status(Code::kInvalidArgument, "sparse state of version " + std::to_string(version) +
                                                "; this library reads version " + std::to_string(kVersion));
    if (!r.get(&saved_size) || !r.get(&next) || !r.get(&count))
      return Status(Code::kInvalidArgument, "sparse state: truncated");
    if (saved_size != static_cast<uint32_t>(world_size))
      return Status(Code::kInvalidArgument, "sparse state saved by a job of " + std::to_string(saved_size) +
                                                " ranks; this job has " + std::to_string(world_size));
    std::unordered_map<std::string, uint64_t> turns;
    for (uint32_t i = 0; i < count; ++i) {  // counts are read, never trusted for allocation
      std::string name;
      uint64_t n = 0;
      if (!r.getString(&name) || !r.get(&n)) return Status(Code::kInvalidArgument, "sparse state: truncated");
      turns[std::move(name)] = n;
    }
    if (!r.atEnd()) return Status(Code::kInvalidArgument, "sparse state: trailing bytes");
    std::lock_guard<std::mutex> lk(mu_);
    turns_ = std::move(turns);
    next_step_ = next;
    restored_ = true;
    return Status::OK();
  }

 private:
  static constexpr uint32_t kMagic = 0x5353474du;  // "MGSS"
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kMaxAgreedTurns = 1 << 16;

  mutable std::mutex mu_;
  std::unordered_map<std::string, uint64_t> turns_;
  uint64_t next_step_ = 0;
  bool restored_ = false;
};

}  // namespace mgs
