// mgs-sim: scaling of dense and sparse gradient communication strategies,
// simulated from a model trace for P = 4 ... 2048 workers. Prints a table;
// --json writes every point (tools/plot_sim.py turns it into a PNG).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "simulator.h"

namespace {

using mgs::tools::SimPoint;

void printTable(const std::vector<SimPoint>& pts, const std::string& metric) {
  std::vector<std::string> cols;
  for (const auto& s : mgs::tools::simStrategies()) cols.push_back(s.name);
  std::printf("%6s", "P");
  for (const auto& c : cols) std::printf(" %13s", c.c_str());
  std::printf("\n");
  std::map<int, std::map<std::string, const SimPoint*>> rows;
  for (const auto& p : pts) rows[p.workers][p.strategy] = &p;
  for (const auto& [workers, row] : rows) {
    std::printf("%6d", workers);
    for (const auto& c : cols) {
      const SimPoint* p = row.at(c);
      const double v = metric == "time" ? p->iteration_s * 1e3 : metric == "efficiency" ? p->efficiency : p->speedup;
      std::printf(" %12.*f%c", metric == "efficiency" ? 3 : 1, v, p->front_capped ? '*' : ' ');
    }
    std::printf("\n");
  }
  for (const auto& p : pts)
    if (p.front_capped) {
      std::printf("* the mgs Pareto front reached its cap: that plan may not be optimal\n");
      break;
    }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trace-based scaling simulator for merged-gradient communication"};
  std::string trace_path, network = "10gbe", json_path, metric = "speedup", sparsify = "nlogn", selection = "compute";
  double latency_us = -1, bandwidth_gbps = -1, fusion_mib = 64;
  mgs::tools::SimOptions opt;
  app.add_option("-t,--trace", trace_path, "model trace JSON (tools/traces/*.json)")->required();
  std::string nets;
  for (const auto& n : mgs::tools::networkNames()) nets += (nets.empty() ? "" : ", ") + n;
  app.add_option("-n,--network", network, "network preset: " + nets)->capture_default_str();
  app.add_option("--latency-us", latency_us, "override the per-message latency");
  app.add_option("--bandwidth-gbps", bandwidth_gbps, "override the link bandwidth");
  app.add_option("-d,--density", opt.density, "sparse density rho")->capture_default_str();
  app.add_option("--sparsify", sparsify, "selection time model: nlogn (exact top-k) or linear")
      ->capture_default_str()
      ->check(CLI::IsMember({"nlogn", "linear"}));
  app.add_option("--sparsify-c", opt.sparsify.c_s, "seconds per element (linear) or per n*log2(n) (nlogn)")
      ->capture_default_str();
  app.add_option("--selection", selection,
                 "where sparse strategies select: compute (on the compute stream, delaying backward: the MGS "
                 "paper) or separate (a coordinator thread / side stream, pipelined with the allgather: mgs's "
                 "runtime)")
      ->capture_default_str()
      ->check(CLI::IsMember({"compute", "separate"}));
  app.add_option("--fusion-mib", fusion_mib, "fusion buffer size")->capture_default_str();
  app.add_option("-P,--workers", opt.workers, "worker counts")->capture_default_str();
  app.add_option("-R,--ranks-per-node", opt.ranks_per_node,
                 "ranks per node: they share the node's link; the hierarchical strategies reduce inside the node "
                 "over shared memory (--node-latency-us, --node-bandwidth-gbps)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  double node_latency_us = opt.node_latency_s * 1e6, node_gbps = opt.node_bandwidth_bytes_per_s * 8 / 1e9;
  app.add_option("--node-latency-us", node_latency_us, "inside a node: latency per step")->capture_default_str();
  app.add_option("--node-bandwidth-gbps", node_gbps, "inside a node: bandwidth")->capture_default_str();
  app.add_option("--metric", metric, "table metric: speedup, efficiency or time (ms)")
      ->capture_default_str()
      ->check(CLI::IsMember({"speedup", "efficiency", "time"}));
  app.add_option("--json", json_path, "write all points as JSON here");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json j;
  mgs::tools::Trace trace;
  mgs::Status st = mgs::tools::readJsonFile(trace_path, &j);
  if (st.ok()) st = mgs::tools::parseTrace(j, &trace);
  if (st.ok()) st = mgs::tools::networkByName(network, &opt.network);
  if (!st.ok()) {
    std::cerr << "mgs-sim: " << st.message() << "\n";
    return 2;
  }
  if (latency_us >= 0) opt.network.latency_s = latency_us * 1e-6;
  if (bandwidth_gbps > 0) opt.network.bandwidth_bytes_per_s = bandwidth_gbps * 1e9 / 8;
  opt.sparsify.kind =
      sparsify == "linear" ? mgs::plan::SparsifyModel::Kind::kLinear : mgs::plan::SparsifyModel::Kind::kNLogN;
  opt.fusion_threshold_bytes = static_cast<int64_t>(fusion_mib * (1 << 20));
  opt.node_latency_s = node_latency_us * 1e-6;
  opt.node_bandwidth_bytes_per_s = node_gbps * 1e9 / 8;
  (void)mgs::plan::parseSelection(selection, &opt.selection);  // checked by CLI11 above

  std::vector<SimPoint> pts;
  st = mgs::tools::simulate(trace, opt, &pts);
  if (!st.ok()) {
    std::cerr << "mgs-sim: " << st.message() << "\n";
    return 2;
  }
  int64_t params = 0;
  double backward = 0;
  for (const auto& l : trace.layers) params += l.elements, backward += l.backward_s;
  std::printf("# %s: %zu tensors, %lld parameters, forward %.1f ms, backward %.1f ms\n", trace.model.c_str(),
              trace.layers.size(), static_cast<long long>(params), trace.forward_s * 1e3, backward * 1e3);
  std::printf("# network %s: latency %.1f us, %.1f Gbit/s; density %g; t_s %s c=%g; selection %s; %s\n",
              opt.network.name.c_str(), opt.network.latency_s * 1e6, opt.network.bandwidth_bytes_per_s * 8 / 1e9,
              opt.density, sparsify.c_str(), opt.sparsify.c_s, selection.c_str(), metric.c_str());
  if (opt.ranks_per_node > 1) std::printf("# %d ranks per node\n", opt.ranks_per_node);
  printTable(pts, metric);

  if (!json_path.empty()) {
    nlohmann::json out;
    out["model"] = trace.model;
    out["network"] = {{"name", opt.network.name},
                      {"latency_s", opt.network.latency_s},
                      {"bandwidth_bytes_per_s", opt.network.bandwidth_bytes_per_s}};
    out["density"] = opt.density;
    out["sparsify"] = {{"kind", sparsify}, {"c_s", opt.sparsify.c_s}};
    out["selection"] = selection;
    out["ranks_per_node"] = opt.ranks_per_node;
    for (const auto& s : mgs::tools::simStrategies())
      out["strategies"].push_back({{"name", s.name}, {"planner", s.planner}, {"doc", s.doc}});
    for (const auto& p : pts)
      out["points"].push_back({{"workers", p.workers},
                               {"strategy", p.strategy},
                               {"iteration_s", p.iteration_s},
                               {"speedup", p.speedup},
                               {"efficiency", p.efficiency},
                               {"groups", p.groups},
                               {"front_capped", p.front_capped}});
    std::ofstream f(json_path);
    f << out.dump(1) << "\n";
    if (!f) {
      std::cerr << "mgs-sim: cannot write " << json_path << "\n";
      return 2;
    }
  }
  return 0;
}
