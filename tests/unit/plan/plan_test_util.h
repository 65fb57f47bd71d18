// Shared helpers for the planner tests: the random instance generator of
// algorithms.md §12 and the brute-force oracle over all 2^(L-1) plans.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/planners.h"
#include "plan/timeline.h"

namespace mgs::plan::test {

// Layers given in the papers' FORWARD order (layer L-1 computed first), as
// the regression vectors are written; returned in backward order.
inline std::vector<LayerInfo> fromForward(const std::vector<double>& tb, const std::vector<int64_t>& p) {
  std::vector<LayerInfo> layers;
  for (int l = static_cast<int>(tb.size()) - 1; l >= 0; --l)
    layers.push_back({"layer" + std::to_string(l), p[l], tb[l]});
  return layers;
}

// Sizes mix 1-50 and 100-5000 elements, tb ~ U(0.1, 5) (§12).
inline std::vector<LayerInfo> randomLayers(std::mt19937_64& rng, int n) {
  std::uniform_real_distribution<double> tb(0.1, 5.0);
  std::uniform_int_distribution<int64_t> small(1, 50), large(100, 5000);
  std::bernoulli_distribution coin(0.5);
  std::vector<LayerInfo> layers(n);
  for (int i = 0; i < n; ++i) {
    layers[i].name = "l" + std::to_string(i);
    layers[i].elements = coin(rng) ? small(rng) : large(rng);
    layers[i].backward_s = tb(rng);
  }
  return layers;
}

// A PlanInput of `n` random layers on fixed linear costs, 8 workers.
inline PlanInput randomInput(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  PlanInput in;
  in.layers = randomLayers(rng, n);
  in.cost.workers = 8;
  in.cost.density = 0.01;
  in.cost.bytes_per_element = 4;
  in.cost.allreduce = CommModel::linear(1.0, 1e-4);
  in.cost.allgather = CommModel::linear(0.5, 1e-3);
  in.cost.sparsify = {SparsifyModel::Kind::kNLogN, 1e-4};
  return in;
}

// A random piecewise-linear table over element counts, non-decreasing, with
// a startup in the range of the linear model's `a`.
inline CommModel randomTable(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<Sample> pts;
  double x = 0, y = 0.05 + 3 * u(rng);
  for (int i = 0; i < 5; ++i) {
    pts.push_back({x, y});
    x += 1 + 20000 * u(rng) * u(rng);
    y += (x - pts.back().first) * 2e-3 * u(rng);
  }
  CommModel m;
  (void)CommModel::table(pts, &m);
  return m;
}

// Every plan of n layers: the 2^(n-1) ways to cut them into runs.
inline std::vector<Groups> allPlans(int n) {
  std::vector<Groups> plans;
  for (uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
    std::vector<int> lengths;
    int len = 0;
    for (int i = 0; i < n; ++i) {
      ++len;
      if (i == n - 1 || (mask >> i & 1u)) lengths.push_back(len), len = 0;
    }
    plans.push_back(groupsFromLengths(lengths));
  }
  return plans;
}

// Linear costs with the allgather, agreed and dense exchanges allowed, start-ups
// (seconds) as given and one per-byte time for all three.
inline CostModel threeExchangeModel(int workers, double density, double allreduce_a, double allgather_a,
                                    double broadcast_a, double beta, double sparsify_c) {
  CostModel c;
  c.workers = workers;
  c.density = density;
  c.allreduce = CommModel::linear(allreduce_a, beta);
  c.allgather = CommModel::linear(allgather_a, beta);
  c.broadcast = CommModel::linear(broadcast_a, beta);
  c.sparsify = SparsifyModel{SparsifyModel::Kind::kLinear, sparsify_c};
  c.exchanges = kExchangeAllgather | kExchangeAgreed | kExchangeDense;
  return c;
}

struct Oracle {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> lengths;  // of one optimal plan
};

// Exhaustive search over every cut mask. `sparse` picks §3.2 (comm =
// allgather, with selection where `selection` says) or §3.1 (comm =
// allreduce). Written from the recurrences, not from timeline.cc.
inline Oracle bruteForce(const std::vector<LayerInfo>& layers, const ElementCost& comm, const ElementCost& select,
                         bool sparse, Selection selection = Selection::kCompute) {
  const int n = static_cast<int>(layers.size());
  Oracle o;
  if (n == 0) return Oracle{0.0, {}};
  // Group costs, precomputed so each mask is evaluated in O(L).
  std::vector<std::vector<double>> c(n, std::vector<double>(n + 1)), s(n, std::vector<double>(n + 1));
  for (int a = 0; a < n; ++a) {
    int64_t e = 0;
    for (int b = a + 1; b <= n; ++b) {
      e += layers[b - 1].elements;
      c[a][b] = comm(e);
      s[a][b] = sparse ? select(e) : 0.0;
    }
  }
  for (uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
    // compute: backward (+ selection under kCompute); selected: end of the
    // separate selection stage (kSeparate only).
    double compute = 0, selected = 0, end = 0;
    int start = 0;
    for (int i = 0; i < n; ++i) {
      compute += layers[i].backward_s;
      if (i == n - 1 || (mask >> i & 1u)) {  // cut after layer i
        if (sparse && selection == Selection::kSeparate) {
          selected = std::max(selected, compute) + s[start][i + 1];
          end = std::max(end, selected) + c[start][i + 1];
        } else {
          compute += s[start][i + 1];
          end = std::max(end, compute) + c[start][i + 1];
        }
        start = i + 1;
      }
    }
    if (end < o.best) {
      o.best = end;
      o.lengths.clear();
      int len = 0;
      for (int i = 0; i < n; ++i)
        if (++len, i == n - 1 || (mask >> i & 1u)) o.lengths.push_back(len), len = 0;
    }
  }
  return o;
}

inline bool relClose(double a, double b, double tol = 1e-9) {
  return std::fabs(a - b) <= tol * std::max({1.0, std::fabs(a), std::fabs(b)});
}

}  // namespace mgs::plan::test
