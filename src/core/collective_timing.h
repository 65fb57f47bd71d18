// Timing the collectives of a communicator, for cost-model calibration
// (core/calibration.h): on MPI at init, and on the device communicator
// (NCCL) at the first device bucket, where the resident stage below the
// core (src/device/cuda) provides device buffers. Below the core, in the
// host local stage's library, so that both can call it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "common/check.h"
#include "common/status.h"

namespace mgs {

// The collectives' sizes calibration times (bytes per call; the
// allgather's per rank): measureCostModel's on MPI at init, and
// deviceCollectiveSizes() on the device communicator (NCCL) at the first
// device bucket, where the calls are fast and the buffers device memory.
struct CollectiveSizes {
  std::vector<size_t> allreduce, allgather, broadcast;
  size_t bufferBytes() const;  // the largest call's bytes
  size_t recvBytes(int P) const;  // P blocks of the largest allgather
};
const CollectiveSizes& hostCollectiveSizes();
const CollectiveSizes& deviceCollectiveSizes();

// Times comm's blocking allreduce (float sum, in place on buf), allgather
// (from buf into recv) and broadcast (root 0, buf) at `sizes`: the median
// of 3 after a warm-up each, appended to *seconds in that order. buf and
// recv are in the memory comm works on (device pointers for NCCL), of
// sizes.bufferBytes() and sizes.recvBytes(P). Collective; not reduced.
Status measureCollectives(Communicator& comm, const CollectiveSizes& sizes, void* buf, void* recv,
                          std::vector<double>* seconds);

// Median wall time of `reps` calls of fn after one warm-up.
template <typename F>
Status timeMedian(int reps, double* out, F&& fn) {
  using Clock = std::chrono::steady_clock;
  MGS_RETURN_IF_ERROR(fn());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    MGS_RETURN_IF_ERROR(fn());
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  *out = t[t.size() / 2];
  return Status::OK();
}

}  // namespace mgs
