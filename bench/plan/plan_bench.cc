// Planner runtime: the exact DPs on the shipped traces and on a synthetic
// 1,000-layer model, and mgs-sim's whole sweep on ResNet-50.
//
//   plan_bench [traces dir]     (default: the source tree's tools/traces)
//
// Prints one row per case: layers, workers, median wall time of 5 runs,
// largest Pareto front, and whether its cap was hit.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "instance_io.h"
#include "plan/plan.h"
#include "simulator.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double medianSeconds(F&& f, int runs = 5) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A 1,000-tensor model: ResNet-50's layers repeated, so sizes and times
// keep a real model's mix of tiny (BN) and large (conv) tensors.
std::vector<mgs::plan::LayerInfo> tile(const std::vector<mgs::plan::LayerInfo>& base, int n) {
  std::vector<mgs::plan::LayerInfo> out;
  for (int i = 0; static_cast<int>(out.size()) < n; ++i) out.push_back(base[i % base.size()]);
  return out;
}

void row(const std::string& name, const std::string& planner, const mgs::plan::PlanInput& in) {
  mgs::plan::Plan plan;
  const double s = medianSeconds([&] { (void)mgs::plan::computePlan(planner, in, &plan); });
  std::printf("| %-22s | %-7s | %5zu | %5d | %9.2f | %6d | %-6s |\n", name.c_str(), planner.c_str(), in.layers.size(),
              in.cost.workers, s * 1e3, plan.max_front, planner == "mgs" ? (plan.front_capped ? "yes" : "no") : "-");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : MGS_TRACES_DIR;
  std::printf("| case                   | planner | L     | P     | median ms | front  | capped |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  mgs::tools::SimOptions opt;
  (void)mgs::tools::networkByName("10gbe", &opt.network);
  mgs::tools::Trace resnet;
  for (const char* model : {"resnet50", "bert_base", "vgg16"}) {
    nlohmann::json j;
    mgs::tools::Trace trace;
    if (!mgs::tools::readJsonFile(dir + "/" + model + ".json", &j).ok() || !mgs::tools::parseTrace(j, &trace).ok()) {
      std::fprintf(stderr, "cannot read %s/%s.json\n", dir.c_str(), model);
      return 1;
    }
    if (std::string(model) == "resnet50") resnet = trace;
    for (int p : {16, 1024}) {
      mgs::plan::PlanInput in;
      in.layers = trace.layers;
      in.cost = mgs::tools::clusterModel(opt, p);
      row(std::string(model) + " 10GbE", "mgs", in);
      row(std::string(model) + " 10GbE", "mgwfbp", in);
    }
  }
  for (int p : {16, 1024}) {
    mgs::plan::PlanInput in;
    in.layers = tile(resnet.layers, 1000);
    in.cost = mgs::tools::clusterModel(opt, p);
    row("resnet50 x6.2 10GbE", "mgs", in);
    row("resnet50 x6.2 10GbE", "mgwfbp", in);
  }
  std::vector<mgs::tools::SimPoint> pts;
  const double sim = medianSeconds([&] { (void)mgs::tools::simulate(resnet, opt, &pts); });
  std::printf("\nmgs-sim sweep, resnet50, %zu strategies x %zu worker counts: %.1f ms\n",
              mgs::tools::simStrategies().size(), opt.workers.size(), sim * 1e3);
  return 0;
}
