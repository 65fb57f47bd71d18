// The timeline models both planners optimise (algorithms.md §3), as plain
// functions of a plan, so any plan can be evaluated and compared.
//
// Indexing: layers are in BACKWARD order (index 0 is the first gradient to
// become ready), unlike the papers, which index in forward order. A plan is a
// list of groups; each group is a run of consecutive indices, and the groups
// together cover 0..L-1 in order, e.g. {{0, 1}, {2}, {3, 4, 5}}.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace mgs::plan {

struct LayerInfo {
  std::string name;
  int64_t elements = 0;     // gradient elements of this tensor
  double backward_s = 0.0;  // backward time charged to it: gap since the previous gradient
};

using Group = std::vector<int>;
using Groups = std::vector<Group>;

// Cost of one call on a group of `elements` (communication or selection).
using ElementCost = std::function<double(int64_t elements)>;

// Where the sparse model runs each group's selection (top-k or threshold).
//  kCompute:  on the compute stream right after the group's last backward,
//             delaying the rest of backward (§3.2, the MGS paper's GPU model).
//  kSeparate: on a stage of its own (mgs's coordinator thread, or a GPU side
//             stream) while backward goes on untouched: a two-stage pipeline,
//             selection of one group at a time, then its allgather, which
//             overlaps the selection of the next group.
enum class Selection { kCompute, kSeparate };

// Where one group sits in time. The group's last layer finished backward at
// `ready_s`. Selection (sparse model only) runs from `select_start_s` to
// `sparsified_s`: under kCompute on the compute stream, starting at
// `ready_s` and delaying the rest of backward; under kSeparate on its own
// stage, starting once the group is ready and the previous selection is done.
// Communication runs from `comm_start_s` to `comm_end_s`. Dense model:
// select_start_s = sparsified_s = ready_s.
// With a negotiation round (sparseTimeline's `negotiation_s` > 0),
// `negotiated_s` is the end of the round that declared the group ready
// (`shared_round`: a round an earlier group had already started); without
// one it equals the time the group could first be negotiated.
struct GroupTiming {
  int first = 0, last = 0;  // layer indices, inclusive
  int64_t elements = 0;
  double ready_s = 0, sparsified_s = 0, comm_start_s = 0, comm_end_s = 0;
  double select_start_s = 0;
  double negotiated_s = 0;
  bool shared_round = false;
};

// The runtime's negotiation rounds (core/controller.h), as the sparse model
// charges them. A round is one small allreduce over every rank, run by the
// coordinator thread, which also runs the selections (Selection::kSeparate);
// it declares ready every group whose last tensor was enqueued before the
// round began. So groups that become ready while one round is running, or
// before it starts, share it, and a round costs `negotiation_s` once, not
// once per group:
//   group ready at R, last round started at H, coordinator free at S:
//   R <= H: the group shares that round and queues behind the selections
//           of its round: selection from S;
//   R >  H: a new round from H' = max(S, R) to H' + negotiation_s, then
//           the selection.
// Under Selection::kCompute (selection on the compute stream) the rounds
// are a stage of their own between selection and communication, with the
// same rule on the time a group's selection ends. negotiation_s = 0 gives
// the model without rounds, bit for bit.
struct RoundStep {
  double start = 0, end = 0;  // the round that declares the group
  bool shared = false;        // it is the previous round
};
// `last_start`: H, the last round's start (-1 before the first round);
// `free`: when the next round can start at the earliest (kSeparate: the
// coordinator's end of work; kCompute: the last round's end); `trigger`:
// when the group can first be negotiated.
inline RoundStep negotiationRound(double last_start, double last_end, double free, double trigger,
                                  double negotiation_s) {
  if (trigger <= last_start) return {last_start, last_end, true};
  const double start = trigger > free ? trigger : free;
  return {start, start + negotiation_s, false};
}

// The first stage of a group that shares the round before it, when the
// coordinator waits for a core each time it wakes (CostModel::host_dilation
// > 1): the kSeparate model with negotiation rounds (negotiation_s > 0) runs
// such a group right after the previous group's, in the same turn on a
// core, at this cost; a group that a round of its own declares costs
// `sparsify`, after which the coordinator waits for a core again. At most
// `sparsify`. Empty, or without rounds: `sparsify` for every group.
using QueuedStage = ElementCost;

// §3.1, WFBP with merging: backward never waits; group g starts its allreduce
// when it is ready and the previous allreduce has finished.
std::vector<GroupTiming> denseTimeline(const std::vector<LayerInfo>& layers, const Groups& groups,
                                       const ElementCost& allreduce);
// §3.2, MGS: each group is sparsified, then allgathered on the
// communication stream. kCompute: selection on the compute stream right
// after the group's last backward (compute_g = compute_{g-1} + backward +
// t_s). kSeparate: backward untouched; ready_g = sum of backward up to the
// group's last layer, sel_end_g = max(ready_g, sel_end_{g-1}) + t_s,
// comm_end_g = max(sel_end_g, comm_end_{g-1}) + T_ag.
// `negotiation_s`: one negotiation round's time (see Rounds above); the
// communication costs must then leave it out.
// `overlap` (exchanges in flight, CostModel::overlapSeconds): how much of a
// group's exchange may run while the one before it is still in flight. The
// exchange then starts when the group is ready for it, or `overlap` before
// the previous one ends, whichever is later, and takes its full time:
// comm_end_g = max(ready_g, comm_end_{g-1} - overlap_g) + T_g. Empty (or 0,
// at most T_g): one exchange after another, the papers' model, bit for bit.
std::vector<GroupTiming> sparseTimeline(const std::vector<LayerInfo>& layers, const Groups& groups,
                                        const ElementCost& allgather, const ElementCost& sparsify,
                                        Selection selection = Selection::kCompute, double negotiation_s = 0,
                                        const ElementCost& overlap = {}, const QueuedStage& queued = {});

// End of the last communication (the objective); 0 for no layers.
double denseTime(const std::vector<LayerInfo>& layers, const Groups& groups, const ElementCost& allreduce);
double sparseTime(const std::vector<LayerInfo>& layers, const Groups& groups, const ElementCost& allgather,
                  const ElementCost& sparsify, Selection selection = Selection::kCompute, double negotiation_s = 0,
                  const ElementCost& overlap = {}, const QueuedStage& queued = {});

// "compute" / "separate", for tools, logs and configuration.
const char* selectionName(Selection selection);
// Parses "compute" or "separate"; false (and *out unchanged) otherwise.
bool parseSelection(const std::string& name, Selection* out);

// OK iff `groups` are non-empty runs of consecutive indices covering 0..L-1.
Status validateGroups(const Groups& groups, int num_layers);

// Conversions between groups and per-group lengths ({2, 1, 3} above).
Groups groupsFromLengths(const std::vector<int>& lengths);
std::vector<int> groupLengths(const Groups& groups);

}  // namespace mgs::plan
