// Named cost models built from the papers' fitted tables (algorithms.md §2),
// so their experiments can be re-planned without a cluster.
#include <map>

#include "common/check.h"
#include "plan/cost_model.h"

namespace mgs::plan {
namespace {

struct Line {
  double a, b;
};

// MG-WFBP 10GbE allreduce fit, seconds and seconds per byte [MW].
const std::map<int, Line> k10GbeAllreduce = {{2, {2.554691138304671e-06, 9.837548167872609e-11}},
                                             {4, {4.204298980348825e-05, 2.0589360830118177e-10}},
                                             {8, {5.230272768511732e-04, 8.570746975492128e-10}},
                                             {16, {9.080981007148093e-04, 7.395651186836712e-10}}};
// Allgather fits as (a, b) of T = 2*(a + b*k*P*4) [OM, GK]. With our byte
// count P*k*(4+4) that is alpha = 2a, beta = b.
const std::map<int, Line> k10GbeAllgather = {
    {2, {1.5e-5, 5.7e-11}}, {4, {3.6e-5, 1.1e-10}}, {8, {8.5e-5, 1.4e-10}}, {16, {1.4e-4, 2.0e-10}}};
const std::map<int, Line> k1GbeAllgather = {
    {2, {1.6e-3, 1.0e-8}}, {4, {2.7e-3, 1.3e-8}}, {8, {4.0e-3, 1.5e-8}}, {16, {1.1e-2, 1.7e-8}}};
const std::map<int, Line> kGkSmall = {
    {2, {1.6e-3, 1.0e-8}}, {4, {2.7e-3, 1.3e-8}}, {8, {4.0e-3, 1.5e-8}}, {16, {1.7e-3, 1.7e-8}}};
const std::map<int, Line> kGkLarge = {
    {2, {4.4e-3, 5.8e-9}}, {4, {5.6e-3, 7.4e-9}}, {8, {7.68e-3, 8.2e-9}}, {16, {2.1e-3, 1.7e-8}}};

// torch.topk on a P102-100 [MW/GK/OM utils.py topk_perf_model].
constexpr double kTopkNLogN = 2.18896957e-10;

// The papers publish no 1GbE allreduce fit; use a ring allreduce at
// 1 Gbit/s with 50 us per step (derived, documented in docs/planner.md).
CommModel ringAllreduce1Gbe(int p) {
  const double steps = 2.0 * (p - 1);
  return CommModel::linear(steps * 50e-6, steps / p / 125e6);
}

CommModel allgatherLine(const Line& l) { return CommModel::linear(2 * l.a, l.b); }

}  // namespace

std::vector<std::string> costModelPresetNames() {
  std::vector<std::string> names;
  for (const char* net : {"10gbe", "1gbe", "gk-1gbe"})
    for (int p : {2, 4, 8, 16}) names.push_back(std::string(net) + "-P" + std::to_string(p));
  return names;
}

Status costModelPreset(const std::string& name, CostModel* out) {
  const auto dash = name.rfind("-P");
  MGS_ENSURE(dash != std::string::npos, kInvalidArgument, "unknown cost model preset '" << name << "'");
  const std::string net = name.substr(0, dash);
  int p = 0;
  try {
    p = std::stoi(name.substr(dash + 2));
  } catch (...) {
  }
  MGS_ENSURE(k10GbeAllreduce.count(p) && (net == "10gbe" || net == "1gbe" || net == "gk-1gbe"), kInvalidArgument,
             "unknown cost model preset '" << name << "'");
  CostModel m;
  m.workers = p;
  m.bytes_per_element = 4;
  m.density = out->density;
  m.sparsify = {SparsifyModel::Kind::kNLogN, kTopkNLogN};
  if (net == "10gbe") {
    m.allreduce = CommModel::linear(k10GbeAllreduce.at(p).a, k10GbeAllreduce.at(p).b);
    m.allgather = allgatherLine(k10GbeAllgather.at(p));
  } else {
    m.allreduce = ringAllreduce1Gbe(p);
    if (net == "1gbe") {
      m.allgather = allgatherLine(k1GbeAllgather.at(p));
    } else {
      // GK switches tables at 1 MiB of values, i.e. 2 MiB of value+index bytes.
      const Line s = kGkSmall.at(p), l = kGkLarge.at(p);
      m.allgather = CommModel::switched(2.0 * (1 << 20), 2 * s.a, s.b, 2 * l.a, l.b);
    }
  }
  *out = std::move(m);
  return Status::OK();
}

}  // namespace mgs::plan
