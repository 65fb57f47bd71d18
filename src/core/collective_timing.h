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
// of 3 after a warm-up each (of kSmallCallReps after kSmallCallWarmups up to
// kSmallCallBytes, below), appended to *seconds in that order. buf and
// recv are in the memory comm works on (device pointers for NCCL), of
// sizes.bufferBytes() and sizes.recvBytes(P). Collective; not reduced.
Status measureCollectives(Communicator& comm, const CollectiveSizes& sizes, void* buf, void* recv,
                          std::vector<double>* seconds);

// Calls of at most kSmallCallBytes are start-up bound, cheap, and decide
// the cost model's start-ups (the negotiation round's too): they are timed
// kSmallCallReps times after kSmallCallWarmups. On 16 emulated hosts the
// first calls after one warm-up run slow: six inits read a 4 KiB allgather
// at 7.0-14.4 ms (median 10.4) that way, and at 5.8-10.7 ms (median 7.0)
// after 3 warm-ups (bench/cluster/calibration_spread.sh, bench/NOTES.md).
constexpr size_t kSmallCallBytes = 64 << 10;
constexpr int kSmallCallReps = 9;
constexpr int kSmallCallWarmups = 3;

// Median wall time of `reps` calls of fn after `warmups` (at least one).
template <typename F>
Status timeMedian(int reps, double* out, F&& fn, int warmups = 1) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < std::max(1, warmups); ++i) MGS_RETURN_IF_ERROR(fn());
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
