#include "plan/plan.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace mgs::plan {
namespace {

struct Costs {
  ElementCost allreduce, allgather, sparsify;
  ElementCost overlap;  // empty without exchanges in flight or queued (inflight_overlap = dense_overlap = 0)
  QueuedStage queued;   // empty unless the coordinator is starved (CostModel::starvedCoordinator)
};

// The cost functions refer to `cost`, which must outlive them. The sparse
// model's two stages of a group use the exchange the runtime would choose
// for it (CostModel::chooseExchange): a dense group selects nothing and
// allreduces, an agreed one selects and broadcasts + allreduces k entries.
// With only the allgather allowed this is the papers' model, unchanged.
// The sparse communication leaves the negotiation round out: the sparse
// timeline charges rounds as the runtime shares them (timeline.h). The dense
// model keeps one round per group: the runtime's dense path fuses whatever
// one round declares, so a dense group is a round.
Costs costsOf(const CostModel& cost) {
  Costs c{[&cost](int64_t n) { return cost.allreduceSeconds(n); },
          [&cost](int64_t n) { return cost.wireSeconds(cost.chooseExchange(n), n); },
          [&cost](int64_t n) { return cost.firstStageSeconds(cost.chooseExchange(n), n); },
          {},
          {}};
  if (cost.inflight_overlap > 0 || cost.dense_overlap > 0)
    c.overlap = [&cost](int64_t n) { return cost.overlapSeconds(cost.chooseExchange(n), n); };
  if (cost.starvedCoordinator())
    c.queued = [&cost](int64_t n) { return cost.queuedStageSeconds(cost.chooseExchange(n), n); };
  return c;
}

// The coordinator model's step: at the input's round phase when it is
// known, else the mean over the grid's phases.
double coordinatorPrediction(const PlanInput& in, const Groups& g) {
  const double p = std::max(in.cost.negotiation_s, in.cost.cycle_s);
  if (in.round_phase_s >= 0 && p > 0)
    return coordinatorStep(in.layers, g, in.cost, in.selection, in.dense_tensors, std::fmod(in.round_phase_s, p));
  return coordinatorTime(in.layers, g, in.cost, in.selection, in.dense_tensors);
}

// Under the coordinator model (plan/coordinator.h) the step depends on the
// round grid, the dense tensors and allgathers in flight together: state the
// DP does not keep. The `mgs` planner then starts from the plans it can
// compute exactly on the timeline model (its DP, mgs-greedy, single,
// layer-wise, fixed thresholds of 1/1 .. 1/64 of the model's size, then
// halving to 1/1024),
// keeps the best under
// the coordinator model, and improves it by merging or splitting
// neighbouring groups while that lowers the prediction (local search: not
// exact).
Groups searchCoordinator(const PlanInput& in, const Costs& f, const Groups& dp_groups, double* best_s) {
  const int n = static_cast<int>(in.layers.size());
  auto eval = [&](const Groups& g) { return coordinatorPrediction(in, g); };
  std::vector<Groups> candidates = {dp_groups, planSingle(n), planLayerwise(n)};
  candidates.push_back(
      planMgsGreedy(in.layers, f.allgather, f.sparsify, false, in.selection, in.cost.negotiation_s, f.overlap, f.queued)
          .groups);
  // Fixed thresholds of 1/1 .. 1/64 of the model, then down to 1/1024.
  int64_t total = 0;
  for (const LayerInfo& l : in.layers) total += l.elements * in.cost.bytes_per_element;
  for (int64_t d = 1; d <= 1024; d = d < 64 ? d + 1 : 2 * d)
    candidates.push_back(planFusion(in.layers, std::max<int64_t>(1, total / d), in.cost.bytes_per_element));
  Groups best = candidates.front();
  double best_t = eval(best);
  for (size_t c = 1; c < candidates.size(); ++c) {
    const double t = eval(candidates[c]);
    if (t < best_t) best_t = t, best = candidates[c];
  }
  std::vector<int> len = groupLengths(best);
  for (bool improved = true; improved;) {
    improved = false;
    // Merge group i with i + 1.
    for (size_t i = 0; i + 1 < len.size(); ++i) {
      std::vector<int> l = len;
      l[i] += l[i + 1];
      l.erase(l.begin() + static_cast<long>(i) + 1);
      const double t = eval(groupsFromLengths(l));
      if (t < best_t) best_t = t, len = l, improved = true;
    }
    // Move the boundary between groups i and i + 1 by one layer.
    for (size_t i = 0; i + 1 < len.size(); ++i) {
      for (int d : {-1, 1}) {
        std::vector<int> l = len;
        l[i] += d;
        l[i + 1] -= d;
        if (l[i] < 1 || l[i + 1] < 1) continue;
        const double t = eval(groupsFromLengths(l));
        if (t < best_t) best_t = t, len = l, improved = true;
      }
    }
  }
  *best_s = best_t;
  return groupsFromLengths(len);
}

}  // namespace

const std::vector<std::string>& plannerNames() {
  static const std::vector<std::string> names = {"mgs",    "mgwfbp",    "mgs-greedy", "mgwfbp-greedy",
                                                 "fusion", "layerwise", "single"};
  return names;
}

bool isPlannerName(const std::string& name) {
  const auto& names = plannerNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool plannerIsSparse(const std::string& name, bool input_sparse) {
  if (name == "mgs" || name == "mgs-greedy") return true;
  if (name == "mgwfbp" || name == "mgwfbp-greedy") return false;
  return input_sparse;
}

Status validatePlanInput(const PlanInput& in) {
  for (size_t i = 0; i < in.layers.size(); ++i) {
    const LayerInfo& l = in.layers[i];
    MGS_ENSURE(l.elements >= 0, kInvalidArgument,
               "layer " << i << " ('" << l.name << "') has " << l.elements << " elements");
    MGS_ENSURE(std::isfinite(l.backward_s) && l.backward_s >= 0, kInvalidArgument,
               "layer " << i << " ('" << l.name << "') has backward_s " << l.backward_s);
  }
  const CostModel& c = in.cost;
  MGS_ENSURE(c.density > 0 && c.density <= 1, kInvalidArgument, "density must be in (0, 1], got " << c.density);
  MGS_ENSURE(c.workers >= 1, kInvalidArgument, "workers must be >= 1, got " << c.workers);
  MGS_ENSURE(c.bytes_per_element >= 1, kInvalidArgument, "bytes_per_element must be >= 1, got " << c.bytes_per_element);
  MGS_ENSURE(c.sparsify.c_s >= 0 && std::isfinite(c.sparsify.c_s), kInvalidArgument,
             "sparsify c_s must be finite and >= 0, got " << c.sparsify.c_s);
  MGS_ENSURE(in.fusion_threshold_bytes >= 0, kInvalidArgument,
             "fusion threshold must be >= 0 bytes, got " << in.fusion_threshold_bytes);
  MGS_ENSURE(c.ranks_per_node >= 1, kInvalidArgument, "ranks_per_node must be >= 1, got " << c.ranks_per_node);
  MGS_ENSURE(c.exchanges != 0 && (c.exchanges & ~kExchangeAll) == 0, kInvalidArgument,
             "exchanges must be a non-empty set of kExchange* bits, got " << c.exchanges);
  MGS_ENSURE(std::isfinite(c.cycle_s) && c.cycle_s >= 0, kInvalidArgument,
             "cycle_s must be finite and >= 0, got " << c.cycle_s);
  MGS_ENSURE(c.allgather_overlap >= 0 && c.allgather_overlap <= 1, kInvalidArgument,
             "allgather_overlap must be in [0, 1], got " << c.allgather_overlap);
  MGS_ENSURE(c.inflight_overlap >= 0 && c.inflight_overlap <= 1, kInvalidArgument,
             "inflight_overlap must be in [0, 1], got " << c.inflight_overlap);
  MGS_ENSURE(c.dense_overlap >= 0 && c.dense_overlap <= 1, kInvalidArgument,
             "dense_overlap must be in [0, 1], got " << c.dense_overlap);
  MGS_ENSURE(std::isfinite(c.group_host_s) && c.group_host_s >= 0, kInvalidArgument,
             "group_host_s must be finite and >= 0, got " << c.group_host_s);
  MGS_ENSURE(std::isfinite(c.host_steal) && c.host_steal >= 0, kInvalidArgument,
             "host_steal must be finite and >= 0, got " << c.host_steal);
  MGS_ENSURE(std::isfinite(c.host_dilation) && c.host_dilation >= 1, kInvalidArgument,
             "host_dilation must be finite and >= 1, got " << c.host_dilation);
  MGS_ENSURE(c.max_in_flight >= 1, kInvalidArgument, "max_in_flight must be >= 1, got " << c.max_in_flight);
  MGS_ENSURE(std::isfinite(in.round_phase_s), kInvalidArgument, "round_phase_s must be finite");
  for (size_t i = 0; i < in.dense_tensors.size(); ++i) {
    const DenseTensor& d = in.dense_tensors[i];
    MGS_ENSURE(d.elements >= 0 && std::isfinite(d.ready_s) && d.ready_s >= 0, kInvalidArgument,
               "dense tensor " << i << " ('" << d.name << "') has " << d.elements << " elements, ready at " << d.ready_s
                               << " s");
  }
  MGS_ENSURE(in.front_cap >= 1, kInvalidArgument, "front cap must be >= 1, got " << in.front_cap);
  MGS_ENSURE(in.selection == Selection::kCompute || in.selection == Selection::kSeparate, kInvalidArgument,
             "selection must be kCompute or kSeparate, got " << static_cast<int>(in.selection));
  return Status::OK();
}

Status computePlan(const std::string& planner, const PlanInput& in, Plan* plan) {
  if (!isPlannerName(planner)) {
    std::string valid;
    for (const auto& n : plannerNames()) valid += (valid.empty() ? "" : ", ") + n;
    return Status(Code::kInvalidArgument, "unknown planner '" + planner + "' (valid: " + valid + ")");
  }
  MGS_RETURN_IF_ERROR(validatePlanInput(in));
  const Costs f = costsOf(in.cost);
  const int n = static_cast<int>(in.layers.size());
  Plan out;
  out.planner = planner;
  out.sparse = plannerIsSparse(planner, in.sparse);
  out.selection = in.selection;
  if (planner == "mgs" || planner == "mgs-greedy" || planner == "mgwfbp" || planner == "mgwfbp-greedy") {
    PlannerResult r;
    if (planner == "mgs")
      r = planMgs(in.layers, f.allgather, f.sparsify, in.front_cap, in.selection, in.cost.negotiation_s, f.overlap,
                  f.queued);
    if (planner == "mgs-greedy")
      r = planMgsGreedy(in.layers, f.allgather, f.sparsify, false, in.selection, in.cost.negotiation_s, f.overlap,
                        f.queued);
    if (planner == "mgwfbp") r = planMgwfbp(in.layers, f.allreduce);
    if (planner == "mgwfbp-greedy") r = planMgwfbpGreedy(in.layers, f.allreduce, in.cost.allreduce.startup());
    out.groups = std::move(r.groups);
    out.predicted_s = r.predicted_s;
    out.front_capped = r.front_capped;
    out.max_front = r.max_front;
    if (in.cost.coordinator_loop && out.sparse) {
      if (planner == "mgs" && n > 0)
        out.groups = searchCoordinator(in, f, out.groups, &out.predicted_s);
      else
        MGS_RETURN_IF_ERROR(evaluatePlan(in, out.groups, out.sparse, &out.predicted_s));
    }
  } else {
    if (planner == "fusion") out.groups = planFusion(in.layers, in.fusion_threshold_bytes, in.cost.bytes_per_element);
    if (planner == "layerwise") out.groups = planLayerwise(n);
    if (planner == "single") out.groups = planSingle(n);
    MGS_RETURN_IF_ERROR(evaluatePlan(in, out.groups, out.sparse, &out.predicted_s));
  }
  *plan = std::move(out);
  return Status::OK();
}

Status planTimeline(const PlanInput& in, const Groups& groups, bool sparse, std::vector<GroupTiming>* timeline) {
  MGS_RETURN_IF_ERROR(validateGroups(groups, static_cast<int>(in.layers.size())));
  const Costs f = costsOf(in.cost);
  if (sparse && in.cost.coordinator_loop) {  // one phase of the round grid: the middle one
    const double p = std::max(in.cost.negotiation_s, in.cost.cycle_s);
    coordinatorStep(in.layers, groups, in.cost, in.selection, in.dense_tensors,
                    in.round_phase_s >= 0 && p > 0 ? std::fmod(in.round_phase_s, p) : 0.5 * p, timeline);
    return Status::OK();
  }
  *timeline = sparse ? sparseTimeline(in.layers, groups, f.allgather, f.sparsify, in.selection, in.cost.negotiation_s,
                                      f.overlap, f.queued)
                     : denseTimeline(in.layers, groups, f.allreduce);
  return Status::OK();
}

Status evaluatePlan(const PlanInput& in, const Groups& groups, bool sparse, double* seconds) {
  if (sparse && in.cost.coordinator_loop) {
    MGS_RETURN_IF_ERROR(validateGroups(groups, static_cast<int>(in.layers.size())));
    *seconds = coordinatorPrediction(in, groups);
    return Status::OK();
  }
  std::vector<GroupTiming> t;
  MGS_RETURN_IF_ERROR(planTimeline(in, groups, sparse, &t));
  *seconds = t.empty() ? 0.0 : t.back().comm_end_s;
  return Status::OK();
}

}  // namespace mgs::plan
