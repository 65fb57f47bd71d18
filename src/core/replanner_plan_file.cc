// The re-planner's MGS_PLAN_FILE part (replanner.h): reading a saved plan
// once at init, and writing the plans a job settles on. Running a loaded
// plan (its buckets, its exchanges, refusing tensors it does not have) is
// the schedule's (bucket_schedule.h).
//
// Why a file and not a fixed seed for the planner: the planner is already
// deterministic; what differs between two runs is its input (rank 0's
// gradient timings, calibration, the trials' step times, the online refit).
// Only taking those out of the job makes the plan, and so which gradients
// share a threshold, repeat.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>

#include "common/check.h"
#include "common/logging.h"
#include "core/replanner.h"
#include "plan/plan_file.h"

#ifndef MGS_VERSION_STRING
#define MGS_VERSION_STRING "unknown"
#endif

namespace mgs {
namespace {

std::map<std::string, std::string> recordedSettings(const Config& config) {
  std::map<std::string, std::string> s;
  for (const auto& name : plan::planFileSettings())
    if (const ParamSpec* p = findParam(name)) s[name] = p->show(config);
  return s;
}

}  // namespace

Status Replanner::loadPlanFile(std::optional<Pinned>* pinned) {
  pinned->reset();
  const std::string& path = config_.plan_file;
  if (path.empty()) return Status::OK();
  // Rank 0 decides for everyone: "W" (no file: plan, then write it), "L"
  // and the text (run it), or "E" and why it could not be read.
  std::string msg;
  if (comm_.rank() == 0) {
    std::error_code ec;
    const bool exists = std::filesystem::exists(path, ec);
    if (ec) {
      msg = "E" + ec.message();
    } else if (!exists) {
      msg = "W";
    } else {
      std::ifstream f(path, std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      msg = f.good() || f.eof() ? "L" + ss.str() : "Ecould not be read";
    }
  }
  MGS_RETURN_IF_ERROR(comm_.broadcastString(&msg, 0));
  const std::string where = "rank " + std::to_string(comm_.rank()) + ": MGS_PLAN_FILE=" + path;
  MGS_ENSURE(!msg.empty(), kInternal, where << ": empty answer from rank 0");
  if (msg[0] == 'E') return Status(Code::kConfig, where + ": rank 0 could not read it: " + msg.substr(1));
  if (msg[0] == 'W') {
    save_plan_ = comm_.rank() == 0;
    if (comm_.rank() == 0)
      MGS_LOG_INFO("MGS_PLAN_FILE={} does not exist: planning as usual; every plan the job settles on is saved there",
                   path);
    return Status::OK();
  }
  plan::PlanFile f;
  Status st = plan::parsePlanFile(msg.substr(1), &f);
  if (!st.ok()) return Status(Code::kConfig, where + " (as rank 0 read it) is not a plan file: " + st.message());
  plan::PlanFileJob job;
  job.library = MGS_VERSION_STRING;
  job.workers = comm_.size();
  job.ranks_per_node = cost_.model().ranks_per_node;
  job.settings = recordedSettings(config_);
  st = plan::checkPlanFileJob(f, job);
  if (!st.ok()) return Status(st.code(), where + " does not fit this job: " + st.message());

  // Run it, priced by the file's model.
  cost_.pin(f.cost);
  Pinned p;
  p.plan.predicted_span = f.predicted_span_s;
  p.plan.label = f.label;
  int count[4] = {0, 0, 0, 0};
  for (const auto& b : f.buckets) {
    p.plan.groups.emplace_back();
    for (const auto& t : b.tensors) {
      p.plan.groups.back().push_back(t.name);
      p.elements[t.name] = t.elements;
    }
    p.exchange.push_back(b.exchange);
    ++count[static_cast<int>(b.exchange)];
  }
  cost_.online().planned(p.plan.predicted_span);
  pinned_ = true;
  stats_.plans = 1;
  if (comm_.rank() == 0) {
    std::string ex;
    for (plan::Exchange e :
         {plan::Exchange::kAllgather, plan::Exchange::kAgreed, plan::Exchange::kDense, plan::Exchange::kHierarchical})
      if (count[static_cast<int>(e)])
        ex += fmt::format("{}{} {}", ex.empty() ? "" : ", ", count[static_cast<int>(e)], plan::exchangeName(e));
    MGS_LOG_INFO(
        "MGS_PLAN_FILE={}: running its plan from the first step ({} sparse tensors in {} buckets: {}; '{}' settled "
        "at step {} of the job that wrote it); no profiling, trials or re-planning",
        path, p.elements.size(), p.plan.groups.size(), ex, f.label, f.step);
  }
  *pinned = std::move(p);
  return Status::OK();
}

void Replanner::savePlan(const PlanChoice& p, const Boundary& b) {
  if (!save_plan_) return;
  const plan::CostModel& cost = cost_.model();
  plan::PlanFile f;
  f.library = MGS_VERSION_STRING;
  f.workers = comm_.size();
  f.ranks_per_node = cost.ranks_per_node;
  f.settings = recordedSettings(config_);
  f.planner = config_.effectivePlanner();
  f.label = p.label;
  f.step = b.step;
  f.predicted_span_s = p.predicted_span;
  f.cost = cost;
  for (const auto& g : p.groups) {
    plan::PlanFileBucket bucket;
    int64_t n = 0;
    for (const auto& name : g) {
      const auto it = b.elements->find(name);
      const int64_t e = it == b.elements->end() ? 0 : it->second;
      bucket.tensors.push_back({name, e});
      n += e;
    }
    // What this job sends the bucket by once past warm-up (the schedule
    // asks the same model the same question).
    bucket.exchange = cost_.exchangeFor(static_cast<size_t>(n), config_.density);
    f.buckets.push_back(std::move(bucket));
  }
  // Written next to the target and renamed over it, so a reader (or a job
  // killed mid-write) never sees half a plan.
  const std::string& path = config_.plan_file;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << plan::planFileToJson(f);
    out.flush();
    if (!out) {
      MGS_LOG_ERROR("MGS_PLAN_FILE={}: could not write {}: the plan is not saved", path, tmp);
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    MGS_LOG_ERROR("MGS_PLAN_FILE={}: could not rename {} to it: the plan is not saved", path, tmp);
    std::remove(tmp.c_str());
    return;
  }
  MGS_LOG_INFO("MGS_PLAN_FILE={}: saved the merge plan '{}' ({} buckets) at step {}", path, p.label, p.groups.size(),
               b.step);
}

}  // namespace mgs
