// Response cache: names that were negotiated successfully before get a bit
// position, so later cycles negotiate them with one bitwise-AND allreduce
// instead of a gather to rank 0 (Horovod's idea).
//
// Agreement across ranks without extra messages: every rank changes its cache
// only from what every rank sees alike -- the broadcast response list (puts,
// erases, in list order) and the ANDed bit vector (uses) -- stamped with the
// negotiation cycle number, which is the same on every rank. So bit positions,
// use times and therefore the evictions agree everywhere.
//
// Bounded: past `capacity` names, a put evicts the least recently used one
// (ties: the lower bit), so a job that keeps inventing names keeps a flat table
// and a flat bit vector. Evictions and erasures happen only in slow-path
// cycles, after which every pending request has been reported to rank 0 and no
// longer uses its bit, so a freed bit may be reused at once.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/request.h"

namespace mgs {

class ResponseCache {
 public:
  static constexpr size_t kDefaultCapacity = 8192;
  explicit ResponseCache(size_t capacity = kDefaultCapacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // Bit position of `name` if cached with a signature equal to `sig`, else -1.
  int64_t lookup(const std::string& name, const Signature& sig) const;
  // Insert or refresh `name`, used in cycle `tick`; an existing name keeps its
  // bit, a new one takes the lowest free bit, evicting the least recently used
  // name first when the cache is full.
  // `foreign`: an op of a process set this rank is not in (the name and its
  // set only; this rank never submits it). Every rank caches every op alike,
  // so the bits mean the same everywhere.
  void put(const std::string& name, const Signature& sig, uint64_t tick, bool foreign = false);
  // The op at bit `id` ran in cycle `tick`.
  void touch(size_t id, uint64_t tick);
  // `name` is cached (foreign or not).
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // Forget `name`; its bit becomes free.
  void erase(const std::string& name);
  // Forget every op of process set `id` (removed).
  void eraseSet(int32_t id);
  // Bits of ops of process sets this rank is not in: it sets them in every
  // fast cycle, so a bit ANDs to 1 when every member has the op pending.
  const std::set<size_t>& foreignBits() const { return foreign_; }
  bool foreign(size_t id) const { return foreign_.count(id) != 0; }
  // Length of the bit vector: the highest bit in use + 1 (never above capacity).
  size_t bits() const { return names_.size(); }
  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t evictions() const { return evictions_; }
  // Name at bit `id` ("" for a free slot).
  const std::string& nameAt(size_t id) const { return names_[id].name; }

 private:
  void evictOne();
  void release(size_t id);

  struct Slot {
    std::string name;  // "" if free
    Signature sig;
    uint64_t last_used = 0;
  };
  size_t capacity_;
  std::unordered_map<std::string, size_t> entries_;  // name -> bit
  std::vector<Slot> names_;                          // by bit
  std::set<size_t> free_;                            // free bits below names_.size()
  std::set<std::pair<uint64_t, size_t>> lru_;        // (last_used, bit) of cached names
  std::set<size_t> foreign_;                         // bits of other process sets' ops
  uint64_t evictions_ = 0;
};

}  // namespace mgs
