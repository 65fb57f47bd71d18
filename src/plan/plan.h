// The planner's entry point for the runtime and the tools.
//
// The runtime records, for its first steps, the order in which gradients
// become ready and the gap between them (backward_s), builds a PlanInput on
// rank 0, calls computePlan with the MGS_PLANNER value, and broadcasts the
// groups. The library is pure: no MPI, CUDA, threads, clocks or logging; the
// caller logs `front_capped`.
//
//   PlanInput in;
//   in.layers = {{"fc.bias", 10, 1e-4}, {"fc.weight", 5120, 2e-4}, ...};  // backward order
//   in.cost.allreduce = CommModel::linear(5e-4, 8.6e-10);  // or CommModel::fit(samples, ...)
//   in.cost.allgather = CommModel::linear(1.7e-4, 1.4e-10);
//   in.cost.sparsify = {SparsifyModel::Kind::kLinear, 1e-10};
//   in.cost.workers = 8; in.cost.density = 0.001;
//   in.selection = Selection::kSeparate;  // selection off the compute stream
//   Plan plan;
//   MGS_RETURN_IF_ERROR(computePlan("mgs", in, &plan));
//   // plan.groups = {{0, 1, 2}, {3}, ...}: indices into in.layers
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/coordinator.h"
#include "plan/cost_model.h"
#include "plan/planners.h"
#include "plan/timeline.h"

namespace mgs::plan {

struct PlanInput {
  std::vector<LayerInfo> layers;  // backward order: the order gradients become ready
  CostModel cost;
  // Which timeline the baselines (fusion, layerwise, single) are evaluated
  // on: sparse = selection + allgather (§3.2), dense = allreduce (§3.1).
  // mgs* planners always use the sparse model, mgwfbp* the dense one.
  bool sparse = true;
  // Where the sparse model runs selection (timeline.h): kCompute, the MGS
  // paper's compute stream (selection delays backward), or kSeparate, the
  // runtime's coordinator thread / a side stream (backward untouched,
  // selection and allgather pipelined). Used by mgs, mgs-greedy's
  // prediction, the baselines when sparse, evaluatePlan and planTimeline.
  Selection selection = Selection::kCompute;
  int64_t fusion_threshold_bytes = 64ll << 20;  // for "fusion"
  int front_cap = kDefaultFrontCap;             // for "mgs"
  // The tensors the runtime keeps dense (too small to sparsify), charged on
  // the coordinator when cost.coordinator_loop is set (plan/coordinator.h);
  // ignored otherwise.
  std::vector<DenseTensor> dense_tensors;
  // Where the coordinator's round grid sits, when it is known (coordinator
  // model only): a round starts at this time on the backward clock, modulo
  // the grid's period (coordinatorStep's phase). Negative (default):
  // unknown, the mean over kCoordinatorPhases phases.
  double round_phase_s = -1;
};

struct Plan {
  std::string planner;
  Groups groups;                              // indices into PlanInput::layers, in backward order
  double predicted_s = 0;                     // end of the last communication, backward starting at 0
  bool sparse = true;                         // which model predicted_s is under
  Selection selection = Selection::kCompute;  // and, when sparse, which selection placement
  bool front_capped = false;                  // "mgs" only: the result may not be optimal
  int max_front = 0;                          // "mgs" only
};

// The MGS_PLANNER values: mgs, mgwfbp, mgs-greedy, mgwfbp-greedy, fusion,
// layerwise, single.
const std::vector<std::string>& plannerNames();
bool isPlannerName(const std::string& name);
// Whether a planner optimises (and reports) the sparse or the dense model;
// for the baselines this is `input_sparse`.
bool plannerIsSparse(const std::string& name, bool input_sparse);

// Checks the input (finite non-negative times and sizes, density in (0, 1],
// workers >= 1, bytes_per_element >= 1).
Status validatePlanInput(const PlanInput& input);

// Runs one planner. Errors: kInvalidArgument for an unknown planner (the
// message lists the valid ones) or an invalid input.
Status computePlan(const std::string& planner, const PlanInput& input, Plan* plan);

// The objective (§3) of any plan under the input's cost model (and, when
// `sparse`, the input's selection placement). Sparse with
// cost.coordinator_loop: coordinatorTime (the mean over the round grid's
// phases).
Status evaluatePlan(const PlanInput& input, const Groups& groups, bool sparse, double* seconds);
// Per-group timeline of a plan, for explaining it. Sparse with
// cost.coordinator_loop: the grid's middle phase, comm_end_s when the
// runtime notices the exchange is done.
Status planTimeline(const PlanInput& input, const Groups& groups, bool sparse, std::vector<GroupTiming>* timeline);

}  // namespace mgs::plan
