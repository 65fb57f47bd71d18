// mgs-plan: run a merge planner on an instance file and print the plan as
// JSON. See docs/planner.md for the instance format.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "instance_io.h"
#include "plan/plan.h"

namespace {

using mgs::plan::GroupTiming;
using mgs::plan::Plan;
using mgs::plan::PlanInput;

// A table of where each group sits in time; to stderr so that stdout stays
// one JSON document.
void explain(const PlanInput& in, const Plan& plan) {
  std::vector<GroupTiming> t;
  if (!mgs::plan::planTimeline(in, plan.groups, plan.sparse, &t).ok()) return;
  const bool separate = plan.sparse && plan.selection == mgs::plan::Selection::kSeparate;
  std::fprintf(stderr, "%s: %zu groups over %zu layers, %s model%s, predicted %.6f s\n", plan.planner.c_str(), t.size(),
               in.layers.size(), plan.sparse ? "sparse" : "dense",
               !plan.sparse ? ""
               : separate   ? " (selection separate)"
                            : " (selection on compute)",
               plan.predicted_s);
  // sel_start_s (separate selection only): when the selection stage took
  // the group up, after it was ready and the previous selection ended.
  std::fprintf(stderr, "%5s  %-9s %12s %12s", "group", "layers", "elements", "ready_s");
  if (separate) std::fprintf(stderr, " %12s", "sel_start_s");
  std::fprintf(stderr, " %12s %12s %12s %10s %-9s  %s\n", plan.sparse ? "selected_s" : "", "comm_start_s", "comm_end_s",
               "waited_s", "exchange", "first .. last");
  double prev_end = 0;
  for (size_t g = 0; g < t.size(); ++g) {
    const GroupTiming& x = t[g];
    const std::string range = std::to_string(x.first) + ".." + std::to_string(x.last);
    std::fprintf(stderr, "%5zu  %-9s %12lld %12.6f", g, range.c_str(), static_cast<long long>(x.elements), x.ready_s);
    if (separate) std::fprintf(stderr, " %12.6f", x.select_start_s);
    // waited_s: how long the ready group waited for the previous communication.
    // The exchange the sparse model (and the runtime) takes for this group.
    const char* exchange = plan.sparse ? mgs::plan::exchangeName(in.cost.chooseExchange(x.elements)) : "allreduce";
    std::fprintf(stderr, " %12s %12.6f %12.6f %10.6f %-9s  %s .. %s\n",
                 plan.sparse ? std::to_string(x.sparsified_s).c_str() : "", x.comm_start_s, x.comm_end_s,
                 x.comm_start_s - x.sparsified_s, exchange, in.layers[x.first].name.c_str(),
                 in.layers[x.last].name.c_str());
    prev_end = x.comm_end_s;
  }
  if (separate) {
    // Backward is untouched; the selection stage ends after it.
    const double backward = t.empty() ? 0.0 : t.back().ready_s;
    const double selected = t.empty() ? 0.0 : t.back().sparsified_s;
    std::fprintf(stderr, "backward ends %.6f s; selection ends %.6f s; communication ends %.6f s (%.6f s exposed)\n",
                 backward, selected, prev_end, prev_end - backward);
    return;
  }
  const double compute = t.empty() ? 0.0 : t.back().sparsified_s;
  std::fprintf(stderr, "compute stream ends %.6f s; communication ends %.6f s (%.6f s exposed)\n", compute, prev_end,
               prev_end - compute);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Plan gradient merging for one model and cluster (mgs merge planner)"};
  std::string input, planner, selection;
  bool show = false;
  std::string cost_path;
  app.add_option("-i,--input", input, "instance JSON (docs/planner.md)")->required();
  app.add_option("-c,--cost-model", cost_path,
                 "cost-model JSON, e.g. a calibration the runtime saved with MGS_CALIBRATION=<file>; replaces "
                 "the instance's cost model (its density stays)");
  std::string names = "all";
  for (const auto& n : mgs::plan::plannerNames()) names += ", " + n;
  app.add_option("-p,--planner", planner,
                 "one of: " + names + " (default: mgs for a sparse instance, mgwfbp for a dense one)");
  app.add_option("--selection", selection,
                 "sparse model: compute (selection on the compute stream, delaying backward: the MGS paper) or "
                 "separate (selection on the runtime's coordinator thread / a side stream, pipelined with the "
                 "allgather); overrides the instance's \"selection\" (default compute)")
      ->check(CLI::IsMember({"compute", "separate"}));
  std::string exchanges;
  app.add_option("--exchanges", exchanges,
                 "sparse model: the exchanges a group may use, comma-separated from allgather, agreed, dense, "
                 "hierarchical "
                 "(each group takes the cheapest); overrides the instance's \"exchanges\" (default allgather)");
  int ranks_per_node = 0;
  app.add_option("--ranks-per-node", ranks_per_node,
                 "ranks per node for the hierarchical exchange; overrides the instance's or cost model's "
                 "\"ranks_per_node\"")
      ->check(CLI::Range(1, 1 << 20));
  std::vector<int> lengths;
  app.add_option("--lengths", lengths,
                 "evaluate this plan (group lengths in backward order, e.g. 6,48) instead of planning; the "
                 "output names it planner \"given\"")
      ->delimiter(',');
  app.add_flag("--explain", show, "print the plan's timeline to stderr");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json j;
  PlanInput in;
  mgs::plan::CostModel cost;
  if (!cost_path.empty()) {
    const mgs::Status cst = mgs::tools::readCostModelFile(cost_path, &cost);
    if (!cst.ok()) {
      std::cerr << "mgs-plan: --cost-model " << cst.message() << "\n";
      return 2;
    }
  }
  mgs::Status st = mgs::tools::readJsonFile(input, &j);
  if (st.ok()) st = mgs::tools::parseInstance(j, &in, cost_path.empty() ? nullptr : &cost);
  if (!st.ok()) {
    std::cerr << "mgs-plan: " << input << ": " << st.message() << "\n";
    return 2;
  }
  if (!selection.empty()) (void)mgs::plan::parseSelection(selection, &in.selection);  // checked by CLI11
  if (!exchanges.empty() && !mgs::plan::parseExchanges(exchanges, &in.cost.exchanges)) {
    std::cerr << "mgs-plan: --exchanges '" << exchanges << "': expected a comma-separated list of allgather, agreed, "
              << "dense, hierarchical\n";
    return 2;
  }
  if (ranks_per_node > 0) in.cost.ranks_per_node = ranks_per_node;
  if (planner.empty()) planner = in.sparse ? "mgs" : "mgwfbp";
  std::vector<std::string> run = {planner};
  if (planner == "all") run = mgs::plan::plannerNames();

  if (!lengths.empty()) {
    Plan plan;
    plan.planner = "given";
    plan.groups = mgs::plan::groupsFromLengths(lengths);
    plan.sparse = in.sparse;
    plan.selection = in.selection;
    for (int n : lengths) st = n >= 1 ? st : mgs::Status(mgs::Code::kInvalidArgument, "a group length below 1");
    if (st.ok()) st = mgs::plan::evaluatePlan(in, plan.groups, plan.sparse, &plan.predicted_s);
    if (!st.ok()) {
      std::cerr << "mgs-plan: --lengths: " << st.message() << "\n";
      return 2;
    }
    std::cout << mgs::tools::planToJson(plan).dump() << "\n";
    if (show) explain(in, plan);
    return 0;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& name : run) {
    Plan plan;
    st = mgs::plan::computePlan(name, in, &plan);
    if (!st.ok()) {
      std::cerr << "mgs-plan: " << st.message() << "\n";
      return 2;
    }
    if (plan.front_capped)
      std::cerr << "mgs-plan: warning: the Pareto front reached its cap (" << in.front_cap
                << "); the plan may not be optimal\n";
    out.push_back(mgs::tools::planToJson(plan));
    if (show) explain(in, plan);
  }
  std::cout << (run.size() == 1 ? out[0] : out).dump() << "\n";
  return 0;
}
