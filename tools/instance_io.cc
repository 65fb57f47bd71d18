#include "instance_io.h"

#include <fstream>

namespace mgs::tools {
namespace {

using nlohmann::json;

Status invalid(const std::string& msg) { return Status(Code::kInvalidArgument, msg); }

Status parseComm(const json& j, const std::string& field, plan::CommModel* out) {
  if (!j.is_object()) return invalid("'" + field + "' must be an object");
  if (j.contains("table")) {
    std::vector<plan::Sample> pts;
    for (const auto& p : j.at("table")) {
      if (!p.is_array() || p.size() != 2)
        return invalid("'" + field + ".table' entries must be [bytes, seconds]");
      pts.push_back({p[0].get<double>(), p[1].get<double>()});
    }
    return plan::CommModel::table(std::move(pts), out);
  }
  if (!j.contains("alpha_s") || !j.contains("beta_s_per_byte"))
    return invalid("'" + field + "' needs alpha_s and beta_s_per_byte, or a table");
  *out = plan::CommModel::linear(j.at("alpha_s").get<double>(), j.at("beta_s_per_byte").get<double>());
  return Status::OK();
}

Status parseSparsify(const json& j, plan::SparsifyModel* out) {
  const std::string kind = j.value("kind", std::string("nlogn"));
  if (kind == "linear") {
    out->kind = plan::SparsifyModel::Kind::kLinear;
  } else if (kind == "nlogn") {
    out->kind = plan::SparsifyModel::Kind::kNLogN;
  } else {
    return invalid("'sparsify.kind' must be \"linear\" or \"nlogn\", got \"" + kind + "\"");
  }
  if (!j.contains("c_s")) return invalid("'sparsify' needs c_s");
  out->c_s = j.at("c_s").get<double>();
  return Status::OK();
}

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
    out->push_back({l.value("name", "layer" + std::to_string(i)), l.at("elements").get<int64_t>(),
                    l.at("backward_s").get<double>()});
  }
  return Status::OK();
}

Status parseInstance(const json& j, plan::PlanInput* out) {
  return guarded("instance", [&]() -> Status {
    if (!j.is_object()) return invalid("an instance must be a JSON object");
    plan::PlanInput in;
    in.cost.density = j.value("density", in.cost.density);
    if (j.contains("preset")) {
      const Status st = plan::costModelPreset(j.at("preset").get<std::string>(), &in.cost);
      if (!st.ok()) return st;
    }
    if (!j.contains("layers")) return invalid("an instance needs 'layers'");
    Status st = parseLayers(j.at("layers"), &in.layers);
    if (!st.ok()) return st;
    in.cost.bytes_per_element = j.value("bytes_per_element", in.cost.bytes_per_element);
    in.cost.workers = j.value("workers", in.cost.workers);
    if (j.contains("allreduce") && !(st = parseComm(j["allreduce"], "allreduce", &in.cost.allreduce)).ok())
      return st;
    if (j.contains("allgather") && !(st = parseComm(j["allgather"], "allgather", &in.cost.allgather)).ok())
      return st;
    if (j.contains("sparsify") && !(st = parseSparsify(j["sparsify"], &in.cost.sparsify)).ok()) return st;
    in.sparse = j.value("sparse", in.cost.density < 1.0);
    if (j.contains("selection")) {
      const std::string sel = j.at("selection").get<std::string>();
      if (!plan::parseSelection(sel, &in.selection))
        return invalid("'selection' must be \"compute\" or \"separate\", got \"" + sel + "\"");
    }
    in.fusion_threshold_bytes = j.value("fusion_threshold_bytes", in.fusion_threshold_bytes);
    in.front_cap = j.value("front_cap", in.front_cap);
    st = plan::validatePlanInput(in);
    if (!st.ok()) return st;
    *out = std::move(in);
    return Status::OK();
  });
}

Status parseTrace(const json& j, Trace* out) {
  return guarded("trace", [&]() -> Status {
    Trace t;
    t.model = j.value("model", std::string("unknown"));
    t.source = j.value("source", std::string());
    t.batch = j.value("batch", 0);
    if (!j.contains("layers")) return invalid("a trace needs 'layers'");
    const Status st = parseLayers(j.at("layers"), &t.layers);
    if (!st.ok()) return st;
    // Without a measured forward time, assume half the backward time, as
    // the MG-WFBP simulator does (algorithms.md §4.5).
    double backward = 0;
    for (const auto& l : t.layers) backward += l.backward_s;
    t.forward_s = j.value("forward_s", 0.5 * backward);
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
