#include "core/handle_table.h"

#include <new>

namespace mgs {

bool HostBuffer::allocate(size_t bytes) {
  p_.reset();
  n_ = 0;
  if (bytes == 0) return true;
  char* p = new (std::nothrow) char[bytes];
  if (p == nullptr) return false;
  p_.reset(p, std::default_delete<char[]>());
  n_ = bytes;
  return true;
}

void HandleState::complete(Status status) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_) return;
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

bool HandleState::done() const {
  std::lock_guard<std::mutex> lk(mu_);
  return done_;
}

Status HandleState::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  return status_;
}

Status HandleState::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  return status_;
}

const char* HandleState::errorMessage() const {
  std::lock_guard<std::mutex> lk(mu_);
  return done_ ? status_.message().c_str() : "";
}

Status HandleState::completedAllgather() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (!done_) return Status(Code::kInProgress, "the allgather has not completed yet: call mgs_wait first");
  if (!status_.ok()) return status_;
  if (allgather.shape.empty()) return Status(Code::kInvalidArgument, "this handle is not an allgather");
  return Status::OK();
}

uint64_t HandleTable::add(std::shared_ptr<HandleState> state) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t id = next_++;
  map_.emplace(id, std::move(state));
  return id;
}

std::shared_ptr<HandleState> HandleTable::get(uint64_t id) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = map_.find(id);
  return it == map_.end() ? nullptr : it->second;
}

bool HandleTable::release(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  return map_.erase(id) > 0;
}

size_t HandleTable::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return map_.size();
}

void HandleTable::completeAll(const Status& status) {
  std::vector<std::shared_ptr<HandleState>> open;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [id, state] : map_) open.push_back(state);
  }
  for (auto& state : open) state->complete(status);  // a finished handle keeps its status
}

}  // namespace mgs
