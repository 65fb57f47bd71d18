#include "plan/timeline.h"

#include <algorithm>

#include "common/check.h"

namespace mgs::plan {

std::vector<GroupTiming> denseTimeline(const std::vector<LayerInfo>& layers, const Groups& groups,
                                       const ElementCost& allreduce) {
  std::vector<GroupTiming> out;
  out.reserve(groups.size());
  double ready = 0, comm_end = 0;
  for (const Group& g : groups) {
    GroupTiming t;
    t.first = g.front();
    t.last = g.back();
    for (int i : g) {
      ready += layers[i].backward_s;
      t.elements += layers[i].elements;
    }
    t.ready_s = t.select_start_s = t.sparsified_s = t.negotiated_s = ready;
    t.comm_start_s = std::max(comm_end, ready);
    t.comm_end_s = comm_end = t.comm_start_s + allreduce(t.elements);
    out.push_back(t);
  }
  return out;
}

std::vector<GroupTiming> sparseTimeline(const std::vector<LayerInfo>& layers, const Groups& groups,
                                        const ElementCost& allgather, const ElementCost& sparsify, Selection selection,
                                        double negotiation_s, const ElementCost& overlap, const QueuedStage& queued) {
  std::vector<GroupTiming> out;
  out.reserve(groups.size());
  // kCompute: `compute` is the compute stream (backward + selection) and
  // `ready` follows it. kSeparate: `ready` is backward alone and `selected`
  // the end of the coordinator's work (rounds and selections).
  double compute = 0, ready = 0, selected = 0, comm_end = 0;
  double round_start = -1, round_end = 0;  // the last negotiation round
  for (const Group& g : groups) {
    GroupTiming t;
    t.first = g.front();
    t.last = g.back();
    for (int i : g) {
      compute += layers[i].backward_s;
      ready += layers[i].backward_s;
      t.elements += layers[i].elements;
    }
    RoundStep r;
    if (selection == Selection::kCompute) {
      t.ready_s = t.select_start_s = compute;
      t.sparsified_s = compute = compute + sparsify(t.elements);
      r = negotiationRound(round_start, round_end, round_end, t.sparsified_s, negotiation_s);
      t.negotiated_s = r.end;
    } else {
      t.ready_s = ready;
      r = negotiationRound(round_start, round_end, selected, ready, negotiation_s);
      // A shared round has ended before the coordinator's current work.
      t.select_start_s = r.shared ? selected : r.end;
      t.negotiated_s = r.end;
      const bool in_turn = r.shared && negotiation_s > 0 && queued;
      t.sparsified_s = selected = t.select_start_s + (in_turn ? queued(t.elements) : sparsify(t.elements));
    }
    t.shared_round = r.shared;
    round_start = r.start, round_end = r.end;
    const double comm = allgather(t.elements);
    const double ov = overlap ? std::clamp(overlap(t.elements), 0.0, comm) : 0.0;
    t.comm_start_s = std::max(comm_end - ov, selection == Selection::kCompute ? r.end : t.sparsified_s);
    t.comm_end_s = comm_end = t.comm_start_s + comm;
    out.push_back(t);
  }
  return out;
}

double denseTime(const std::vector<LayerInfo>& layers, const Groups& groups, const ElementCost& allreduce) {
  const auto t = denseTimeline(layers, groups, allreduce);
  return t.empty() ? 0.0 : t.back().comm_end_s;
}

double sparseTime(const std::vector<LayerInfo>& layers, const Groups& groups, const ElementCost& allgather,
                  const ElementCost& sparsify, Selection selection, double negotiation_s, const ElementCost& overlap,
                  const QueuedStage& queued) {
  const auto t = sparseTimeline(layers, groups, allgather, sparsify, selection, negotiation_s, overlap, queued);
  return t.empty() ? 0.0 : t.back().comm_end_s;
}

const char* selectionName(Selection selection) { return selection == Selection::kSeparate ? "separate" : "compute"; }

bool parseSelection(const std::string& name, Selection* out) {
  if (name == "compute") {
    *out = Selection::kCompute;
  } else if (name == "separate") {
    *out = Selection::kSeparate;
  } else {
    return false;
  }
  return true;
}

Status validateGroups(const Groups& groups, int num_layers) {
  int next = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    MGS_ENSURE(!groups[g].empty(), kInvalidArgument, "group " << g << " is empty");
    for (int i : groups[g]) {
      MGS_ENSURE(i == next, kInvalidArgument,
                 "group " << g << " holds layer " << i << " where layer " << next
                          << " was expected (groups must be consecutive runs in backward order)");
      ++next;
    }
  }
  MGS_ENSURE(next == num_layers, kInvalidArgument, "groups cover " << next << " layers, the model has " << num_layers);
  return Status::OK();
}

Groups groupsFromLengths(const std::vector<int>& lengths) {
  Groups groups;
  groups.reserve(lengths.size());
  int next = 0;
  for (int n : lengths) {
    Group g(n);
    for (int& i : g) i = next++;
    groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<int> groupLengths(const Groups& groups) {
  std::vector<int> lengths;
  lengths.reserve(groups.size());
  for (const Group& g : groups) lengths.push_back(static_cast<int>(g.size()));
  return lengths;
}

}  // namespace mgs::plan
