// A rendezvous of P rank threads: each publishes a pointer, and once all
// have, each gets every rank's pointer. NCCL-like failure semantics for the
// thread-rank communicators built on it (the device thread communicator,
// src/comm/cuda_thread): abort(why) ends every waiting and later exchange on
// every rank with kCommunication naming why, and a rank that waits longer
// than the timeout for the others aborts the world (kTimeout), so a rank
// that never arrives makes the others fail, never hang. Host code only;
// tested on the CPU (tests/unit/comm/rendezvous_test.cc).
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace mgs {

class Rendezvous {
 public:
  // timeoutSeconds <= 0: wait forever.
  Rendezvous(int size, double timeoutSeconds);
  int size() const { return size_; }

  // Publishes `mine` for `rank` and returns every rank's pointer, rank
  // order, once all have published. A pointer stays readable by the others
  // until its rank's next exchange returns (every rank must reach that one
  // too), so exchanging twice brackets the reads.
  Status exchange(int rank, const void* mine, const char* what, std::vector<const void*>* all);
  void abort(const std::string& why);
  std::string abortReason() const;  // empty unless aborted

 private:
  const int size_;
  const double timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<const void*> slots_, published_;
  std::string abort_;
};

}  // namespace mgs
