// A saved merge plan (MGS_PLAN_FILE, docs/planner.md "Reproducible runs"):
// which sparse tensors share a bucket, each bucket's exchange, and what the
// plan was made for. A job that finds the file runs this plan from its first
// step, with no profile, trials or re-planning, so two such jobs with the
// same seed send the same selections and end with the same weights.
//
//   {"format": "mgs-plan", "version": 1, "library": "0.1.0", "workers": 4, "ranks_per_node": 1,
//    "settings": {"MGS_COMPRESSOR": "gaussiank", "MGS_DENSITY": "0.01", ...},
//    "planner": "mgs", "label": "uniform 1/2", "step": 23, "predicted_span_s": 0.0123,
//    "cost_model": {...a cost-model document (cost_model_io.h)...},
//    "buckets": [{"exchange": "allgather", "tensors": [["fc.weight", 2048000], ["fc.bias", 1000]]}, ...]}
//
// Buckets are in plan order, tensors in plan order inside a bucket, each
// with its element count. "cost_model" prices the exchange of buckets that
// run at another density than MGS_DENSITY (warm-up) or partially filled.
//
// Pure like the rest of plan/: text in, text out. Reading and writing the
// file, and agreeing on it across ranks, is core/replanner_plan_file.cc's.
// Readers never throw; errors are kInvalidArgument naming the field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/cost_model.h"

namespace mgs::plan {

struct PlanFileTensor {
  std::string name;
  int64_t elements = 0;
};

struct PlanFileBucket {
  Exchange exchange = Exchange::kAllgather;
  std::vector<PlanFileTensor> tensors;  // plan order
};

struct PlanFile {
  std::string library;  // the libmgs version that wrote it
  int workers = 0;      // ranks of the job that wrote it
  int ranks_per_node = 1;
  // The MGS_* values the plan and its exchanges depend on (planFileSettings()).
  std::map<std::string, std::string> settings;
  std::string planner, label;  // for people: how the plan was chosen
  uint64_t step = 0;           // the step at which the writing job settled on it
  double predicted_span_s = 0;
  CostModel cost;
  std::vector<PlanFileBucket> buckets;
};

// The names of the MGS_* settings a plan file records and a reading job
// must match: what decides which tensors are sparse, what a bucket sends and
// how it travels.
const std::vector<std::string>& planFileSettings();

std::string planFileToJson(const PlanFile& f);
// Checks the document's shape: known keys, the format and version, at
// least one bucket, no empty bucket, no tensor twice, elements >= 1.
Status parsePlanFile(const std::string& text, PlanFile* out);

// What the reading job is. checkPlanFileJob() returns kConfig naming the
// first difference (the file's value and the job's) and what to do.
struct PlanFileJob {
  std::string library;
  int workers = 0;
  int ranks_per_node = 1;
  std::map<std::string, std::string> settings;  // at least planFileSettings()
};
Status checkPlanFileJob(const PlanFile& f, const PlanFileJob& job);

}  // namespace mgs::plan
