#include "core/residual_store.h"

#include <algorithm>
#include <cstring>

namespace mgs {

void ResidualStore::read(const std::string& name, float* dst, size_t n) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = map_.find(name);
  if (it == map_.end() || it->second.size() != n) {
    std::fill(dst, dst + n, 0.0f);
    return;
  }
  if (n) std::memcpy(dst, it->second.data(), n * sizeof(float));
}

void ResidualStore::write(const std::string& name, const float* src, size_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  map_[name].assign(src, src + n);
}

Status ResidualStore::copyOut(const std::string& name, float* dst, size_t n) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = map_.find(name);
  if (it == map_.end())
    return Status(Code::kInvalidArgument, "tensor '" + name + "' has no residual (never sparsified on this rank)");
  if (it->second.size() != n)
    return Status(Code::kInvalidArgument, "tensor '" + name + "' has a residual of " +
                                              std::to_string(it->second.size()) + " elements, not " +
                                              std::to_string(n));
  if (n) std::memcpy(dst, it->second.data(), n * sizeof(float));
  return Status::OK();
}

Status ResidualStore::copyIn(const std::string& name, const float* src, size_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  map_[name].assign(src, src + n);
  return Status::OK();
}

}  // namespace mgs
