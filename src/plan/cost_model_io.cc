#include "plan/cost_model_io.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "common/check.h"

namespace mgs::plan {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "mgs-cost-model";
constexpr int kVersion = 1;

Status invalid(const std::string& path, const std::string& what) {
  return Status(Code::kInvalidArgument, path + ": " + what);
}

std::string typeOf(const json& j) { return j.type_name(); }

// A finite number (JSON has no NaN/Inf, but a double can overflow to Inf).
Status number(const json& j, const std::string& path, double* out) {
  if (!j.is_number()) return invalid(path, "expected a number, got " + typeOf(j));
  const double v = j.get<double>();
  if (!std::isfinite(v)) return invalid(path, "expected a finite number");
  *out = v;
  return Status::OK();
}

Status nonNegative(const json& j, const std::string& path, double* out) {
  Status st = number(j, path, out);
  if (st.ok() && *out < 0) return invalid(path, "expected a number >= 0, got " + j.dump());
  return st;
}

Status boolean(const json& j, const std::string& path, bool* out) {
  if (!j.is_boolean()) return invalid(path, "expected true or false, got " + j.dump());
  *out = j.get<bool>();
  return Status::OK();
}

Status integer(const json& j, const std::string& path, int64_t lo, int64_t hi, int64_t* out) {
  if (!j.is_number_integer())
    return invalid(path, "expected an integer, got " + (j.is_number() ? j.dump() : typeOf(j)));
  // An unsigned value above INT64_MAX is out of range, not negative.
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(hi))
    return invalid(path,
                   "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + j.dump());
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi)
    return invalid(path,
                   "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + j.dump());
  *out = v;
  return Status::OK();
}

Status onlyKeys(const json& j, const std::string& path, const std::set<std::string>& allowed) {
  for (const auto& item : j.items())
    if (!allowed.count(item.key())) {
      std::string list;
      for (const auto& k : allowed) list += (list.empty() ? "" : ", ") + k;
      return invalid(path, "unknown key \"" + item.key() + "\" (expected " + list + ")");
    }
  return Status::OK();
}

// A JSON array of `n` numbers, e.g. one [bytes, seconds] point.
Status tuple(const json& j, const std::string& path, size_t n, const char* shape, double* out) {
  if (!j.is_array() || j.size() != n) return invalid(path, std::string("expected ") + shape);
  for (size_t i = 0; i < n; ++i) MGS_RETURN_IF_ERROR(number(j[i], path + "[" + std::to_string(i) + "]", &out[i]));
  return Status::OK();
}

Status readComm(const json& j, const std::string& path, CommModel* out) {
  if (!j.is_object()) return invalid(path, "expected an object, got " + typeOf(j));
  if (j.contains("points"))
    return invalid(path,
                   "\"points\" is the format of calibrations saved before this release: rename it to "
                   "\"table\" or delete the file so that it is measured again");
  const int forms = int(j.contains("table")) + int(j.contains("segments")) + int(j.contains("alpha_s"));
  if (forms != 1)
    return invalid(path, "expected exactly one of \"table\", \"segments\" or \"alpha_s\" + \"beta_s_per_byte\"");
  Status st;
  if (j.contains("table")) {
    MGS_RETURN_IF_ERROR(onlyKeys(j, path, {"table"}));
    const json& t = j.at("table");
    if (!t.is_array()) return invalid(path + ".table", "expected an array of [bytes, seconds]");
    std::vector<Sample> pts;
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string p = path + ".table[" + std::to_string(i) + "]";
      double v[2];
      MGS_RETURN_IF_ERROR(tuple(t[i], p, 2, "[bytes, seconds]", v));
      if (v[0] < 0 || v[1] < 0) return invalid(p, "bytes and seconds must be >= 0");
      pts.emplace_back(v[0], v[1]);
    }
    st = CommModel::table(std::move(pts), out);
  } else if (j.contains("segments")) {
    MGS_RETURN_IF_ERROR(onlyKeys(j, path, {"segments"}));
    const json& t = j.at("segments");
    if (!t.is_array()) return invalid(path + ".segments", "expected an array of [from_bytes, alpha_s, beta]");
    std::vector<CommModel::Segment> segs;
    for (size_t i = 0; i < t.size(); ++i) {
      double v[3];
      MGS_RETURN_IF_ERROR(
          tuple(t[i], path + ".segments[" + std::to_string(i) + "]", 3, "[from_bytes, alpha_s, beta_s_per_byte]", v));
      segs.push_back({v[0], v[1], v[2]});
    }
    st = CommModel::fromSegments(std::move(segs), out);
  } else {
    MGS_RETURN_IF_ERROR(onlyKeys(j, path, {"alpha_s", "beta_s_per_byte"}));
    if (!j.contains("beta_s_per_byte")) return invalid(path, "\"alpha_s\" needs \"beta_s_per_byte\"");
    double a, b;
    MGS_RETURN_IF_ERROR(nonNegative(j.at("alpha_s"), path + ".alpha_s", &a));
    MGS_RETURN_IF_ERROR(nonNegative(j.at("beta_s_per_byte"), path + ".beta_s_per_byte", &b));
    *out = CommModel::linear(a, b);
  }
  if (!st.ok()) return invalid(path, st.message());
  return Status::OK();
}

Status readSparsify(const json& j, SparsifyModel* out) {
  if (!j.is_object()) return invalid("sparsify", "expected an object, got " + typeOf(j));
  MGS_RETURN_IF_ERROR(onlyKeys(j, "sparsify", {"kind", "c_s"}));
  SparsifyModel m;
  if (j.contains("kind")) {
    const json& k = j.at("kind");
    if (k == "linear")
      m.kind = SparsifyModel::Kind::kLinear;
    else if (k == "nlogn")
      m.kind = SparsifyModel::Kind::kNLogN;
    else
      return invalid("sparsify.kind", "expected \"linear\" or \"nlogn\", got " + k.dump());
  }
  if (!j.contains("c_s")) return invalid("sparsify", "needs \"c_s\" (seconds per element, or per n*log2(n))");
  MGS_RETURN_IF_ERROR(nonNegative(j.at("c_s"), "sparsify.c_s", &m.c_s));
  *out = m;
  return Status::OK();
}

Status readFields(const json& j, CostModel* inout) {
  if (!j.is_object()) return invalid("cost model", "expected a JSON object, got " + typeOf(j));
  CostModel m = *inout;
  if (j.contains("format") && j.at("format") != kFormat)
    return invalid("format", std::string("expected \"") + kFormat + "\", got " + j.at("format").dump());
  if (j.contains("version")) {
    int64_t v;
    MGS_RETURN_IF_ERROR(integer(j.at("version"), "version", kVersion, kVersion, &v));
  }
  int64_t i;
  if (j.contains("workers")) {
    MGS_RETURN_IF_ERROR(integer(j.at("workers"), "workers", 1, 1 << 24, &i));
    m.workers = static_cast<int>(i);
  }
  if (j.contains("bytes_per_element")) {
    MGS_RETURN_IF_ERROR(integer(j.at("bytes_per_element"), "bytes_per_element", 1, 16, &i));
    m.bytes_per_element = static_cast<int>(i);
  }
  if (j.contains("allreduce")) MGS_RETURN_IF_ERROR(readComm(j.at("allreduce"), "allreduce", &m.allreduce));
  if (j.contains("allgather")) MGS_RETURN_IF_ERROR(readComm(j.at("allgather"), "allgather", &m.allgather));
  // Optional: files from before the agreed exchange have no broadcast term
  // (CostModel::broadcast says how it is then estimated).
  if (j.contains("broadcast")) MGS_RETURN_IF_ERROR(readComm(j.at("broadcast"), "broadcast", &m.broadcast));
  if (j.contains("sparsify")) MGS_RETURN_IF_ERROR(readSparsify(j.at("sparsify"), &m.sparsify));
  // Optional: files from before it have none (0: no negotiation start-up).
  if (j.contains("negotiation_s"))
    MGS_RETURN_IF_ERROR(nonNegative(j.at("negotiation_s"), "negotiation_s", &m.negotiation_s));
  // Optional: the coordinator loop (off when absent, CostModel says so).
  if (j.contains("coordinator_loop"))
    MGS_RETURN_IF_ERROR(boolean(j.at("coordinator_loop"), "coordinator_loop", &m.coordinator_loop));
  if (j.contains("cycle_s")) MGS_RETURN_IF_ERROR(nonNegative(j.at("cycle_s"), "cycle_s", &m.cycle_s));
  if (j.contains("allgather_overlap")) {
    MGS_RETURN_IF_ERROR(nonNegative(j.at("allgather_overlap"), "allgather_overlap", &m.allgather_overlap));
    if (m.allgather_overlap > 1)
      return invalid("allgather_overlap", "expected a number in [0, 1], got " + j.at("allgather_overlap").dump());
  }
  // Optional: files from before exchanges went in flight have none (0).
  if (j.contains("inflight_overlap")) {
    MGS_RETURN_IF_ERROR(nonNegative(j.at("inflight_overlap"), "inflight_overlap", &m.inflight_overlap));
    if (m.inflight_overlap > 1)
      return invalid("inflight_overlap", "expected a number in [0, 1], got " + j.at("inflight_overlap").dump());
  }
  // Optional: files from before queued allreduces were priced have none (0).
  if (j.contains("dense_overlap")) {
    MGS_RETURN_IF_ERROR(nonNegative(j.at("dense_overlap"), "dense_overlap", &m.dense_overlap));
    if (m.dense_overlap > 1)
      return invalid("dense_overlap", "expected a number in [0, 1], got " + j.at("dense_overlap").dump());
  }
  // Optional: files from before them have neither (0).
  if (j.contains("group_host_s"))
    MGS_RETURN_IF_ERROR(nonNegative(j.at("group_host_s"), "group_host_s", &m.group_host_s));
  if (j.contains("host_steal")) MGS_RETURN_IF_ERROR(nonNegative(j.at("host_steal"), "host_steal", &m.host_steal));
  if (j.contains("host_dilation")) {
    MGS_RETURN_IF_ERROR(nonNegative(j.at("host_dilation"), "host_dilation", &m.host_dilation));
    if (m.host_dilation < 1)
      return invalid("host_dilation", "expected a number >= 1, got " + j.at("host_dilation").dump());
  }
  if (j.contains("max_in_flight")) {
    MGS_RETURN_IF_ERROR(integer(j.at("max_in_flight"), "max_in_flight", 1, 1 << 20, &i));
    m.max_in_flight = static_cast<int>(i);
  }
  if (j.contains("dense_in_flight"))
    MGS_RETURN_IF_ERROR(boolean(j.at("dense_in_flight"), "dense_in_flight", &m.dense_in_flight));
  // Optional: the hierarchical exchange's terms (CostModel says how they
  // are estimated when absent).
  if (j.contains("ranks_per_node")) {
    MGS_RETURN_IF_ERROR(integer(j.at("ranks_per_node"), "ranks_per_node", 1, 1 << 20, &i));
    m.ranks_per_node = static_cast<int>(i);
  }
  if (j.contains("node")) MGS_RETURN_IF_ERROR(readComm(j.at("node"), "node", &m.node));
  if (j.contains("leader_allgather"))
    MGS_RETURN_IF_ERROR(readComm(j.at("leader_allgather"), "leader_allgather", &m.leader_allgather));
  *inout = m;
  return Status::OK();
}

json commToJson(const CommModel& c) {
  // The line form is only for what it can express (alpha, beta >= 0); a
  // single segment fitted with a negative slope stays a segment list.
  if (c.isLinear() && c.segments()[0].alpha_s >= 0 && c.segments()[0].beta_s_per_byte >= 0)
    return {{"alpha_s", c.segments()[0].alpha_s}, {"beta_s_per_byte", c.segments()[0].beta_s_per_byte}};
  json segs = json::array();
  for (const auto& s : c.segments()) segs.push_back({s.from_bytes, s.alpha_s, s.beta_s_per_byte});
  return {{"segments", segs}};
}

}  // namespace

Status jsonNumber(const json& j, const std::string& path, double* out) { return number(j, path, out); }

Status jsonInteger(const json& j, const std::string& path, int64_t lo, int64_t hi, int64_t* out) {
  return integer(j, path, lo, hi, out);
}

Status readCostModelFields(const json& j, CostModel* inout) {
  // nlohmann-json throws on misuse; nothing here should, but a throw must not
  // reach the coordinator thread.
  try {
    return readFields(j, inout);
  } catch (const std::exception& e) {
    return invalid("cost model", e.what());
  }
}

Status parseCostModel(const std::string& text, CostModel* out) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(Code::kInvalidArgument, "not valid JSON");
  if (!j.is_object()) return invalid("cost model", "expected a JSON object, got " + typeOf(j));
  MGS_RETURN_IF_ERROR(onlyKeys(j, "cost model",
                               {"format",
                                "version",
                                "workers",
                                "bytes_per_element",
                                "allreduce",
                                "allgather",
                                "broadcast",
                                "sparsify",
                                "negotiation_s",
                                "ranks_per_node",
                                "node",
                                "leader_allgather",
                                "coordinator_loop",
                                "cycle_s",
                                "max_in_flight",
                                "dense_in_flight",
                                "allgather_overlap",
                                "inflight_overlap",
                                "dense_overlap",
                                "group_host_s",
                                "host_steal",
                                "host_dilation",
                                "comment"}));
  for (const char* k : {"workers", "allreduce", "allgather", "sparsify"})
    if (!j.contains(k)) return invalid("cost model", std::string("missing \"") + k + "\"");
  CostModel m = *out;
  MGS_RETURN_IF_ERROR(readCostModelFields(j, &m));
  *out = m;
  return Status::OK();
}

std::string costModelToJson(const CostModel& m, bool pretty) {
  // Written by hand around json::dump() of each value (which keeps every
  // digit of a double), so that a file reads as one line per segment.
  const char* nl = pretty ? "\n" : "";
  const char* in = pretty ? "  " : "";
  const char* sp = pretty ? " " : "";
  auto comm = [&](const CommModel& c) {
    const json j = commToJson(c.segments().empty() ? CommModel::linear(0, 0) : c);
    if (!j.contains("segments")) return j.dump();
    std::string out = std::string("{\"segments\":") + sp + "[" + nl;
    const json& segs = j.at("segments");
    for (size_t i = 0; i < segs.size(); ++i)
      out += std::string(pretty ? "    " : "") + segs[i].dump() + (i + 1 < segs.size() ? "," : "") + nl;
    return out + (pretty ? "  " : "") + "]}";
  };
  const json sparsify = {{"kind", m.sparsify.kind == SparsifyModel::Kind::kLinear ? "linear" : "nlogn"},
                         {"c_s", m.sparsify.c_s}};
  std::string out = std::string("{") + nl;
  out += std::string(in) + "\"format\":" + sp + json(kFormat).dump() + "," + nl;
  out += std::string(in) + "\"version\":" + sp + std::to_string(kVersion) + "," + nl;
  out += std::string(in) + "\"workers\":" + sp + std::to_string(m.workers) + "," + nl;
  out += std::string(in) + "\"bytes_per_element\":" + sp + std::to_string(m.bytes_per_element) + "," + nl;
  out += std::string(in) + "\"allreduce\":" + sp + comm(m.allreduce) + "," + nl;
  out += std::string(in) + "\"allgather\":" + sp + comm(m.allgather) + "," + nl;
  if (!m.broadcast.segments().empty()) out += std::string(in) + "\"broadcast\":" + sp + comm(m.broadcast) + "," + nl;
  if (m.negotiation_s > 0) out += std::string(in) + "\"negotiation_s\":" + sp + json(m.negotiation_s).dump() + "," + nl;
  if (m.inflight_overlap > 0)
    out += std::string(in) + "\"inflight_overlap\":" + sp + json(m.inflight_overlap).dump() + "," + nl;
  if (m.dense_overlap > 0) out += std::string(in) + "\"dense_overlap\":" + sp + json(m.dense_overlap).dump() + "," + nl;
  if (m.group_host_s > 0) out += std::string(in) + "\"group_host_s\":" + sp + json(m.group_host_s).dump() + "," + nl;
  if (m.host_steal > 0) out += std::string(in) + "\"host_steal\":" + sp + json(m.host_steal).dump() + "," + nl;
  if (m.host_dilation != 1)
    out += std::string(in) + "\"host_dilation\":" + sp + json(m.host_dilation).dump() + "," + nl;
  if (m.coordinator_loop) {
    out += std::string(in) + "\"coordinator_loop\":" + sp + "true," + nl;
    out += std::string(in) + "\"cycle_s\":" + sp + json(m.cycle_s).dump() + "," + nl;
    out += std::string(in) + "\"max_in_flight\":" + sp + std::to_string(m.max_in_flight) + "," + nl;
    if (!m.dense_in_flight) out += std::string(in) + "\"dense_in_flight\":" + sp + "false," + nl;
  }
  // Measured by calibration (core/calibration.h), used by the coordinator model.
  out += std::string(in) + "\"allgather_overlap\":" + sp + json(m.allgather_overlap).dump() + "," + nl;
  if (m.ranks_per_node > 1)
    out += std::string(in) + "\"ranks_per_node\":" + sp + std::to_string(m.ranks_per_node) + "," + nl;
  if (!m.node.segments().empty()) out += std::string(in) + "\"node\":" + sp + comm(m.node) + "," + nl;
  if (!m.leader_allgather.segments().empty())
    out += std::string(in) + "\"leader_allgather\":" + sp + comm(m.leader_allgather) + "," + nl;
  out += std::string(in) + "\"sparsify\":" + sp + sparsify.dump() + nl;
  return out + "}" + (pretty ? "\n" : "");
}

}  // namespace mgs::plan
