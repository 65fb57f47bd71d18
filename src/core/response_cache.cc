#include "core/response_cache.h"

#include <vector>

namespace mgs {

int64_t ResponseCache::lookup(const std::string& name, const Signature& sig) const {
  auto it = entries_.find(name);
  // A foreign slot never matches: a rank submitting another set's op must
  // reach the slow path, which fails it on every rank that submitted it.
  if (it == entries_.end() || foreign_.count(it->second) || !(names_[it->second].sig == sig)) return -1;
  return static_cast<int64_t>(it->second);
}

void ResponseCache::put(const std::string& name, const Signature& sig, uint64_t tick, bool foreign) {
  auto it = entries_.find(name);
  if (it != entries_.end()) {
    names_[it->second].sig = sig;
    if (foreign)
      foreign_.insert(it->second);
    else
      foreign_.erase(it->second);
    touch(it->second, tick);
    return;
  }
  if (entries_.size() >= capacity_) evictOne();
  size_t id;
  if (!free_.empty()) {
    id = *free_.begin();
    free_.erase(free_.begin());
  } else {
    id = names_.size();
    names_.emplace_back();
  }
  names_[id] = Slot{name, sig, tick};
  entries_.emplace(name, id);
  lru_.emplace(tick, id);
  if (foreign) foreign_.insert(id);
}

void ResponseCache::touch(size_t id, uint64_t tick) {
  Slot& s = names_[id];
  if (s.name.empty() || s.last_used == tick) return;
  lru_.erase({s.last_used, id});
  s.last_used = tick;
  lru_.emplace(tick, id);
}

void ResponseCache::erase(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  const size_t id = it->second;
  entries_.erase(it);
  release(id);
}

void ResponseCache::eraseSet(int32_t id) {
  std::vector<std::string> names;
  for (const Slot& s : names_)
    if (!s.name.empty() && s.sig.process_set == id) names.push_back(s.name);
  for (const auto& n : names) erase(n);
}

void ResponseCache::evictOne() {
  if (lru_.empty()) return;
  const size_t id = lru_.begin()->second;
  entries_.erase(names_[id].name);
  release(id);
  ++evictions_;
}

void ResponseCache::release(size_t id) {
  lru_.erase({names_[id].last_used, id});
  foreign_.erase(id);
  names_[id] = Slot{};
  free_.insert(id);
  // Trailing free bits shrink the vector, so a burst of names does not keep
  // every later cycle's bit vector long.
  while (!names_.empty() && names_.back().name.empty()) {
    free_.erase(names_.size() - 1);
    names_.pop_back();
  }
}

}  // namespace mgs
