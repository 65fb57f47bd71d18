// MGS planners: the exact Pareto DP and the authors' greedy rule.
#include <algorithm>

#include "plan/planners.h"

namespace mgs::plan {
namespace {

// A state after planning a prefix of layers: compute-stream time (backward
// plus selection so far) and the end of the last communication. `prev` and
// `from` point at the state it extends: front[prev][from].
struct State {
  double compute, comm;
  int prev, from;
};

// Adds `c` to a Pareto front kept sorted by compute ascending (so comm is
// strictly descending), unless a kept state is at least as good in both.
// Keeping the earlier of two equal states makes ties deterministic.
void insertPareto(std::vector<State>& front, const State& c) {
  auto pos = std::lower_bound(front.begin(), front.end(), c.compute,
                              [](const State& s, double t) { return s.compute < t; });
  if (pos != front.begin() && std::prev(pos)->comm <= c.comm) return;
  if (pos != front.end() && pos->compute == c.compute && pos->comm <= c.comm) return;
  auto end = pos;
  while (end != front.end() && end->comm >= c.comm) ++end;
  pos = front.erase(pos, end);
  front.insert(pos, c);
}

}  // namespace

PlannerResult planMgs(const std::vector<LayerInfo>& layers, const ElementCost& allgather,
                      const ElementCost& sparsify, int front_cap) {
  const int n = static_cast<int>(layers.size());
  PlannerResult r;
  // fronts[e]: Pareto-minimal states over plans of layers 0..e-1. The rest
  // of the timeline is non-decreasing in both coordinates, so a dominated
  // state can never lead to a better plan (algorithms.md §5.4).
  std::vector<std::vector<State>> fronts(n + 1);
  fronts[0].push_back({0.0, 0.0, -1, -1});
  for (int e = 1; e <= n; ++e) {
    std::vector<State>& front = fronts[e];
    int64_t elements = 0;
    double backward = 0;
    for (int s = e - 1; s >= 0; --s) {  // last group [s, e), shortest first
      elements += layers[s].elements;
      backward += layers[s].backward_s;
      const double select = sparsify(elements), comm = allgather(elements);
      const std::vector<State>& prev = fronts[s];
      for (int i = 0; i < static_cast<int>(prev.size()); ++i) {
        const double compute = prev[i].compute + backward + select;
        insertPareto(front, {compute, std::max(prev[i].comm, compute) + comm, s, i});
        // Later states of `prev` have larger compute; once communication
        // waits for compute, they only give states dominated by this one.
        if (compute >= prev[i].comm) break;
      }
    }
    if (static_cast<int>(front.size()) > front_cap) {
      // Drop the states with the largest comm end (the front's head).
      front.erase(front.begin(), front.end() - front_cap);
      r.front_capped = true;
    }
    r.max_front = std::max(r.max_front, static_cast<int>(front.size()));
  }
  // The least comm end is the last state of the final front.
  std::vector<int> lengths;
  int e = n, at = static_cast<int>(fronts[n].size()) - 1;
  r.predicted_s = n == 0 ? 0.0 : fronts[n][at].comm;
  while (e > 0) {
    const State& st = fronts[e][at];
    lengths.push_back(e - st.prev);
    e = st.prev;
    at = st.from;
  }
  std::reverse(lengths.begin(), lengths.end());
  r.groups = groupsFromLengths(lengths);
  return r;
}

PlannerResult planMgsGreedy(const std::vector<LayerInfo>& layers, const ElementCost& allgather,
                            const ElementCost& sparsify, bool released) {
  const int n = static_cast<int>(layers.size());
  PlannerResult r;
  if (n == 0) return r;
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
    const double tw = layers[j].backward_s + sparsify(elements + p) - sparsify(elements) -
                      sparsify(p) - (comm_start - sparsified);
    const double tsave = allgather(elements) + allgather(p) - allgather(elements + p);
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
      comm_end = comm_start + allgather(elements);
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
  r.predicted_s = sparseTime(layers, r.groups, allgather, sparsify);
  return r;
}

}  // namespace mgs::plan
