// Handles: the completion record of one asynchronous operation (the c10d
// "Work" contract). The coordinator completes a HandleState exactly once;
// framework threads poll or wait on it. HandleTable maps the integer handles of
// the C ABI to states.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace mgs {

// Host bytes that are not zero-filled: an allgather result is written whole
// by the collective, and touching gigabytes twice (or committing memory the
// host lacks before the size is agreed) is what must not happen.
class HostBuffer {
 public:
  // false (and empty) if the memory cannot be had; never throws.
  bool allocate(size_t bytes);
  char* data() const { return p_.get(); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  std::shared_ptr<char[]> p_;
  size_t n_ = 0;
};

struct AllgatherResult {
  std::vector<int64_t> shape;       // output shape
  std::vector<int64_t> rank_sizes;  // first dimension of each rank
  HostBuffer data;                  // host copy of the concatenated output
};

class HandleState {
 public:
  // Complete once; later calls are ignored (the first status wins).
  void complete(Status status);
  bool done() const;
  // Blocks until complete; returns the final status.
  Status wait();
  // Valid after done(): the final status.
  Status status() const;
  // The failure message ("" on success); stable once done.
  const char* errorMessage() const;
  // OK if this handle finished an allgather successfully; otherwise why not.
  Status completedAllgather() const;

  // Filled by the coordinator before complete() for allgather (and alltoall:
  // rank_sizes are then the rows received from each rank).
  AllgatherResult allgather;
  // Filled before complete(): a new process set's id; the last rank to join.
  int64_t value = 0;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

class HandleTable {
 public:
  uint64_t add(std::shared_ptr<HandleState> state);
  std::shared_ptr<HandleState> get(uint64_t id) const;  // nullptr if unknown
  bool release(uint64_t id);
  size_t size() const;
  // Complete every handle still open with `status` (after the coordinator
  // stopped, so that no waiter can block forever).
  void completeAll(const Status& status);

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<HandleState>> map_;
};

}  // namespace mgs
