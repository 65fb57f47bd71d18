// Cost-model calibration (MGS_CALIBRATION=auto, or a file that does not
// exist yet): the merge plan is computed from this job's own measured
// collective and selector times, not from presets. Times allreduce and
// broadcast of 4 KiB..64 MiB and 4 KiB..8 MiB, allgather of 4 KiB..8 MiB a
// rank but never more than 64 MiB received (hostCollectiveSizes), and the
// selector on 64 Ki..4 Mi elements, takes the max over ranks and fits the
// model's terms. Rank 0 logs (info) how long each part took. Which model
// a job uses ('off', 'auto', a file) is decided by its owner,
// core/job_cost_model.h.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/collective_timing.h"
#include "core/fusion.h"
#include "compress/selector.h"
#include "plan/cost_model.h"

namespace mgs {

// The bucket sizes (elements) calibration times a selector at: the CPU one
// at init, the device one at the first bucket of CUDA tensors.
inline const std::vector<size_t>& calibrationSelectionSizes() {
  static const std::vector<size_t> sizes = {size_t{1} << 16, size_t{1} << 20, size_t{1} << 22};
  return sizes;
}

// The allreduce, allgather and broadcast tables of *out from such timings
// (max-reduced over ranks first), piecewise linear through the points.
Status fitCollectives(const CollectiveSizes& sizes, const std::vector<double>& seconds, int P, plan::CostModel* out);

// Collective: every rank ends with the same terms (allreduce, allgather,
// broadcast, sparsify, negotiation_s, group_host_s, allgather_overlap and
// inflight_overlap: setAllgatherOverlaps; dense_overlap: denseOverlap); the
// other fields of *out are left as they are.
Status measureCostModel(Communicator& comm, const compress::Selector& selector, plan::CostModel* out);

// allgather_overlap from one small allgather's time and the time of k of
// them started together and then waited for: 1 when k take as long as one,
// 0 when they take k times as long (clamped to [0, 1]; 1 without a usable
// measurement).
double allgatherOverlap(double one_s, double together_s, int k);
// Sets out->allgather_overlap (the coordinator model) from one against k
// started together, and out->inflight_overlap (exchanges in flight in the
// timeline model) from one against a stream of n started one after another
// through the pipeline's window (BlockExchange::kMaxInFlight), the same
// formula.
void setAllgatherOverlaps(double one_s, double together_s, int k, double stream_one_s, double stream_s, int n,
                          plan::CostModel* out);

// dense_overlap (CostModel): how much of the table's start-up an allreduce
// queued right behind another saves, from `table_s` (the table's price of
// one allreduce of the stream's size) and `stream_s` (n of them back to
// back, each waited for before the next starts, as the runtime runs dense
// buckets): 1 - (stream_s / n) / table_s, clamped to [0, 1]; 0 without a
// usable measurement (each allreduce then costs the table's price).
double denseOverlap(double table_s, double stream_s, int n);

// The allreduce algorithm by size (Communicator::setRingMinBytes). mgs's
// ring has 2(P-1) start-ups; Open MPI's nonblocking allreduce (out of place:
// reduce-scatter and allgather by recursive halving and doubling) about
// 2 log2(P). Where a link's start-up is long against a group's transfer
// time (many ranks, small groups, slow round trips) the library's wins.
// Timed at these sizes (bytes), both algorithms, at init.
inline const std::vector<size_t>& ringChoiceSizes() {
  static const std::vector<size_t> sizes = {size_t{64} << 10, size_t{256} << 10, size_t{1} << 20, size_t{4} << 20};
  return sizes;
}

// The ring's bound from timings at ringChoiceSizes() (max-reduced over
// ranks): the smallest measured size from which the library is not 10 %
// faster than the ring, at it and at every larger measured size; twice the
// largest size when the library is 10 % faster at the largest too (the ring
// stays the algorithm for what was not measured: bandwidth-bound sums).
size_t ringMinBytesFrom(const std::vector<size_t>& sizes, const std::vector<double>& ring_s,
                        const std::vector<double>& library_s);

// The largest host tensor worth copying into a fusion buffer. Fusing a
// tensor saves the start-up of a collective of its own and costs copying it
// in and out. The start-up is the intercept of a line fitted (least squares)
// to the faster algorithm's time at each of `sizes`; the copy rate is
// `copy_bytes` in `copy_s`. The result is the size whose two copies take one
// start-up, never below `floor` (kFusionMaxTensorBytes, the bound on one
// host's shared memory, where start-ups are microseconds); `floor` too where
// the timings give no positive start-up or copy rate.
size_t fusionMaxTensorBytesFrom(const std::vector<size_t>& sizes, const std::vector<double>& ring_s,
                                const std::vector<double>& library_s, size_t copy_bytes, double copy_s, size_t floor);

// The host copy chooseAllreduceAlgorithm times for the fusion bound.
constexpr size_t kFusionCopyBytes = size_t{32} << 20;

// What chooseAllreduceAlgorithm measured and chose.
struct RingChoice {
  bool measured = false;  // false: the communicator has no choice, or one rank
  size_t ring_min_bytes = 0;
  std::vector<double> ring_s, library_s;  // at ringChoiceSizes(), max over ranks
  double copy_s = 0;                      // a copy of kFusionCopyBytes (slowest rank)
  size_t fusion_max_tensor_bytes = kFusionMaxTensorBytes;  // fusionMaxTensorBytesFrom(...) when measured
};

// Collective, at init (MGS_CALIBRATION other than 'off', no MGS_PLAN_FILE):
// times both algorithms and a host copy on every rank, takes the slowest
// rank's figures and sets the bound on `comm` (the same on every rank), and
// the fusion bound from the same figures (the same on every rank too). A
// communicator without the choice, or of one rank, is left as it is.
Status chooseAllreduceAlgorithm(Communicator& comm, RingChoice* out);

}  // namespace mgs
