#include "core/residual_store.h"

#include <algorithm>
#include <cstring>

namespace mgs {

float* ResidualStore::contiguous(const std::vector<Member>& members) {
  size_t total = 0;
  for (const auto& m : members) total += m.n;
  // Already laid out like this bucket (and owning the whole slab)?
  if (!members.empty()) {
    auto first = map_.find(*members[0].name);
    if (first != map_.end() && first->second.offset == 0 && first->second.slab->size() == total) {
      const auto& slab = first->second.slab;
      size_t off = 0;
      bool same = true;
      for (const auto& m : members) {
        auto it = map_.find(*m.name);
        if (it == map_.end() || it->second.slab != slab || it->second.offset != off || it->second.n != m.n) {
          same = false;
          break;
        }
        off += m.n;
      }
      if (same) return slab->data();
    }
  }
  auto slab = std::make_shared<std::vector<float>>(total, 0.0f);
  size_t off = 0;
  for (const auto& m : members) {
    auto it = map_.find(*m.name);
    if (it != map_.end() && it->second.n == m.n && m.n)
      std::memcpy(slab->data() + off, it->second.data(), m.n * sizeof(float));
    map_[*m.name] = Slot{slab, off, m.n};
    off += m.n;
  }
  return slab->data();
}

ResidualStore::Slab ResidualStore::adopt(const std::vector<Member>& members, Slab slab) {
  Slab old;
  size_t off = 0;
  for (const auto& m : members) {
    auto it = map_.find(*m.name);
    if (it != map_.end() && !old) old = it->second.slab;
    map_[*m.name] = Slot{slab, off, m.n};
    off += m.n;
  }
  // Only our copy left: every slot moved off it.
  if (old && old != slab && old.use_count() == 1) return old;
  return nullptr;
}

void ResidualStore::takeLocked(const std::string& name, float* dst, size_t n) {
  auto it = map_.find(name);
  if (it == map_.end() || it->second.n != n) {
    std::fill(dst, dst + n, 0.0f);
  } else if (n) {
    std::memcpy(dst, it->second.data(), n * sizeof(float));
  }
  if (it != map_.end()) map_.erase(it);
}

void ResidualStore::read(const std::string& name, float* dst, size_t n) const {
  std::lock_guard<std::mutex> lk(mu_);
  size_t held = 0;
  if (external_ && external_->holds(name, &held)) {
    if (held != n || !external_->read(name, dst, n).ok()) std::fill(dst, dst + n, 0.0f);
    return;
  }
  auto it = map_.find(name);
  if (it == map_.end() || it->second.n != n) {
    std::fill(dst, dst + n, 0.0f);
    return;
  }
  if (n) std::memcpy(dst, it->second.data(), n * sizeof(float));
}

void ResidualStore::writeLocked(const std::string& name, const float* src, size_t n) {
  auto it = map_.find(name);
  if (it != map_.end() && it->second.n == n) {  // in place: the slab stays contiguous
    if (n) std::memcpy(it->second.data(), src, n * sizeof(float));
    return;
  }
  map_[name] = Slot{std::make_shared<std::vector<float>>(src, src + n), 0, n};
}

Status ResidualStore::copyOut(const std::string& name, float* dst, size_t n) const {
  std::lock_guard<std::mutex> lk(mu_);
  size_t held = 0;
  if (external_ && external_->holds(name, &held)) {
    if (held != n)
      return Status(Code::kInvalidArgument, "tensor '" + name + "' has a residual of " + std::to_string(held) +
                                                " elements, not " + std::to_string(n));
    return external_->read(name, dst, n);
  }
  auto it = map_.find(name);
  if (it == map_.end())
    return Status(Code::kInvalidArgument, "tensor '" + name + "' has no residual (never sparsified on this rank)");
  if (it->second.n != n)
    return Status(Code::kInvalidArgument, "tensor '" + name + "' has a residual of " + std::to_string(it->second.n) +
                                              " elements, not " + std::to_string(n));
  if (n) std::memcpy(dst, it->second.data(), n * sizeof(float));
  return Status::OK();
}

Status ResidualStore::copyIn(const std::string& name, const float* src, size_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  size_t held = 0;
  // Of the same size: in place where it lives. Otherwise the old one is gone
  // and the new one lives here (the holder's next bucket takes it back).
  if (external_ && external_->holds(name, &held)) {
    if (held == n) return external_->write(name, src, n);
    external_->drop(name);
  }
  writeLocked(name, src, n);
  return Status::OK();
}

}  // namespace mgs
