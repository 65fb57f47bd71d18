// MG-WFBP planners: the exact O(L^2) DP and the authors' greedy rule.
#include <algorithm>
#include <limits>

#include "plan/planners.h"

namespace mgs::plan {

PlannerResult planMgwfbp(const std::vector<LayerInfo>& layers, const ElementCost& allreduce) {
  const int n = static_cast<int>(layers.size());
  // ready[e]: time the first e layers have finished backward. It does not
  // depend on the plan, because backward never waits for communication.
  std::vector<double> ready(n + 1, 0.0);
  for (int i = 0; i < n; ++i) ready[i + 1] = ready[i] + layers[i].backward_s;

  // best[e]: least end of communication over plans of layers 0..e-1;
  // first[e]: first layer of the last group in that plan. Optimal
  // substructure: the last group [s, e) ends at max(best[s], ready[e]) + T,
  // which is non-decreasing in best[s] and the rest is independent of the
  // prefix plan (algorithms.md §4.4).
  std::vector<double> best(n + 1, 0.0);
  std::vector<int> first(n + 1, 0);
  for (int e = 1; e <= n; ++e) {
    best[e] = std::numeric_limits<double>::infinity();
    int64_t elements = 0;
    for (int s = e - 1; s >= 0; --s) {  // shortest last group first: it wins ties
      elements += layers[s].elements;
      const double v = std::max(best[s], ready[e]) + allreduce(elements);
      if (v < best[e]) best[e] = v, first[e] = s;
    }
  }
  std::vector<int> lengths;
  for (int e = n; e > 0; e = first[e]) lengths.push_back(e - first[e]);
  std::reverse(lengths.begin(), lengths.end());
  PlannerResult r;
  r.groups = groupsFromLengths(lengths);
  r.predicted_s = best[n];
  return r;
}

PlannerResult planMgwfbpGreedy(const std::vector<LayerInfo>& layers, const ElementCost& allreduce, double startup_s) {
  const int n = static_cast<int>(layers.size());
  PlannerResult r;
  if (n == 0) return r;
  // The open group ends at layer l; `start` is when its allreduce could
  // start (taoc of the authors' code), `elements` its size. The authors'
  // three branches reduce to one test because tc >= a (§4.2): merge iff the
  // next layer is ready less than `a` after `start`. Kept in the authors'
  // form so the reproduction is literal.
  std::vector<int> lengths;
  double ready = layers[0].backward_s, start = ready;
  int64_t elements = layers[0].elements;
  int length = 1;
  for (int l = 1; l < n; ++l) {
    const double next_ready = ready + layers[l].backward_s;
    const double comm = allreduce(elements);
    bool merge = false;
    if (next_ready < start + comm) merge = start > next_ready || next_ready - start < startup_s;
    if (merge) {
      ++length;
      start = std::max(start, next_ready);
    } else {
      lengths.push_back(length);
      length = 1;
      start = std::max(start + comm, next_ready);
      elements = 0;
    }
    elements += layers[l].elements;
    ready = next_ready;
  }
  lengths.push_back(length);
  r.groups = groupsFromLengths(lengths);
  r.predicted_s = denseTime(layers, r.groups, allreduce);
  return r;
}

}  // namespace mgs::plan
