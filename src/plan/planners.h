// The merge planners as functions of the layer list and cost functions.
// Layers are in backward order (see timeline.h). Every planner is
// deterministic: same input, same groups, bit for bit, on every rank.
// Most callers want computePlan() in plan.h, which picks the cost functions
// from a CostModel; these are the building blocks and what the tests drive.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/timeline.h"

namespace mgs::plan {

struct PlannerResult {
  Groups groups;
  double predicted_s = 0;     // the objective of the planner's own model
  bool front_capped = false;  // mgs DP only: a Pareto front was truncated
  int max_front = 0;          // mgs DP only: largest front kept
};

// Exact MG-WFBP (algorithms.md §4.4): minimises denseTime() over all
// 2^(L-1) plans in O(L^2). Ties go to the plan whose last group is shortest.
PlannerResult planMgwfbp(const std::vector<LayerInfo>& layers, const ElementCost& allreduce);

// The authors' MG-WFBP rule (§4.2, the correct TPDS loop), streamed in O(L):
// merge the open group into the next layer iff that layer becomes ready less
// than `startup_s` (the allreduce's `a`) after the open group could start.
PlannerResult planMgwfbpGreedy(const std::vector<LayerInfo>& layers, const ElementCost& allreduce, double startup_s);

// Default cap on each Pareto front of planMgs (algorithms.md §5.4).
constexpr int kDefaultFrontCap = 256;

// Exact MGS (§5.4): Pareto DP over (first-stage end, comm end) states;
// minimises sparseTime(..., selection). The first stage is the compute
// stream under Selection::kCompute and the selection stage under kSeparate
// (timeline.h); the same DP with a different transition. If a front outgrows
// `front_cap`, states are dropped (spread evenly along the front), the
// result becomes a heuristic, and front_capped says so. Ties: fewest groups
// at the end of the plan first.
//
// `negotiation_s` > 0 charges negotiation rounds as the runtime runs them
// (timeline.h, negotiationRound; `allgather` must then leave the round
// out). The state then also holds the last round's start, and the DP keeps
// the states no other state beats in all three (first stage, comm end, a
// later round start). That is no longer exact: a state that waits longer
// can catch more groups in its round. Tested against brute force.
//
// `overlap`: exchanges in flight (sparseTimeline). The transition stays
// non-decreasing in both coordinates, so the DP stays exact without rounds;
// the bounds charge each later group its exchange less its overlap.
//
// `queued`: a starved coordinator's first stage for a group that shares a
// round (timeline.h, QueuedStage), with rounds under kSeparate only; the
// bounds charge the lesser of the two first stages.
PlannerResult planMgs(const std::vector<LayerInfo>& layers, const ElementCost& allgather, const ElementCost& sparsify,
                      int front_cap = kDefaultFrontCap, Selection selection = Selection::kCompute,
                      double negotiation_s = 0, const ElementCost& overlap = {}, const QueuedStage& queued = {});

// The authors' MGS rule (§5.2), with the off-by-one fixed. `released`
// reproduces the released code instead, which always puts the first two
// gradients (the paper's L-1 and L-2) in one group without evaluating it.
// The merge decisions always follow the paper's compute-stream model, with
// one negotiation round per call; `selection` and `negotiation_s` only pick
// the model predicted_s is evaluated on (with `overlap` and `queued`,
// sparseTimeline's).
PlannerResult planMgsGreedy(const std::vector<LayerInfo>& layers, const ElementCost& allgather,
                            const ElementCost& sparsify, bool released = false,
                            Selection selection = Selection::kCompute, double negotiation_s = 0,
                            const ElementCost& overlap = {}, const QueuedStage& queued = {});

// Horovod/DDP-style fusion (§6): close a group once it holds at least
// `threshold_bytes`; 0 gives one group per layer.
Groups planFusion(const std::vector<LayerInfo>& layers, int64_t threshold_bytes, int bytes_per_element);
Groups planLayerwise(int num_layers);
Groups planSingle(int num_layers);

}  // namespace mgs::plan
