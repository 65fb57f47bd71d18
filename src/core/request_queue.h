// The only channel from framework threads to the coordinator. Enqueue checks
// that the name is not already in flight on this rank; the coordinator drains
// the queue once per cycle and marks names finished when their op completes.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/request.h"

namespace mgs {

class RequestQueue {
 public:
  // kDuplicateName if `req.name` is in flight; kShutdown once closed.
  Status push(Request req);
  // Everything queued since the last drain, in enqueue order.
  std::vector<Request> drain();
  // The op named `name` completed: the name may be enqueued again.
  void finish(const std::string& name);
  // Reject further pushes with kShutdown and `why`.
  void close(const std::string& why);
  // The reason given to close(), or "" while open.
  std::string closedReason();
  // Wait until something is queued, close() is called, or `deadline` passes.
  void waitUntil(Clock::time_point deadline);
  // Ends the current (or next) waitUntil early, e.g. for shutdown.
  void wake();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Request> queue_;
  std::unordered_set<std::string> in_flight_;
  bool closed_ = false;
  bool woken_ = false;
  std::string closed_why_;
};

}  // namespace mgs
