#include "core/request_queue.h"

namespace mgs {

Status RequestQueue::push(Request req) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return Status(Code::kShutdown, closed_why_);
    if (!in_flight_.insert(req.name).second)
      return Status(Code::kDuplicateName, "tensor '" + req.name +
                                              "' is already in flight on this rank; wait for it "
                                              "before enqueueing the same name again");
    queue_.push_back(std::move(req));
  }
  cv_.notify_one();
  return Status::OK();
}

std::vector<Request> RequestQueue::drain() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<Request> out;
  out.swap(queue_);
  return out;
}

void RequestQueue::finish(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  in_flight_.erase(name);
}

void RequestQueue::close(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    closed_why_ = why;
  }
  cv_.notify_all();
}

std::string RequestQueue::closedReason() {
  std::lock_guard<std::mutex> lk(mu_);
  return closed_ ? closed_why_ : std::string();
}

void RequestQueue::waitUntil(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_until(lk, deadline, [&] { return closed_ || woken_ || !queue_.empty(); });
  woken_ = false;
}

void RequestQueue::wake() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

}  // namespace mgs
