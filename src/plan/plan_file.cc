#include "plan/plan_file.h"

#include <nlohmann/json.hpp>
#include <set>

#include "common/check.h"
#include "plan/cost_model_io.h"

namespace mgs::plan {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "mgs-plan";
constexpr int kVersion = 1;

Status invalid(const std::string& path, const std::string& what) {
  return Status(Code::kInvalidArgument, path + ": " + what);
}

Status text(const json& j, const std::string& path, std::string* out) {
  if (!j.is_string()) return invalid(path, std::string("expected a string, got ") + j.type_name());
  *out = j.get<std::string>();
  return Status::OK();
}

Status readBucket(const json& j, const std::string& path, std::set<std::string>* seen, PlanFileBucket* out) {
  if (!j.is_object()) return invalid(path, std::string("expected an object, got ") + j.type_name());
  for (const auto& item : j.items())
    if (item.key() != "exchange" && item.key() != "tensors")
      return invalid(path, "unknown key \"" + item.key() + "\" (expected exchange, tensors)");
  if (!j.contains("exchange") || !j.contains("tensors")) return invalid(path, "expected \"exchange\" and \"tensors\"");
  std::string name;
  MGS_RETURN_IF_ERROR(text(j.at("exchange"), path + ".exchange", &name));
  unsigned bit = 0;
  if (name.find(',') != std::string::npos || !parseExchanges(name, &bit))
    return invalid(path + ".exchange", "expected one of allgather, agreed, dense, hierarchical, got \"" + name + "\"");
  for (Exchange e : {Exchange::kAllgather, Exchange::kAgreed, Exchange::kDense, Exchange::kHierarchical})
    if (bit == exchangeBit(e)) out->exchange = e;
  const json& ts = j.at("tensors");
  if (!ts.is_array() || ts.empty()) return invalid(path + ".tensors", "expected a non-empty array");
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string at = path + ".tensors[" + std::to_string(i) + "]";
    if (!ts[i].is_array() || ts[i].size() != 2) return invalid(at, "expected [name, elements]");
    PlanFileTensor t;
    MGS_RETURN_IF_ERROR(text(ts[i][0], at + "[0]", &t.name));
    MGS_RETURN_IF_ERROR(jsonInteger(ts[i][1], at + "[1]", 1, INT64_MAX, &t.elements));
    if (!seen->insert(t.name).second) return invalid(at, "tensor \"" + t.name + "\" is in the plan twice");
    out->tensors.push_back(std::move(t));
  }
  return Status::OK();
}

Status readFile(const json& j, PlanFile* out) {
  if (!j.is_object()) return invalid("plan file", std::string("expected a JSON object, got ") + j.type_name());
  const std::set<std::string> keys = {"format",     "version", "library", "workers", "ranks_per_node",
                                      "settings",   "planner", "label",   "step",    "predicted_span_s",
                                      "cost_model", "buckets", "comment"};
  for (const auto& item : j.items())
    if (!keys.count(item.key())) return invalid("plan file", "unknown key \"" + item.key() + "\"");
  for (const char* k : {"format", "version", "library", "workers", "settings", "cost_model", "buckets"})
    if (!j.contains(k)) return invalid("plan file", std::string("missing \"") + k + "\"");
  std::string format;
  MGS_RETURN_IF_ERROR(text(j.at("format"), "format", &format));
  if (format != kFormat) return invalid("format", "expected \"mgs-plan\", got \"" + format + "\"");
  int64_t i = 0;
  MGS_RETURN_IF_ERROR(jsonInteger(j.at("version"), "version", 1, INT64_MAX, &i));
  if (i != kVersion)
    return invalid("version",
                   "this library reads version " + std::to_string(kVersion) + ", the file has " + std::to_string(i));
  PlanFile f;
  MGS_RETURN_IF_ERROR(text(j.at("library"), "library", &f.library));
  MGS_RETURN_IF_ERROR(jsonInteger(j.at("workers"), "workers", 1, 1 << 24, &i));
  f.workers = static_cast<int>(i);
  if (j.contains("ranks_per_node")) {
    MGS_RETURN_IF_ERROR(jsonInteger(j.at("ranks_per_node"), "ranks_per_node", 1, 1 << 20, &i));
    f.ranks_per_node = static_cast<int>(i);
  }
  const json& s = j.at("settings");
  if (!s.is_object()) return invalid("settings", std::string("expected an object, got ") + s.type_name());
  for (const auto& item : s.items())
    MGS_RETURN_IF_ERROR(text(item.value(), "settings." + item.key(), &f.settings[item.key()]));
  if (j.contains("planner")) MGS_RETURN_IF_ERROR(text(j.at("planner"), "planner", &f.planner));
  if (j.contains("label")) MGS_RETURN_IF_ERROR(text(j.at("label"), "label", &f.label));
  if (j.contains("step")) {
    MGS_RETURN_IF_ERROR(jsonInteger(j.at("step"), "step", 0, INT64_MAX, &i));
    f.step = static_cast<uint64_t>(i);
  }
  if (j.contains("predicted_span_s"))
    MGS_RETURN_IF_ERROR(jsonNumber(j.at("predicted_span_s"), "predicted_span_s", &f.predicted_span_s));
  Status st = parseCostModel(j.at("cost_model").dump(), &f.cost);
  if (!st.ok()) return invalid("cost_model", st.message());
  const json& b = j.at("buckets");
  if (!b.is_array() || b.empty()) return invalid("buckets", "expected a non-empty array");
  std::set<std::string> seen;
  for (size_t g = 0; g < b.size(); ++g) {
    PlanFileBucket bucket;
    MGS_RETURN_IF_ERROR(readBucket(b[g], "buckets[" + std::to_string(g) + "]", &seen, &bucket));
    f.buckets.push_back(std::move(bucket));
  }
  *out = std::move(f);
  return Status::OK();
}

}  // namespace

const std::vector<std::string>& planFileSettings() {
  static const std::vector<std::string> names = {"MGS_COMPRESSOR",         "MGS_DENSITY",  "MGS_WARMUP_STEPS",
                                                 "MGS_ERROR_FEEDBACK",     "MGS_EXCHANGE", "MGS_DENSE_FALLBACK",
                                                 "MGS_MIN_SPARSE_ELEMENTS"};
  return names;
}

std::string planFileToJson(const PlanFile& f) {
  // One line per bucket, so that a diff of two plans reads bucket by bucket.
  std::string out = "{\n";
  out += "  \"format\": " + json(kFormat).dump() + ",\n";
  out += "  \"version\": " + std::to_string(kVersion) + ",\n";
  out += "  \"library\": " + json(f.library).dump() + ",\n";
  out += "  \"workers\": " + std::to_string(f.workers) + ",\n";
  out += "  \"ranks_per_node\": " + std::to_string(f.ranks_per_node) + ",\n";
  json settings = json::object();
  for (const auto& [k, v] : f.settings) settings[k] = v;
  out += "  \"settings\": " + settings.dump() + ",\n";
  out += "  \"planner\": " + json(f.planner).dump() + ",\n";
  out += "  \"label\": " + json(f.label).dump() + ",\n";
  out += "  \"step\": " + std::to_string(f.step) + ",\n";
  out += "  \"predicted_span_s\": " + json(f.predicted_span_s).dump() + ",\n";
  out += "  \"cost_model\": " + costModelToJson(f.cost, false) + ",\n";
  out += "  \"buckets\": [\n";
  for (size_t g = 0; g < f.buckets.size(); ++g) {
    json ts = json::array();
    for (const auto& t : f.buckets[g].tensors) ts.push_back({t.name, t.elements});
    out += "    {\"exchange\": " + json(exchangeName(f.buckets[g].exchange)).dump() + ", \"tensors\": " + ts.dump() +
           "}" + (g + 1 < f.buckets.size() ? "," : "") + "\n";
  }
  return out + "  ]\n}\n";
}

Status parsePlanFile(const std::string& text, PlanFile* out) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(Code::kInvalidArgument, "not valid JSON");
  // nlohmann-json throws on misuse; nothing here should, but never past here.
  try {
    return readFile(j, out);
  } catch (const std::exception& e) {
    return invalid("plan file", e.what());
  }
}

Status checkPlanFileJob(const PlanFile& f, const PlanFileJob& job) {
  auto mismatch = [](const std::string& what) {
    return Status(Code::kConfig, what + "; delete the file (or point MGS_PLAN_FILE elsewhere) to plan this job anew");
  };
  if (f.library != job.library)
    return mismatch("it was written by libmgs " + f.library + ", this is libmgs " + job.library);
  if (f.workers != job.workers)
    return mismatch("it was written by a job of " + std::to_string(f.workers) + " ranks, this job has " +
                    std::to_string(job.workers));
  if (f.ranks_per_node != job.ranks_per_node)
    return mismatch("it was written with " + std::to_string(f.ranks_per_node) +
                    " ranks per node for the hierarchical exchange, this job has " +
                    std::to_string(job.ranks_per_node));
  for (const auto& name : planFileSettings()) {
    const auto fit = f.settings.find(name);
    const auto jit = job.settings.find(name);
    const std::string theirs = fit == f.settings.end() ? "(not recorded)" : fit->second;
    const std::string ours = jit == job.settings.end() ? "(unknown)" : jit->second;
    if (theirs != ours) return mismatch("it was written with " + name + "=" + theirs + ", this job has " + ours);
  }
  return Status::OK();
}

}  // namespace mgs::plan
