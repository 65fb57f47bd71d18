// BucketSchedule's MGS_PLAN_FILE part (bucket_schedule.h): reading a saved
// plan once at init, running it, and writing the plans a job settles on.
//
// Why a file and not a fixed seed for the planner: the planner is already
// deterministic; what differs between two runs is its input (rank 0's
// gradient timings, calibration, the trials' step times, the online refit).
// Only taking those out of the job makes the plan, and so which gradients
// share a threshold, repeat.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "common/check.h"
#include "common/logging.h"
#include "core/block_exchange.h"
#include "core/bucket_schedule.h"

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

Status BucketSchedule::usePlanFile(std::function<void(Request&, Status)> fail) {
  fail_ = std::move(fail);
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
  job.ranks_per_node = cost_.ranks_per_node;
  job.settings = recordedSettings(config_);
  st = plan::checkPlanFileJob(f, job);
  if (!st.ok()) return Status(st.code(), where + " does not fit this job: " + st.message());

  // Run it: the file's model prices what the file does not fix (warm-up
  // densities, partial buckets), so nothing measured in this job decides.
  cost_ = f.cost;
  cost_.ranks_per_node = job.ranks_per_node;
  have_cost_ = true;
  PlanChoice c;
  c.predicted_span = f.predicted_span_s;
  c.label = f.label;
  pinned_exchange_.clear();
  pinned_elements_.clear();
  int count[4] = {0, 0, 0, 0};
  for (const auto& b : f.buckets) {
    c.groups.emplace_back();
    for (const auto& t : b.tensors) {
      c.groups.back().push_back(t.name);
      pinned_elements_[t.name] = t.elements;
    }
    pinned_exchange_.push_back(b.exchange);
    ++count[static_cast<int>(b.exchange)];
  }
  applyPlan(c);
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
        path, pinned_elements_.size(), c.groups.size(), ex, f.label, f.step);
  }
  return Status::OK();
}

plan::Exchange BucketSchedule::exchangeFor(const std::vector<Request>& members, size_t n, double density) const {
  if (pinned_ && !members.empty() && density == config_.density) {
    const auto it = bucket_of_.find(members.front().name);
    if (it != bucket_of_.end() && buckets_[it->second].members.size() == members.size())
      return pinned_exchange_[it->second];
  }
  return pickExchange(config_, comm_.size(), have_cost_ ? &cost_ : nullptr, n, density);
}

void BucketSchedule::refuse(Request& req, const std::string& why) {
  if (refused_.ok()) {
    refused_ = Status(Code::kConfig, "rank " + std::to_string(comm_.rank()) + ": MGS_PLAN_FILE=" + config_.plan_file +
                                         " does not fit this job: " + why +
                                         "; delete the file (or point MGS_PLAN_FILE elsewhere) to plan this job anew");
    MGS_LOG_ERROR("{}", refused_.message());
  }
  if (fail_) {
    fail_(req, refused_);
    // Held members of the plan's buckets would wait for ones that now fail.
    failHeld(refused_, fail_);
  }
}

void BucketSchedule::savePlan(const PlanChoice& p) {
  if (!save_plan_) return;
  plan::PlanFile f;
  f.library = MGS_VERSION_STRING;
  f.workers = comm_.size();
  f.ranks_per_node = cost_.ranks_per_node;
  f.settings = recordedSettings(config_);
  f.planner = config_.effectivePlanner();
  f.label = p.label;
  f.step = step_;
  f.predicted_span_s = p.predicted_span;
  f.cost = cost_;
  for (const auto& g : p.groups) {
    plan::PlanFileBucket b;
    int64_t n = 0;
    for (const auto& name : g) {
      const auto it = elements_.find(name);
      const int64_t e = it == elements_.end() ? 0 : it->second;
      b.tensors.push_back({name, e});
      n += e;
    }
    // What this job sends the bucket by once past warm-up (the pipeline
    // asks the same function with the same model).
    b.exchange =
        pickExchange(config_, comm_.size(), have_cost_ ? &cost_ : nullptr, static_cast<size_t>(n), config_.density);
    f.buckets.push_back(std::move(b));
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
               step_);
}

}  // namespace mgs
