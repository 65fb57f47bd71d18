// The runtime's coordinator loop as a cost model (issue 14): what the sparse
// timeline (timeline.h) leaves out, from the code of core/runtime.cc,
// core/controller.cc, core/executor.cc and core/sparse_*.cc.
//
//  - Rounds on a grid. The coordinator runs negotiation rounds back to back,
//    idle or not: an iteration is a round (negotiation_s), then the work the
//    round declared, then a wait until `cycle_s` after the iteration began,
//    cut short by any enqueue. A round declares what was enqueued before it
//    began, so a group that becomes ready during a round waits for it to end
//    and for the next one; where backward starts in that grid is unknown, so
//    the model averages over `kCoordinatorPhases` evenly spread phases.
//  - Small dense tensors. Tensors the runtime keeps dense (below
//    MGS_MIN_SPARSE_ELEMENTS) are negotiated in the same rounds; the ones one
//    round declares are allreduced together, started before the sparse
//    buckets of that round (Executor::run). Host tensors over MPI go in
//    flight (Executor::startInFlight) and complete at a poll; CUDA tensors,
//    and any under MGS_NONFINITE=error, run to their end on the coordinator
//    first (CostModel::dense_in_flight false).
//  - Blocking exchanges. The agreed, hierarchical and dense exchanges of a
//    sparse bucket run to their end on the coordinator (runBucket).
//  - Allgathers in flight. Up to `max_in_flight` (BlockExchange::kMaxInFlight,
//    4) stay in flight: starting one more makes the coordinator wait for the
//    oldest (SparsePipeline::pushInFlight). Their transfers share the link and a fraction
//    `allgather_overlap` of their start-ups overlaps: an allgather ends no
//    earlier than its start + T_ag, nor than the previous one's end + T_ag -
//    allgather_overlap x start-up (1: start-ups overlap fully, 0: one after
//    another).
//  - Completion seen late. An allgather's end is noticed by the poll after a
//    round's work (or inside a bucket start), oldest first.
//
// Every term is a calibrated cost (negotiation_s, the allreduce, allgather
// and selection models), a runtime setting (cycle_s, max_in_flight) or a
// property of the network that calibration measures (allgather_overlap:
// one small allgather against four in flight together, core/calibration.h;
// 1 in a file without it); none is fitted to measured steps. Pure functions, like the rest of plan/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/cost_model.h"
#include "plan/timeline.h"

namespace mgs::plan {

// A tensor the runtime allreduces densely (too small to sparsify), which the
// planner does not merge: only its size and when backward produces it.
struct DenseTensor {
  std::string name;
  int64_t elements = 0;
  double ready_s = 0;  // backward clock, as LayerInfo's cumulative backward_s
};

// Phases of the round grid the model averages over.
constexpr int kCoordinatorPhases = 16;

// One step under the coordinator model, backward starting at 0 while a round
// that began at `phase_s - period` is running (period = max(negotiation_s,
// cycle_s); phase_s in [0, period)). Fills per-group timings if asked
// (comm_end_s: when the runtime notices the group's exchange is done) and
// returns when the last group and the last dense tensor are done.
double coordinatorStep(const std::vector<LayerInfo>& layers, const Groups& groups, const CostModel& cost,
                       Selection selection, const std::vector<DenseTensor>& dense, double phase_s,
                       std::vector<GroupTiming>* timeline = nullptr);

// The mean of coordinatorStep over kCoordinatorPhases phases.
double coordinatorTime(const std::vector<LayerInfo>& layers, const Groups& groups, const CostModel& cost,
                       Selection selection, const std::vector<DenseTensor>& dense);

}  // namespace mgs::plan
