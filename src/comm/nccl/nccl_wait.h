// How the NCCL communicator waits for its stream without ever hanging on a
// dead peer: poll completion, and between polls ask NCCL for an asynchronous
// error (ncclCommGetAsyncError); on an error or past the deadline abort the
// communicator (ncclCommAbort makes the pending kernels return) and report
// which collective failed and why. Written against callbacks, with no NCCL or
// CUDA types, so that the policy is tested on the CPU
// (tests/gpu/nccl_wait_test.cc); nccl_communicator.cc plugs in the real calls.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common/check.h"
#include "common/status.h"

namespace mgs::nccl {

struct WaitHooks {
  // 1: complete, 0: not yet, -1: the completion query itself failed (message in *why).
  std::function<int(std::string* why)> ready;
  // Empty string: no asynchronous error; else its description.
  std::function<std::string()> asyncError;
  // Aborts the communicator; called at most once.
  std::function<void()> abort;
};

// One poll of a collective started at `started`, without waiting (the
// coordinator polls device buckets between its other work): OK with *done
// set when complete; otherwise the errors of waitOrAbort, the deadline
// measured from `started`, so a dead peer ends a polled collective too.
inline Status pollOnce(const WaitHooks& h, const std::string& what, double timeoutSeconds,
                       std::chrono::steady_clock::time_point started, bool* done) {
  *done = false;
  std::string why;
  const int r = h.ready(&why);
  if (r > 0) {
    *done = true;
    return Status::OK();
  }
  if (r < 0) {
    h.abort();
    return Status(Code::kCommunication, what + ": " + why + " (communicator aborted)");
  }
  const std::string err = h.asyncError();
  if (!err.empty()) {
    h.abort();
    return Status(Code::kCommunication, what + ": NCCL asynchronous error: " + err + " (communicator aborted)");
  }
  if (timeoutSeconds > 0) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (waited > timeoutSeconds) {
      h.abort();
      return Status(Code::kTimeout, what + ": not complete after " + std::to_string(waited) +
                                        " s (a peer died or stopped calling; communicator aborted)");
    }
  }
  return Status::OK();
}

// timeoutSeconds <= 0: no deadline (only asynchronous errors end the wait).
// Returns OK, or kCommunication (async error, failed query), or kTimeout;
// on every error the communicator has been aborted.
inline Status waitOrAbort(const WaitHooks& h, const std::string& what, double timeoutSeconds,
                          std::chrono::microseconds pollEvery = std::chrono::microseconds(50)) {
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    bool done = false;
    MGS_RETURN_IF_ERROR(pollOnce(h, what, timeoutSeconds, start, &done));
    if (done) return Status::OK();
    // Spin briefly (collectives of small buckets finish in microseconds), then sleep.
    if (spins > 64) std::this_thread::sleep_for(pollEvery);
  }
}

}  // namespace mgs::nccl
