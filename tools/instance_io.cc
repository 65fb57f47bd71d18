#include "instance_io.h"

#include <fstream>
#include <sstream>

#include "common/check.h"
#include "plan/cost_model_io.h"

namespace mgs::tools {
namespace {

using nlohmann::json;

Status invalid(const std::string& msg) { return Status(Code::kInvalidArgument, msg); }

// nlohmann throws on type mismatches; turn that into a Status once here.
template <typename F>
Status guarded(const char* what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return invalid(std::string("bad ") + what + ": " + e.what());
  }
}

}  // namespace

Status parseLayers(const json& j, std::vector<plan::LayerInfo>* out) {
  if (!j.is_array()) return invalid("'layers' must be an array");
  out->clear();
  for (size_t i = 0; i < j.size(); ++i) {
    const json& l = j[i];
    if (!l.contains("elements") || !l.contains("backward_s"))
      return invalid("layer " + std::to_string(i) + " needs elements and backward_s");
    const std::string at = "layers[" + std::to_string(i) + "]";
    int64_t elements = 0;
    double backward = 0;
    MGS_RETURN_IF_ERROR(plan::jsonInteger(l.at("elements"), at + ".elements", 0, INT64_C(1) << 50, &elements));
    MGS_RETURN_IF_ERROR(plan::jsonNumber(l.at("backward_s"), at + ".backward_s", &backward));
    out->push_back({l.value("name", "layer" + std::to_string(i)), elements, backward});
  }
  return Status::OK();
}

Status parseInstance(const json& j, plan::PlanInput* out, const plan::CostModel* cost) {
  return guarded("instance", [&]() -> Status {
    if (!j.is_object()) return invalid("an instance must be a JSON object");
    plan::PlanInput in;
    if (j.contains("density")) {
      if (!j.at("density").is_number()) return invalid("'density' must be a number");
      in.cost.density = j.at("density").get<double>();
    }
    if (j.contains("preset")) {
      if (!j.at("preset").is_string()) return invalid("'preset' must be a string");
      const Status st = plan::costModelPreset(j.at("preset").get<std::string>(), &in.cost);
      if (!st.ok()) return st;
    }
    if (!j.contains("layers")) return invalid("an instance needs 'layers'");
    Status st = parseLayers(j.at("layers"), &in.layers);
    if (!st.ok()) return st;
    // The cost fields (workers, bytes_per_element, allreduce, allgather,
    // sparsify) are those of a cost-model file, read by the same reader.
    if (!(st = plan::readCostModelFields(j, &in.cost)).ok()) return st;
    if (cost != nullptr) {
      const double density = in.cost.density;
      in.cost = *cost;
      in.cost.density = density;  // the job's density, not the cluster's
    }
    in.sparse = j.value("sparse", in.cost.density < 1.0);
    if (j.contains("selection")) {
      const std::string sel = j.at("selection").get<std::string>();
      if (!plan::parseSelection(sel, &in.selection))
        return invalid("'selection' must be \"compute\" or \"separate\", got \"" + sel + "\"");
    }
    if (j.contains("exchanges")) {
      if (!j.at("exchanges").is_string() ||
          !plan::parseExchanges(j.at("exchanges").get<std::string>(), &in.cost.exchanges))
        return invalid("'exchanges' must be a comma-separated list of allgather, agreed, dense, hierarchical, got " +
                       j.at("exchanges").dump());
    }
    if (j.contains("fusion_threshold_bytes"))
      MGS_RETURN_IF_ERROR(plan::jsonInteger(j.at("fusion_threshold_bytes"), "fusion_threshold_bytes", 0, INT64_MAX,
                                            &in.fusion_threshold_bytes));
    // Optional: the tensors the runtime keeps dense (PlanInput::dense_tensors).
    if (j.contains("dense_tensors")) {
      const json& d = j.at("dense_tensors");
      if (!d.is_array()) return invalid("'dense_tensors' must be an array");
      for (size_t i = 0; i < d.size(); ++i) {
        const std::string at = "dense_tensors[" + std::to_string(i) + "]";
        if (!d[i].is_object() || !d[i].contains("elements") || !d[i].contains("ready_s"))
          return invalid(at + " needs elements and ready_s");
        plan::DenseTensor t;
        t.name = d[i].value("name", "dense" + std::to_string(i));
        MGS_RETURN_IF_ERROR(plan::jsonInteger(d[i].at("elements"), at + ".elements", 0, INT64_C(1) << 50, &t.elements));
        MGS_RETURN_IF_ERROR(plan::jsonNumber(d[i].at("ready_s"), at + ".ready_s", &t.ready_s));
        in.dense_tensors.push_back(std::move(t));
      }
    }
    if (j.contains("round_phase_s"))
      MGS_RETURN_IF_ERROR(plan::jsonNumber(j.at("round_phase_s"), "round_phase_s", &in.round_phase_s));
    if (j.contains("front_cap")) {
      int64_t cap = 0;
      MGS_RETURN_IF_ERROR(plan::jsonInteger(j.at("front_cap"), "front_cap", 1, INT32_MAX, &cap));
      in.front_cap = static_cast<int>(cap);
    }
    st = plan::validatePlanInput(in);
    if (!st.ok()) return st;
    *out = std::move(in);
    return Status::OK();
  });
}

Status readCostModelFile(const std::string& path, plan::CostModel* out) {
  std::ifstream f(path);
  if (!f) return invalid("cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  const Status st = plan::parseCostModel(ss.str(), out);
  if (!st.ok()) return Status(st.code(), "'" + path + "': " + st.message());
  return Status::OK();
}

Status parseTrace(const json& j, Trace* out) {
  return guarded("trace", [&]() -> Status {
    Trace t;
    t.model = j.value("model", std::string("unknown"));
    t.source = j.value("source", std::string());
    if (j.contains("batch")) {
      int64_t batch = 0;
      MGS_RETURN_IF_ERROR(plan::jsonInteger(j.at("batch"), "batch", 0, INT32_MAX, &batch));
      t.batch = static_cast<int>(batch);
    }
    if (!j.contains("layers")) return invalid("a trace needs 'layers'");
    const Status st = parseLayers(j.at("layers"), &t.layers);
    if (!st.ok()) return st;
    // Without a measured forward time, assume half the backward time, as
    // the MG-WFBP simulator does (algorithms.md §4.5).
    double backward = 0;
    for (const auto& l : t.layers) backward += l.backward_s;
    t.forward_s = 0.5 * backward;
    if (j.contains("forward_s")) MGS_RETURN_IF_ERROR(plan::jsonNumber(j.at("forward_s"), "forward_s", &t.forward_s));
    *out = std::move(t);
    return Status::OK();
  });
}

json planToJson(const plan::Plan& plan) {
  json j;
  j["planner"] = plan.planner;
  j["groups"] = plan.groups;
  j["predicted_s"] = plan.predicted_s;
  j["model"] = plan.sparse ? "sparse" : "dense";
  if (plan.sparse) j["selection"] = plan::selectionName(plan.selection);
  if (plan.planner == "mgs") {
    j["front_capped"] = plan.front_capped;
    j["max_front"] = plan.max_front;
  }
  return j;
}

Status readJsonFile(const std::string& path, json* out) {
  std::ifstream f(path);
  if (!f) return invalid("cannot open '" + path + "'");
  try {
    *out = json::parse(f);
  } catch (const std::exception& e) {
    return invalid("'" + path + "' is not valid JSON: " + e.what());
  }
  return Status::OK();
}

}  // namespace mgs::tools
