#include "simulator.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "plan/plan.h"

namespace mgs::tools {

std::vector<std::string> networkNames() { return {"1gbe", "10gbe", "25gbe", "100gbe"}; }

Status networkByName(const std::string& name, Network* out) {
  // Latencies are typical TCP (Ethernet) and RDMA (100G) small-message
  // one-way times; bandwidths are the line rates.
  if (name == "1gbe")
    *out = {name, 50e-6, 1e9 / 8};
  else if (name == "10gbe")
    *out = {name, 25e-6, 10e9 / 8};
  else if (name == "25gbe")
    *out = {name, 15e-6, 25e9 / 8};
  else if (name == "100gbe")
    *out = {name, 3e-6, 100e9 / 8};
  else
    return Status(Code::kInvalidArgument, "unknown network '" + name + "'");
  return Status::OK();
}

plan::CostModel clusterModel(const SimOptions& o, int workers) {
  const double p = workers;
  const double steps = workers > 1 ? std::ceil(std::log2(p)) : 0.0;
  const double lat = o.network.latency_s, bw = o.network.bandwidth_bytes_per_s;
  plan::CostModel m;
  m.workers = workers;
  m.density = o.density;
  m.bytes_per_element = o.bytes_per_element;
  m.sparsify = o.sparsify;
  // R ranks of a node share its link: a flat collective's bytes cross it R
  // times (R = 1: one rank per node, the papers' setting).
  const int R = std::max(1, std::min(o.ranks_per_node, workers));
  const double share = R;
  // Allreduce: reduce-scatter + allgather, each moving (P-1)/P of the data.
  m.allreduce = plan::CommModel::linear(2 * steps * lat, share * 2 * (p - 1) / p / bw);
  // Allgather of everyone's (value, index) pairs, as two collectives; each
  // rank receives (P-1)/P of the gathered bytes.
  m.allgather = plan::CommModel::linear(2 * steps * lat, share * (p - 1) / p / bw);
  // Broadcast as a scatter then an allgather (van de Geijn; what MPI
  // libraries use for large messages): log P startups for each half, and
  // each rank moves (P-1)/P of the buffer in each.
  m.broadcast = plan::CommModel::linear(2 * steps * lat, share * 2 * (p - 1) / p / bw);
  if (R > 1) {
    // The hierarchical exchange: shared memory inside the node (a reduce or
    // a broadcast as reduce-scatter + gather), an allgather among the
    // nodes' leaders, one per node on each link.
    m.ranks_per_node = R;
    const double r = R, nodes = m.nodes(), node_steps = std::ceil(std::log2(r));
    const double leader_steps = nodes > 1 ? std::ceil(std::log2(nodes)) : 0.0;
    m.node = plan::CommModel::linear(2 * node_steps * o.node_latency_s, 2 * (r - 1) / r / o.node_bandwidth_bytes_per_s);
    m.leader_allgather = plan::CommModel::linear(2 * leader_steps * lat, (nodes - 1) / nodes / bw);
  }
  return m;
}

const std::vector<Strategy>& simStrategies() {
  static const std::vector<Strategy> s = {
      {"wfbp", "layerwise", false, "dense, one allreduce per tensor as it is ready"},
      {"syncea", "single", false, "dense, one allreduce after backward (SyncEASGD)"},
      {"fusion", "fusion", false, "dense, 64 MiB fusion buffer (Horovod/DDP)"},
      {"mgwfbp", "mgwfbp", false, "dense, MG-WFBP exact DP"},
      {"mgwfbp-greedy", "mgwfbp-greedy", false, "dense, MG-WFBP authors' rule"},
      {"lags", "layerwise", true, "sparse, one allgather per tensor (LAGS-SGD)"},
      {"topk", "single", true, "sparse, one group after backward (TopK-SGD / GaussianK default)"},
      {"mgs", "mgs", true, "sparse, MGS exact Pareto DP"},
      {"mgs-greedy", "mgs-greedy", true, "sparse, MGS authors' rule (fixed)"},
      {"lags-agreed", "layerwise", true, "sparse, one exchange per tensor, allgather or agreed (cheaper)",
       plan::kExchangeAllgather | plan::kExchangeAgreed},
      {"mgs-agreed", "mgs", true, "sparse, MGS exact DP, each group allgather or agreed (cheaper)",
       plan::kExchangeAllgather | plan::kExchangeAgreed},
      {"mgs-auto", "mgs", true, "MGS exact DP, each group allgather, agreed or dense (the runtime's default)",
       plan::kExchangeAllgather | plan::kExchangeAgreed | plan::kExchangeDense},
      {"topk-hier", "single", true,
       "sparse, one group after backward, hierarchical (dense in the node, allgather between nodes; "
       "the flat allgather with one rank per node)",
       plan::kExchangeHierarchical},
      {"mgs-hier", "mgs", true, "MGS exact DP, each group allgather, agreed, dense or hierarchical (cheapest)",
       plan::kExchangeAll},
  };
  return s;
}

Status simulate(const Trace& trace, const SimOptions& o, std::vector<SimPoint>* out) {
  double backward = 0;
  for (const auto& l : trace.layers) backward += l.backward_s;
  const double single = trace.forward_s + backward;
  if (!(single > 0)) return Status(Code::kInvalidArgument, "the trace has no compute time");
  out->clear();
  for (int p : o.workers) {
    if (p < 1) return Status(Code::kInvalidArgument, "workers must be >= 1");
    plan::PlanInput in;
    in.layers = trace.layers;
    in.cost = clusterModel(o, p);
    in.fusion_threshold_bytes = o.fusion_threshold_bytes;
    in.selection = o.selection;
    for (const Strategy& s : simStrategies()) {
      in.sparse = s.sparse;
      in.cost.exchanges = s.exchanges;
      plan::Plan plan;
      MGS_RETURN_IF_ERROR(plan::computePlan(s.planner, in, &plan));
      SimPoint pt;
      pt.workers = p;
      pt.strategy = s.name;
      // One worker communicates nothing and selects nothing.
      pt.iteration_s = p == 1 ? single : trace.forward_s + plan.predicted_s;
      pt.speedup = p * single / pt.iteration_s;
      pt.efficiency = pt.speedup / p;
      pt.groups = static_cast<int>(plan.groups.size());
      pt.front_capped = plan.front_capped;
      out->push_back(pt);
    }
  }
  return Status::OK();
}

}  // namespace mgs::tools
