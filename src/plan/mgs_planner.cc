// The exact MGS planner: a Pareto DP (algorithms.md §5.4) with branch and
// bound.
#include <algorithm>
#include <limits>

#include "plan/planners.h"

namespace mgs::plan {
namespace {

// A state after planning a prefix of layers: the end of the stage before
// communication and the end of the last communication. The first stage is
// the compute stream (backward plus selection so far) under
// Selection::kCompute, the selection stage under kSeparate; the field keeps
// the name `compute`. `prev` and `from` point at the state it extends:
// front[prev][from].
struct State {
  double compute, comm;
  int prev, from;
};

// The group lengths of the plan that ends in state fronts[n][at], first
// group first, following each state's (prev, from) back to layer 0.
template <typename S>
std::vector<int> backtrack(const std::vector<std::vector<S>>& fronts, int n, int at) {
  std::vector<int> lengths;
  for (int e = n; e > 0;) {
    const S& st = fronts[e][at];
    lengths.push_back(e - st.prev);
    e = st.prev;
    at = st.from;
  }
  std::reverse(lengths.begin(), lengths.end());
  return lengths;
}

// The one place the two selection models differ: the first stage's end
// after appending group [s, e) to a prefix whose first stage ends at
// `stage`. `backward` is the backward time of layers s..e-1, `ready` the
// time layer e-1 finishes backward with backward untouched, `select` the
// group's selection time. Both are non-decreasing in `stage`, which is all
// the Pareto argument and the early exits below need.
struct ComputeStreamStage {  // §3.2: selection delays the rest of backward
  double operator()(double stage, double backward, double /*ready*/, double select) const {
    return stage + backward + select;
  }
};
struct SeparateStage {  // selection on its own stage, one group at a time
  double operator()(double stage, double /*backward*/, double ready, double select) const {
    return std::max(stage, ready) + select;
  }
};

// Adds `c` to a Pareto front kept sorted by compute ascending (so comm is
// strictly descending), unless a kept state is at least as good in both.
// Keeping the earlier of two equal states makes ties deterministic.
void insertPareto(std::vector<State>& front, const State& c) {
  auto pos =
      std::lower_bound(front.begin(), front.end(), c.compute, [](const State& s, double t) { return s.compute < t; });
  if (pos != front.begin() && std::prev(pos)->comm <= c.comm) return;
  if (pos != front.end() && pos->compute == c.compute && pos->comm <= c.comm) return;
  auto end = pos;
  while (end != front.end() && end->comm >= c.comm) ++end;
  pos = front.erase(pos, end);
  front.insert(pos, c);
}

// Keeps `cap` states spread evenly along the front, always including both
// ends (least compute, least comm end). Dropping only the head (largest comm
// end) loses up to 1.5% on BERT-base at 1,024 workers; spreading keeps the
// trade-offs of both kinds.
void thin(std::vector<State>& front, int cap) {
  const size_t n = front.size();
  std::vector<State> kept;
  kept.reserve(cap);
  for (int i = 0; i < cap; ++i) kept.push_back(front[cap == 1 ? n - 1 : i * (n - 1) / (cap - 1)]);
  front = std::move(kept);
}

// Selection, allgather and overlap time of every group [s, e), evaluated
// once: the bounds and both DP passes read them. Row e holds s = e-1 down
// to 0. The overlap is clamped to [0, comm] as sparseTimeline clamps it.
class GroupCosts {
 public:
  GroupCosts(const std::vector<LayerInfo>& layers, const ElementCost& allgather, const ElementCost& sparsify,
             const ElementCost& overlap, const QueuedStage& queued = {})
      : n_(static_cast<int>(layers.size())),
        comm_(size_t(n_) * (n_ + 1) / 2),
        select_(comm_.size()),
        overlap_(comm_.size(), 0.0),
        queued_(queued ? comm_.size() : 0) {
    for (int e = 1; e <= n_; ++e) {
      int64_t elements = 0;
      for (int s = e - 1; s >= 0; --s) {
        elements += layers[s].elements;
        comm_[at(s, e)] = allgather(elements);
        select_[at(s, e)] = sparsify(elements);
        if (overlap) overlap_[at(s, e)] = std::clamp(overlap(elements), 0.0, comm_[at(s, e)]);
        if (queued) queued_[at(s, e)] = queued(elements);
      }
    }
  }
  double comm(int s, int e) const { return comm_[at(s, e)]; }
  double select(int s, int e) const { return select_[at(s, e)]; }
  double overlap(int s, int e) const { return overlap_[at(s, e)]; }
  // The first stage of a group that shares the round before it (QueuedStage;
  // select() without one), and the lesser of the two: what the bounds charge.
  double queued(int s, int e) const { return queued_.empty() ? select(s, e) : queued_[at(s, e)]; }
  double leastSelect(int s, int e) const { return std::min(select(s, e), queued(s, e)); }

 private:
  size_t at(int s, int e) const { return size_t(e) * (e - 1) / 2 + (e - 1 - s); }
  int n_;
  std::vector<double> comm_, select_, overlap_, queued_;
};

// Lower bounds on what layers e..n-1 still add to a state, over every way of
// grouping them, from exact O(L^2) suffix DPs valid for any cost functions.
// `comm`, added to the comm end: each later group's exchange ends at least
// its time less its overlap after the one before, so at least the least
// total of those. `compute`, added to the first stage's end, a
// bound on the final comm end:
//  - kCompute: the compute stream still runs their backward and (serial)
//    selections, so at least their backward plus the least total selection.
//  - kSeparate: the two-stage pipeline's flow-shop bounds, the larger of
//    (a) every selection, then the last group's allgather, and (b) the first
//    group's selection, then every allgather.
struct SuffixBounds {
  std::vector<double> comm, compute;
};

SuffixBounds suffixBounds(const std::vector<LayerInfo>& layers, const GroupCosts& cost, Selection selection) {
  const int n = static_cast<int>(layers.size());
  const double inf = std::numeric_limits<double>::infinity();
  SuffixBounds b{std::vector<double>(n + 1, inf), std::vector<double>(n + 1, 0.0)};
  // select: least total selection; sel_last: (a); sel_first: (b).
  std::vector<double> select(n + 1, inf), sel_last(n + 1, inf), sel_first(n + 1, inf);
  b.comm[n] = select[n] = sel_last[n] = sel_first[n] = 0;
  // Pushed from each finished suffix e to every shorter one, so the costs
  // are read in storage order (row e).
  for (int e = n; e >= 1; --e) {
    for (int s = e - 1; s >= 0; --s) {
      b.comm[s] = std::min(b.comm[s], cost.comm(s, e) - cost.overlap(s, e) + b.comm[e]);
      const double least = cost.leastSelect(s, e);
      select[s] = std::min(select[s], least + select[e]);
      if (selection == Selection::kSeparate) {
        sel_last[s] = std::min(sel_last[s], least + (e == n ? cost.comm(s, e) : sel_last[e]));
        sel_first[s] = std::min(sel_first[s], least + cost.comm(s, e) + b.comm[e]);
      }
    }
  }
  double backward = 0;
  for (int s = n - 1; s >= 0; --s) {
    if (selection == Selection::kCompute) {
      backward += layers[s].backward_s;
      b.compute[s] = backward + select[s];
    } else {
      b.compute[s] = std::max(sel_last[s], sel_first[s]);
    }
  }
  return b;
}

// One pass of the DP; `next` is the first stage's transition (above).
// States whose lower bound on the final comm end exceeds `limit` (a known
// plan's) are not kept: they cannot be on a better path. Returns no groups if
// the cap emptied the final front.
template <typename NextStage>
PlannerResult paretoDp(const std::vector<LayerInfo>& layers, const GroupCosts& cost, const SuffixBounds& bound,
                       double limit, int front_cap, NextStage next) {
  const int n = static_cast<int>(layers.size());
  PlannerResult r;
  // ready[e]: end of backward of layers 0..e-1, accumulated in layer order
  // as the timeline does, so both give bit-identical times.
  std::vector<double> ready(n + 1, 0.0);
  for (int i = 0; i < n; ++i) ready[i + 1] = ready[i] + layers[i].backward_s;
  // fronts[e]: Pareto-minimal states over plans of layers 0..e-1. The rest
  // of the timeline is non-decreasing in both coordinates, so a dominated
  // state can never lead to a better plan.
  std::vector<std::vector<State>> fronts(n + 1);
  fronts[0].push_back({0.0, 0.0, -1, -1});
  for (int e = 1; e <= n; ++e) {
    std::vector<State>& front = fronts[e];
    double backward = 0;
    for (int s = e - 1; s >= 0; --s) {  // last group [s, e), shortest first
      backward += layers[s].backward_s;
      const double select = cost.select(s, e), comm = cost.comm(s, e), ov = cost.overlap(s, e);
      const std::vector<State>& prev = fronts[s];
      for (int i = 0; i < static_cast<int>(prev.size()); ++i) {
        const double compute = next(prev[i].compute, backward, ready[e], select);
        if (compute + bound.compute[e] > limit) break;  // later states compute longer
        const double end = std::max(prev[i].comm - ov, compute) + comm;
        if (end + bound.comm[e] <= limit) insertPareto(front, {compute, end, s, i});
        // Later states of `prev` have no smaller first stage and a smaller
        // comm end; once communication waits for the first stage, they only
        // give states dominated by this one.
        if (compute >= prev[i].comm - ov) break;
      }
    }
    if (static_cast<int>(front.size()) > front_cap) {
      thin(front, front_cap);
      r.front_capped = true;
    }
    r.max_front = std::max(r.max_front, static_cast<int>(front.size()));
  }
  if (fronts[n].empty()) return r;
  // The least comm end is the last state of the final front.
  const int at = static_cast<int>(fronts[n].size()) - 1;
  r.predicted_s = fronts[n][at].comm;
  r.groups = groupsFromLengths(backtrack(fronts, n, at));
  return r;
}

// The DP with negotiation rounds (timeline.h, negotiationRound). A state
// also holds the start of the last round, and a later start is better (it
// may declare the next group too), so states are kept unless another is at
// least as good in all three; no scan may stop early, since the transition
// is no longer ordered by the first stage alone. Heuristic (planners.h).
struct RoundState {
  double compute, comm, round;
  int prev, from;
};

bool dominates(const RoundState& a, const RoundState& b) {
  return a.compute <= b.compute && a.comm <= b.comm && a.round >= b.round;
}

void insertRound(std::vector<RoundState>& front, const RoundState& c) {
  for (const RoundState& s : front)
    if (dominates(s, c)) return;
  front.erase(std::remove_if(front.begin(), front.end(), [&](const RoundState& s) { return dominates(c, s); }),
              front.end());
  front.push_back(c);
}

PlannerResult roundsDp(const std::vector<LayerInfo>& layers, const GroupCosts& cost, const SuffixBounds& bound,
                       double limit, int front_cap, Selection selection, double negotiation_s) {
  const int n = static_cast<int>(layers.size());
  PlannerResult r;
  std::vector<double> ready(n + 1, 0.0);
  for (int i = 0; i < n; ++i) ready[i + 1] = ready[i] + layers[i].backward_s;
  std::vector<std::vector<RoundState>> fronts(n + 1);
  fronts[0].push_back({0.0, 0.0, -1.0, -1, -1});
  for (int e = 1; e <= n; ++e) {
    std::vector<RoundState>& front = fronts[e];
    double backward = 0;
    for (int s = e - 1; s >= 0; --s) {
      backward += layers[s].backward_s;
      const double select = cost.select(s, e), comm = cost.comm(s, e), ov = cost.overlap(s, e);
      const std::vector<RoundState>& prev = fronts[s];
      for (int i = 0; i < static_cast<int>(prev.size()); ++i) {
        const RoundState& p = prev[i];
        double compute, comm_ready;
        RoundStep step;
        if (selection == Selection::kCompute) {
          compute = p.compute + backward + select;
          const double last_end = p.round < 0 ? 0.0 : p.round + negotiation_s;
          step = negotiationRound(p.round, last_end, last_end, compute, negotiation_s);
          comm_ready = step.end;
        } else {
          step = negotiationRound(p.round, 0.0, p.compute, ready[e], negotiation_s);
          // timeline.cc: a group sharing a round runs in the same turn.
          compute = step.shared ? p.compute + cost.queued(s, e) : step.end + select;
          comm_ready = compute;
        }
        if (compute + bound.compute[e] > limit) continue;
        const double end = std::max(p.comm - ov, comm_ready) + comm;
        if (end + bound.comm[e] <= limit) insertRound(front, {compute, end, step.start, s, i});
      }
    }
    if (static_cast<int>(front.size()) > front_cap) {
      std::stable_sort(front.begin(), front.end(),
                       [](const RoundState& a, const RoundState& b) { return a.compute < b.compute; });
      std::vector<RoundState> kept;
      const size_t m = front.size();
      for (int i = 0; i < front_cap; ++i) kept.push_back(front[front_cap == 1 ? m - 1 : i * (m - 1) / (front_cap - 1)]);
      // Thinning by the first stage may drop the least comm end: keep it.
      const auto best = std::min_element(front.begin(), front.end(),
                                         [](const RoundState& a, const RoundState& b) { return a.comm < b.comm; });
      if (std::none_of(kept.begin(), kept.end(), [&](const RoundState& k) { return k.comm == best->comm; }))
        kept.back() = *best;
      front = std::move(kept);
      r.front_capped = true;
    }
    r.max_front = std::max(r.max_front, static_cast<int>(front.size()));
  }
  if (fronts[n].empty()) return r;
  int at = 0;
  for (int i = 1; i < static_cast<int>(fronts[n].size()); ++i)
    if (fronts[n][i].comm < fronts[n][at].comm) at = i;
  r.predicted_s = fronts[n][at].comm;
  r.groups = groupsFromLengths(backtrack(fronts, n, at));
  return r;
}

// The slack absorbs rounding between two evaluations of the same plan.
double limitFor(double known_s) { return known_s * (1 + 1e-9) + 1e-300; }

}  // namespace

PlannerResult planMgs(const std::vector<LayerInfo>& layers, const ElementCost& allgather, const ElementCost& sparsify,
                      int front_cap, Selection selection, double negotiation_s, const ElementCost& overlap,
                      const QueuedStage& queued_in) {
  const int n = static_cast<int>(layers.size());
  if (n == 0) return {};
  // Without bounds the fronts reach thousands of states when communication
  // dominates (BERT-base on 1,024 workers). A known plan's time bounds every
  // state from above: the best of the authors' rule and the trivial plans,
  // evaluated on the model being planned.
  // (A second pass bounded by a first capped pass's plan was tried: it did
  // not bring capped fronts under the cap on the shipped traces.)
  // The queued stage applies to the separate stage with rounds only (timeline.cc).
  const QueuedStage queued = negotiation_s > 0 && selection == Selection::kSeparate ? queued_in : QueuedStage{};
  const GroupCosts cost(layers, allgather, sparsify, overlap, queued);
  const SuffixBounds bound = suffixBounds(layers, cost, selection);
  PlannerResult known = planMgsGreedy(layers, allgather, sparsify, false, selection, negotiation_s, overlap, queued);
  for (Groups g : {planLayerwise(n), planSingle(n)}) {
    const double t = sparseTime(layers, g, allgather, sparsify, selection, negotiation_s, overlap, queued);
    if (t < known.predicted_s) known.groups = std::move(g), known.predicted_s = t;
  }
  const double limit = limitFor(known.predicted_s);
  PlannerResult r = negotiation_s > 0 ? roundsDp(layers, cost, bound, limit, front_cap, selection, negotiation_s)
                    : selection == Selection::kCompute
                        ? paretoDp(layers, cost, bound, limit, front_cap, ComputeStreamStage{})
                        : paretoDp(layers, cost, bound, limit, front_cap, SeparateStage{});
  // The DP's own arithmetic may differ from the timeline's in the last bits:
  // report what the timeline says of the plan it chose.
  if ((negotiation_s > 0 || overlap) && !r.groups.empty())
    r.predicted_s = sparseTime(layers, r.groups, allgather, sparsify, selection, negotiation_s, overlap, queued);
  // Only the cap can lose the optimal path; the known plan is then as good.
  if (r.groups.empty() || r.predicted_s > known.predicted_s) {
    r.groups = std::move(known.groups);
    r.predicted_s = known.predicted_s;
  }
  return r;
}

}  // namespace mgs::plan
