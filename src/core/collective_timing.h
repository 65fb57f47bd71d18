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
// deviceCollectiveSizes(P) on the device communicator (NCCL) at the first
// device bucket, where the calls are fast and the buffers device memory.
struct CollectiveSizes {
  std::vector<size_t> allreduce, allgather, broadcast;
  size_t bufferBytes() const;  // the largest call's bytes
  size_t recvBytes(int P) const;  // P blocks of the largest allgather
};
// The sizes for a world of P ranks. An allgather of b bytes a rank
// receives P x b: at a fixed per-rank size that grows with the world (8 MiB
// a rank is 2 GiB a rank to receive at 256 ranks, and minutes of start-up on
// slow links), so the allgather sizes are capped by what they receive in
// all: no more than the largest allreduce sends (gatherCap). Sizes over the
// cap are dropped and the cap itself (b = cap / P) takes their place.
CollectiveSizes hostCollectiveSizes(int P);
CollectiveSizes deviceCollectiveSizes(int P);
// `sizes` with its allgather sizes capped for P ranks as above (exposed for
// tests): every size b with P x b <= the largest allreduce size stays; if
// any was dropped, the largest multiple of 8 bytes with P x b within the
// cap (16 bytes at least) is appended, unless it is no larger than the
// last size kept. Two sizes at least are left (a table's two points):
// where one would be, a sixteenth of it (8 bytes at least) goes below it.
CollectiveSizes gatherCap(CollectiveSizes sizes, int P);

// Times comm's blocking allreduce (float sum, in place on buf), allgather
// (from buf into recv) and broadcast (root 0, buf) at `sizes`: the median
// of 9 calls up to 64 KiB (cheap calls whose time is the start-up that
// prices every small bucket) and of 3 above, after a warm-up each,
// appended to *seconds in that order. buf and
// recv are in the memory comm works on (device pointers for NCCL), of
// sizes.bufferBytes() and sizes.recvBytes(P). Collective; not reduced.
// `kind_s`, if given (3 entries): this rank's wall time of all the
// allreduces, allgathers and broadcasts, warm-ups included.
Status measureCollectives(Communicator& comm, const CollectiveSizes& sizes, void* buf, void* recv,
                          std::vector<double>* seconds, double* kind_s = nullptr);

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
