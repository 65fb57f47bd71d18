#include "comm/fake/rendezvous.h"

#include <chrono>

namespace mgs {

Rendezvous::Rendezvous(int size, double timeoutSeconds)
    : size_(size), timeout_(timeoutSeconds), slots_(size, nullptr) {}

void Rendezvous::abort(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (abort_.empty()) abort_ = why;
  cv_.notify_all();
}

std::string Rendezvous::abortReason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return abort_;
}

Status Rendezvous::exchange(int rank, const void* mine, const char* what, std::vector<const void*>* all) {
  std::unique_lock<std::mutex> lk(mu_);
  auto aborted = [&] {
    return Status(Code::kCommunication, std::string(what) + " on rank " + std::to_string(rank) +
                                            ": the communicator was aborted (" + abort_ + ")");
  };
  if (rank < 0 || rank >= size_)
    return Status(Code::kInvalidArgument, std::string(what) + ": rank " + std::to_string(rank) + " outside the world");
  if (!abort_.empty()) return aborted();
  slots_[rank] = mine;
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    // Every rank has published. Each rank reads this generation's pointers
    // before it can publish into the next one, which needs every rank too.
    published_ = slots_;
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    const auto ready = [&] { return generation_ != gen || !abort_.empty(); };
    if (timeout_ > 0) {
      if (!cv_.wait_for(lk, std::chrono::duration<double>(timeout_), ready)) {
        abort_ = std::string(what) + ": rank " + std::to_string(rank) + " waited " + std::to_string(timeout_) +
                 " s for ranks that never reached it";
        cv_.notify_all();
        return Status(Code::kTimeout, abort_);
      }
    } else {
      cv_.wait(lk, ready);
    }
    if (generation_ == gen) return aborted();
  }
  *all = published_;
  return Status::OK();
}

}  // namespace mgs
