#include "core/response_cache.h"

namespace mgs {

int64_t ResponseCache::lookup(const std::string& name, const Signature& sig) const {
  auto it = entries_.find(name);
  if (it == entries_.end() || !(it->second.sig == sig)) return -1;
  return static_cast<int64_t>(it->second.id);
}

void ResponseCache::put(const std::string& name, const Signature& sig) {
  auto it = entries_.find(name);
  if (it != entries_.end()) {
    it->second.sig = sig;
    return;
  }
  entries_.emplace(name, Entry{names_.size(), sig});
  names_.push_back(name);
}

void ResponseCache::erase(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  names_[it->second.id].clear();
  entries_.erase(it);
}

}  // namespace mgs
