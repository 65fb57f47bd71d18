#include "core/job_cost_model.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "common/check.h"
#include "common/logging.h"
#include "core/block_exchange.h"
#include "core/bucket_exchange.h"
#include "core/calibration.h"
#include "plan/cost_model_io.h"

namespace mgs {

JobCostModel::JobCostModel(Communicator& comm, const Config& config)
    : comm_(comm), config_(config), online_([&config] {
        OnlineCost::Options o;
        o.tolerance = config.replan_tolerance;
        o.cycle_s = config.cycle_time_ms * 1e-3;
        return o;
      }()) {}

void JobCostModel::stamp(plan::CostModel* m) const {
  m->density = config_.density;
  // Plan with what the exchange choice will choose from.
  m->exchanges = allowedExchanges(config_, comm_.size());
}

Status JobCostModel::readFile(const compress::Selector& selector, plan::CostModel* m) {
  // Rank 0 reads it (if present) and every rank gets its text, so every rank
  // parses the same bytes and ends with the same model.
  std::string text;
  if (comm_.rank() == 0) {
    std::ifstream f(config_.calibration);
    if (f.good()) {
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str();
      if (text.empty()) text = " ";  // present but empty: a parse error, not "measure"
    }
  }
  MGS_RETURN_IF_ERROR(comm_.broadcastString(&text, 0));
  if (text.empty()) {  // no file (the same answer on every rank): measure, save in useNodes()
    save_ = true;
    return measureCostModel(comm_, selector, m);
  }
  Status st = plan::parseCostModel(text, m);
  if (!st.ok())
    return Status(Code::kConfig, "MGS_CALIBRATION='" + config_.calibration + "': " + st.message() +
                                     " (docs/planner.md describes the format)");
  if (m->workers != comm_.size()) {
    // Its collective terms are another world size's (latencies grow with the
    // ranks): planning with them would price every bucket wrongly. Measure
    // this job's instead; the file stays the user's (not rewritten). The
    // same branch on every rank (every rank parsed the same bytes).
    if (comm_.rank() == 0)
      MGS_LOG_WARN(
          "MGS_CALIBRATION='{}' was measured on {} ranks; this job has {}: measuring this job's cost model instead "
          "(the file is left as it is; point MGS_CALIBRATION at a new path to save this job's)",
          config_.calibration, m->workers, comm_.size());
    *m = plan::CostModel();
    return measureCostModel(comm_, selector, m);
  }
  return Status::OK();
}

Status JobCostModel::resolve(const compress::Selector& selector) {
  plan::CostModel m;
  const int P = comm_.size();
  if (config_.calibration == "off") {
    int preset = 2;
    for (int p : {4, 8, 16})
      if (P >= p) preset = p;
    MGS_RETURN_IF_ERROR(plan::costModelPreset("10gbe-P" + std::to_string(preset), &m));
  } else if (config_.calibration == "auto") {
    MGS_RETURN_IF_ERROR(measureCostModel(comm_, selector, &m));
  } else {
    MGS_RETURN_IF_ERROR(readFile(selector, &m));
  }
  m.workers = P;
  m.bytes_per_element = 4;
  stamp(&m);
  model_ = m;
  if (comm_.rank() == 0)
    MGS_LOG_INFO("cost model ({}): {}", config_.calibration, plan::costModelToJson(m, /*pretty=*/false));
  return Status::OK();
}

Status JobCostModel::useNodes(const NodeGroups& nodes) {
  // The hierarchical exchange is a candidate only with the job's nodes.
  model_.ranks_per_node = nodes.hierarchy ? nodes.ranks_per_node : 1;
  // The same branch on every rank (the model is identical everywhere).
  if (nodes.hierarchy && config_.calibration != "off" && model_.node.segments().empty()) {
    MGS_RETURN_IF_ERROR(measureNodes(comm_, nodes, &model_));
    // A calibration file gets the node terms too (mgs-plan, later jobs).
    if (config_.calibration != "auto") save_ = true;
  }
  if (save_ && comm_.rank() == 0) {
    std::ofstream f(config_.calibration);
    f << plan::costModelToJson(model_);
    if (!f) MGS_LOG_WARN("could not save the calibration to {}", config_.calibration);
  }
  save_ = false;
  online_.setBase(model_);  // refits stay relative to the calibration
  ready_ = true;
  return Status::OK();
}

plan::Exchange JobCostModel::exchangeFor(size_t n, double density) const {
  if (density == model_.density) return model_.chooseExchange(static_cast<int64_t>(n));
  // A warm-up step's density (DGC, algorithms.md 8.3): the same model,
  // priced at it. A copy of a few segments.
  plan::CostModel at = model_;
  at.density = density;
  return at.chooseExchange(static_cast<int64_t>(n));
}

void JobCostModel::agreeDeviceSelection(const Status& own, const std::vector<double>& mine) {
  device_asked_ = true;
  const std::vector<size_t>& sizes = calibrationSelectionSizes();
  std::vector<double> t(sizes.size() + 1, 0.0);
  if (own.ok() && mine.size() == sizes.size())
    std::copy(mine.begin(), mine.end(), t.begin());
  else
    t.back() = 1.0;  // this rank selects elsewhere: every rank keeps calibration's figure
  const Status st = comm_.allreduce(t.data(), t.size(), MGS_FLOAT64, CommOp::kMax);
  if (!st.ok()) {
    MGS_LOG_WARN("rank {}: timing the selection on the device failed ({}); keeping the calibrated CPU figure",
                 comm_.rank(), st.message());
    return;
  }
  if (t.back() > 0) {
    if (!own.ok())
      MGS_LOG_DEBUG("rank {}: selection of CUDA buckets not timed on the device ({})", comm_.rank(), own.message());
    return;
  }
  std::vector<plan::Sample> samples;
  for (size_t i = 0; i < sizes.size(); ++i) samples.emplace_back(static_cast<double>(sizes[i]), t[i]);
  plan::SparsifyModel m;
  if (!plan::SparsifyModel::fit(plan::SparsifyModel::Kind::kLinear, samples, &m).ok()) return;
  if (comm_.rank() == 0)
    MGS_LOG_INFO(
        "selection of CUDA buckets timed on the device: {:.3g} ns per element (calibration's CPU figure {:.3g}); "
        "the exchange choice and the merge plan use it",
        m.c_s * 1e9, model_.sparsify.c_s * 1e9);
  if (pinned_) return;  // the plan file's model decides, not a measurement
  model_.sparsify = m;
  plan::CostModel base = online_.base();
  base.sparsify = m;
  online_.setBase(base);
}

void JobCostModel::agreeDeviceCollectives(const Status& own, const std::vector<double>& mine) {
  device_comm_asked_ = true;
  const CollectiveSizes sizes = deviceCollectiveSizes(comm_.size());
  const size_t calls = sizes.allreduce.size() + sizes.allgather.size() + sizes.broadcast.size();
  std::vector<double> t(calls + 1, 0.0);
  if (own.ok() && mine.size() == calls)
    std::copy(mine.begin(), mine.end(), t.begin());
  else
    t.back() = 1.0;  // this rank has no figures: every rank keeps the MPI terms
  const Status st = comm_.allreduce(t.data(), t.size(), MGS_FLOAT64, CommOp::kMax);
  if (!st.ok() || t.back() > 0) {
    MGS_LOG_WARN("rank {}: the device communicator's collectives were not timed ({}); the cost model keeps MPI's "
                 "terms and CUDA device buckets take the allgather",
                 comm_.rank(), !st.ok() ? st.message() : own.ok() ? "another rank could not" : own.message());
    return;
  }
  plan::CostModel m = model_;
  if (!fitCollectives(sizes, t, comm_.size(), &m).ok()) return;
  if (comm_.rank() == 0)
    MGS_LOG_INFO(
        "device communicator timed: allgather {:.3g} ms for 1 MiB in all, allreduce {:.3g} ms for 1 MiB, broadcast "
        "{:.3g} ms for 1 MiB (MPI's: {:.3g}, {:.3g}, {:.3g} ms); the exchange choice of device buckets and the merge "
        "plan use them",
        m.allgather.seconds(1 << 20) * 1e3, m.allreduce.seconds(1 << 20) * 1e3, m.broadcast.seconds(1 << 20) * 1e3,
        model_.allgather.seconds(1 << 20) * 1e3, model_.allreduce.seconds(1 << 20) * 1e3,
        model_.broadcast.seconds(1 << 20) * 1e3);
  if (pinned_) return;  // the plan file's model decides, not a measurement
  auto take = [&m](plan::CostModel* to) {
    to->allreduce = m.allreduce;
    to->allgather = m.allgather;
    to->broadcast = m.broadcast;
    to->dense_overlap = 0;  // timed on MPI's allreduce; the device's is not
  };
  take(&model_);
  plan::CostModel base = online_.base();
  take(&base);
  online_.setBase(base);
  device_priced_ = true;
}

void JobCostModel::pin(const plan::CostModel& saved) {
  // The file's model prices what the file does not fix (warm-up densities,
  // partial buckets), so nothing measured in this job decides.
  const int ranks_per_node = model_.ranks_per_node;
  model_ = saved;
  model_.ranks_per_node = ranks_per_node;
  stamp(&model_);
  online_.setBase(model_);
  pinned_ = true;
}

plan::CostModel JobCostModel::refit() {
  plan::CostModel old = model_;
  model_ = online_.refit();  // the base, stamped when it was taken in
  return old;
}

}  // namespace mgs
