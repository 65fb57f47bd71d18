#include "core/collective_timing.h"

#include <algorithm>

namespace mgs {

size_t CollectiveSizes::bufferBytes() const {
  size_t b = 0;
  for (size_t x : allreduce) b = std::max(b, x);
  for (size_t x : broadcast) b = std::max(b, x);
  for (size_t x : allgather) b = std::max(b, x);
  return b;
}

size_t CollectiveSizes::recvBytes(int P) const {
  size_t b = 0;
  for (size_t x : allgather) b = std::max(b, x);
  return b * static_cast<size_t>(P);
}

CollectiveSizes gatherCap(CollectiveSizes s, int P) {
  if (P < 1 || s.allgather.empty()) return s;
  size_t cap_total = 0;
  for (size_t x : s.allreduce) cap_total = std::max(cap_total, x);
  if (cap_total == 0) return s;
  const size_t per_rank = std::max<size_t>(16, cap_total / static_cast<size_t>(P) / 8 * 8);
  std::vector<size_t> kept;
  bool dropped = false;
  for (size_t b : s.allgather) {
    if (b <= per_rank)
      kept.push_back(b);
    else
      dropped = true;
  }
  if (dropped && (kept.empty() || per_rank > kept.back())) kept.push_back(per_rank);
  // A table needs two points: a sixteenth of the one left (every size is
  // at least 16 bytes) goes below it.
  if (kept.size() == 1) kept.insert(kept.begin(), std::max<size_t>(8, kept[0] / 16 / 8 * 8));
  s.allgather = std::move(kept);
  return s;
}

CollectiveSizes hostCollectiveSizes(int P) {
  // 48 KiB: below Open MPI's TCP eager limit (64 KiB), where a message
  // takes no rendezvous; 64 KiB is above it. On 32 emulated hosts an
  // allreduce measured 28-32 ms at 48 KiB and 45-50 ms at 64 KiB
  // (bench/cluster/allreduce_stream.c), so a line from 4 to 64 KiB priced
  // every size between above what it costs. The allgather is sampled there
  // too (its messages are the same size class; not timed separately).
  return gatherCap({{4 << 10, 48 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20},
                    {4 << 10, 48 << 10, 64 << 10, 1 << 20, 8 << 20},
                    {4 << 10, 64 << 10, 1 << 20, 8 << 20}},
                   P);
}

CollectiveSizes deviceCollectiveSizes(int P) {
  return gatherCap({{4 << 10, 64 << 10, 1 << 20, 16 << 20},
                    {4 << 10, 64 << 10, 1 << 20, 4 << 20},
                    {4 << 10, 64 << 10, 1 << 20, 4 << 20}},
                   P);
}

namespace {
// The calls timed per size (measureCollectives): 9 where a call is cheap
// and its time is the start-up that prices every small bucket, 3 above.
int calibrationReps(size_t bytes) { return bytes <= (size_t{64} << 10) ? 9 : 3; }
}  // namespace

Status measureCollectives(Communicator& comm, const CollectiveSizes& sizes, void* buf, void* recv,
                          std::vector<double>* t, double* kind_s) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  // Each kind's wall time (warm-ups included) into kind_s[k], if asked.
  auto lap = [&](int k) {
    const auto now = Clock::now();
    if (kind_s) kind_s[k] = std::chrono::duration<double>(now - t0).count();
    t0 = now;
  };
  for (size_t b : sizes.allreduce) {
    double s;
    MGS_RETURN_IF_ERROR(
        timeMedian(calibrationReps(b), &s, [&] { return comm.allreduce(buf, b / 4, MGS_FLOAT32, CommOp::kSum); }));
    t->push_back(s);
  }
  lap(0);
  for (size_t b : sizes.allgather) {
    double s;
    MGS_RETURN_IF_ERROR(timeMedian(calibrationReps(b), &s, [&] { return comm.allgather(buf, b, recv); }));
    t->push_back(s);
  }
  lap(1);
  // The agreed exchange's index block travels by broadcast (root 0; the
  // leader rotates, the cost does not depend on which rank it is).
  for (size_t b : sizes.broadcast) {
    double s;
    MGS_RETURN_IF_ERROR(timeMedian(calibrationReps(b), &s, [&] { return comm.broadcast(buf, b, 0); }));
    t->push_back(s);
  }
  lap(2);
  return Status::OK();
}

}  // namespace mgs
