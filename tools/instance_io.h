// JSON in and out for the planner tools: planning instances (mgs-plan),
// model traces (mgs-sim) and plans. The format is documented in
// docs/planner.md. Parsing errors come back as a Status naming the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/plan.h"

namespace mgs::tools {

// An instance: layers in backward order plus the cost model. An optional
// "preset" fills the cost model first; explicit fields (read by
// plan/cost_model_io.h, the format a saved calibration has) override it, and
// `cost` (a --cost-model file), when given, replaces all but the density.
Status parseInstance(const nlohmann::json& j, plan::PlanInput* out, const plan::CostModel* cost = nullptr);

// A cost-model file (a calibration saved by MGS_CALIBRATION=<file>).
Status readCostModelFile(const std::string& path, plan::CostModel* out);

// A model trace for the simulator: layers (backward order) and forward time.
struct Trace {
  std::string model;
  std::string source;  // where the sizes and times came from
  int batch = 0;
  double forward_s = 0;
  std::vector<plan::LayerInfo> layers;
};
Status parseTrace(const nlohmann::json& j, Trace* out);

// Shared by both: a layers array of {"name", "elements", "backward_s"}.
Status parseLayers(const nlohmann::json& j, std::vector<plan::LayerInfo>* out);

// {"planner", "groups", "predicted_s", "model", "selection" (sparse model
// only), "front_capped", "max_front" (mgs only)}.
nlohmann::json planToJson(const plan::Plan& plan);

Status readJsonFile(const std::string& path, nlohmann::json* out);

}  // namespace mgs::tools
