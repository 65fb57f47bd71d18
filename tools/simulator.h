// Trace-based scaling simulator (the MG-WFBP paper's "4 to 2048 workers"
// study, algorithms.md §4.5): one worker's measured layer sizes and backward
// times, extrapolated to P workers by changing only the communication model.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "instance_io.h"
#include "plan/cost_model.h"
#include "plan/timeline.h"

namespace mgs::tools {

// A network as per-message latency and link bandwidth. Collectives follow
// the usual alpha-beta model: latency ceil(log2 P)*latency per collective
// (tree / recursive doubling), bandwidth term of the ring algorithms.
struct Network {
  std::string name;
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;
};
// "1gbe", "10gbe", "25gbe", "100gbe" (documented in docs/planner.md).
Status networkByName(const std::string& name, Network* out);
std::vector<std::string> networkNames();

struct SimOptions {
  Network network;
  std::vector<int> workers = {4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
  double density = 0.001;
  int bytes_per_element = 4;
  plan::SparsifyModel sparsify{plan::SparsifyModel::Kind::kNLogN, 2.18896957e-10};
  int64_t fusion_threshold_bytes = 64ll << 20;
  // Where the sparse strategies run selection (plan/timeline.h).
  plan::Selection selection = plan::Selection::kCompute;
  // Ranks per node (R): they share the node's link (the flat collectives'
  // bandwidth term is R times as large) and, for the hierarchical exchange,
  // a shared-memory reduce and broadcast. 1: one rank per node, as before.
  int ranks_per_node = 1;
  // Inside a node (shared memory): latency per step and bandwidth.
  double node_latency_s = 1e-6;
  double node_bandwidth_bytes_per_s = 20e9;
};

// The cost model of `workers` ranks on `options.network`.
plan::CostModel clusterModel(const SimOptions& options, int workers);

// A way of communicating gradients: a planner on the dense or sparse model.
struct Strategy {
  std::string name;     // column name, e.g. "syncea"
  std::string planner;  // plan::computePlan name
  bool sparse;
  std::string doc;
  // Sparse strategies: the exchanges a group may use (plan::kExchange* bits).
  unsigned exchanges = plan::kExchangeAllgather;
};
const std::vector<Strategy>& simStrategies();

struct SimPoint {
  int workers = 0;
  std::string strategy;
  double iteration_s = 0;  // forward + backward with communication
  double speedup = 0;      // P * (one worker's iteration) / iteration_s
  double efficiency = 0;   // speedup / P
  int groups = 0;
  bool front_capped = false;  // mgs: the plan may not be optimal
};

// One point per (workers, strategy), workers-major. A single worker needs no
// communication: its iteration is forward + backward.
Status simulate(const Trace& trace, const SimOptions& options, std::vector<SimPoint>* out);

}  // namespace mgs::tools
