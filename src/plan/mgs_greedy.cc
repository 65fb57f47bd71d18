// The authors' MGS merge rule (algorithms.md §5.2), kept to reproduce the paper.
#include <algorithm>

#include "plan/planners.h"

namespace mgs::plan {

PlannerResult planMgsGreedy(const std::vector<LayerInfo>& layers, const ElementCost& allgather,
                            const ElementCost& sparsify, bool released, Selection selection, double negotiation_s,
                            const ElementCost& overlap, const QueuedStage& queued) {
  const int n = static_cast<int>(layers.size());
  PlannerResult r;
  if (n == 0) return r;
  // The rule decides on a negotiation round per call (the merge saves one);
  // only the prediction charges rounds as the runtime shares them.
  const ElementCost allgather_one = [&](int64_t e) { return e > 0 ? negotiation_s + allgather(e) : 0.0; };
  // The open group: its backward began at `begin` on the compute stream and
  // holds `backward` seconds and `elements`. The authors recompute their
  // taob/taos/taoc arrays after every merge; those arrays only matter at the
  // open group, so keeping it incrementally gives the same decisions.
  std::vector<int> lengths;
  double begin = 0, backward = layers[0].backward_s, comm_end = 0;
  int64_t elements = layers[0].elements;
  int length = 1;
  for (int j = 1; j < n; ++j) {
    const double sparsified = begin + backward + sparsify(elements);
    const double comm_start = std::max(comm_end, sparsified);
    const int64_t p = layers[j].elements;
    // tw: extra waiting of the merged communication (the next backward plus
    // the extra selection, minus the slack the open group already waits);
    // tsave: the startup saved by one call instead of two (§5.2).
    const double tw =
        layers[j].backward_s + sparsify(elements + p) - sparsify(elements) - sparsify(p) - (comm_start - sparsified);
    const double tsave = allgather_one(elements) + allgather_one(p) - allgather_one(elements + p);
    // The released loop starts one layer late: it never evaluates the first
    // pair and merges it in its output only (algorithms.md §4.2).
    const bool merge = !(released && j == 1) && tw < tsave;
    if (merge) {
      ++length;
      backward += layers[j].backward_s;
      elements += p;
    } else {
      lengths.push_back(length);
      length = 1;
      comm_end = comm_start + allgather_one(elements);
      begin = sparsified;
      backward = layers[j].backward_s;
      elements = p;
    }
  }
  lengths.push_back(length);
  if (released && lengths.size() > 1 && lengths[0] == 1) {
    lengths[1] += 1;
    lengths.erase(lengths.begin());
  }
  r.groups = groupsFromLengths(lengths);
  r.predicted_s = sparseTime(layers, r.groups, allgather, sparsify, selection, negotiation_s, overlap, queued);
  return r;
}

}  // namespace mgs::plan
