#include "common/params.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

extern char** environ;

namespace mgs {
namespace {

Status bad(const std::string& name, const std::string& value, const std::string& allowed) {
  return Status(Code::kConfig,
                "invalid " + name + "='" + value + "': expected " + allowed);
}

bool parseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

// Builders for the common kinds; each returns a ParamSpec with `apply` set.
ParamSpec enumParam(std::string name, std::string def, std::vector<std::string> values,
                    std::string doc, std::string Config::*field) {
  std::string allowed = "one of ";
  for (size_t i = 0; i < values.size(); ++i) allowed += (i ? ", " : "") + values[i];
  ParamSpec p{name, "enum", def, allowed, std::move(doc), nullptr};
  p.apply = [name, values, allowed, field](const std::string& v, Config& c) {
    for (const auto& ok : values)
      if (v == ok) {
        c.*field = v;
        return Status::OK();
      }
    return bad(name, v, allowed);
  };
  return p;
}

ParamSpec doubleParam(std::string name, std::string def, double lo, bool lo_open, double hi,
                      std::string allowed, std::string doc, double Config::*field) {
  ParamSpec p{name, "float", def, allowed, std::move(doc), nullptr};
  p.apply = [name, lo, lo_open, hi, allowed, field](const std::string& v, Config& c) {
    double d;
    if (!parseDouble(v, &d) || d < lo || (lo_open && d == lo) || d > hi) return bad(name, v, allowed);
    c.*field = d;
    return Status::OK();
  };
  return p;
}

ParamSpec intParam(std::string name, std::string def, int64_t lo, std::string allowed,
                   std::string doc, int64_t Config::*field) {
  ParamSpec p{name, "int", def, allowed, std::move(doc), nullptr};
  p.apply = [name, lo, allowed, field](const std::string& v, Config& c) {
    int64_t i;
    if (!parseInt(v, &i) || i < lo) return bad(name, v, allowed);
    c.*field = i;
    return Status::OK();
  };
  return p;
}

std::vector<ParamSpec> buildSpecs() {
  constexpr double kInf = HUGE_VAL;
  std::vector<ParamSpec> s;
  s.push_back(enumParam("MGS_COMPRESSOR", "none", {"none", "topk", "gaussiank", "ldte", "dgc", "randomk"},
                        "Gradient selector for tensors enqueued with MGS_FLAG_SPARSE_OK. 'none' keeps "
                        "every reduction exact (a drop-in never changes the math silently).",
                        &Config::compressor));
  s.push_back(doubleParam("MGS_DENSITY", "0.001", 0.0, true, 1.0, "a number in (0, 1]",
                          "Fraction of each merged bucket's elements to send (k = max(1, floor(density*n))).",
                          &Config::density));
  s.push_back(enumParam("MGS_PLANNER", "auto",
                        {"auto", "mgs", "mgwfbp", "mgs-greedy", "mgwfbp-greedy", "fusion", "layerwise", "single"},
                        "Merge planner. 'auto' uses the exact MGS dynamic program when a compressor is "
                        "set and the exact MG-WFBP dynamic program for dense reductions.",
                        &Config::planner));
  s.push_back(intParam("MGS_FUSION_THRESHOLD_BYTES", "67108864", 0, "an integer >= 0 (bytes)",
                       "Largest fused buffer for small dense operations (and the 'fusion' planner's "
                       "threshold). 0 disables fusion.",
                       &Config::fusion_threshold_bytes));
  s.push_back(intParam("MGS_MIN_SPARSE_ELEMENTS", "4096", 0, "an integer >= 0",
                       "Sparse-eligible tensors smaller than this are reduced densely.",
                       &Config::min_sparse_elements));
  s.push_back(enumParam("MGS_BACKEND", "auto", {"auto", "mpi", "nccl"},
                        "Communication backend for CUDA tensors: 'auto' uses NCCL when the library "
                        "was built with it, else host-staged MPI.",
                        &Config::backend));
  {
    ParamSpec p{"MGS_ERROR_FEEDBACK", "bool", "1", "0 or 1", "Keep unsent gradient entries as a residual "
                "added to the next step (error feedback). 0 only for ablations.", nullptr};
    p.apply = [](const std::string& v, Config& c) {
      if (v == "1") c.error_feedback = true;
      else if (v == "0") c.error_feedback = false;
      else return bad("MGS_ERROR_FEEDBACK", v, "0 or 1");
      return Status::OK();
    };
    s.push_back(std::move(p));
  }
  s.push_back(intParam("MGS_WARMUP_STEPS", "0", 0, "an integer >= 0",
                       "Steps of DGC-style density warm-up, decaying exponentially from dense to MGS_DENSITY.",
                       &Config::warmup_steps));
  s.push_back(intParam("MGS_PROFILE_STEPS", "5", 1, "an integer >= 1",
                       "Steps recorded (gradient order and timing) before the merge plan is computed.",
                       &Config::profile_steps));
  s.push_back(doubleParam("MGS_CYCLE_TIME_MS", "1", 0.0, true, 10000.0, "a number in (0, 10000] (milliseconds)",
                          "Coordinator cycle: how often ranks negotiate which tensors are ready.",
                          &Config::cycle_time_ms));
  {
    ParamSpec p{"MGS_TIMELINE", "path", "", "a writable file path",
                "Rank 0 writes a Chrome-trace JSON timeline (chrome://tracing, Perfetto) here.", nullptr};
    p.apply = [](const std::string& v, Config& c) {
      c.timeline = v;
      return Status::OK();
    };
    s.push_back(std::move(p));
  }
  s.push_back(enumParam("MGS_LOG_LEVEL", "warn", {"trace", "debug", "info", "warn", "error", "off"},
                        "Log level of the 'mgs' logger (stderr, rank in every line).", &Config::log_level));
  s.push_back(doubleParam("MGS_STALL_WARNING_S", "60", 0.0, true, kInf, "a number > 0 (seconds)",
                          "Warn, naming the tensor and the missing ranks, when some ranks submitted a "
                          "tensor and others did not for this long.",
                          &Config::stall_warning_s));
  s.push_back(doubleParam("MGS_STALL_ABORT_S", "0", 0.0, false, kInf, "a number >= 0 (seconds; 0 = never)",
                          "Fail stalled operations with MGS_ERR_TIMEOUT after this long instead of "
                          "waiting forever.",
                          &Config::stall_abort_s));
  {
    ParamSpec p{"MGS_CALIBRATION", "string", "auto", "'auto', 'off' or a JSON file path",
                "Cost-model calibration: measure collectives at init ('auto'), use presets ('off'), "
                "or load a saved JSON file.", nullptr};
    p.apply = [](const std::string& v, Config& c) {
      if (v.empty()) return bad("MGS_CALIBRATION", v, "'auto', 'off' or a JSON file path");
      c.calibration = v;
      return Status::OK();
    };
    s.push_back(std::move(p));
  }
  {
    ParamSpec p{"MGS_DENSE_FALLBACK", "bool", "1", "0 or 1",
                "Let the cost model send a sparse bucket as a dense allreduce when that is predicted "
                "faster. 0 always sends sparse (ablations, convergence studies).", nullptr};
    p.apply = [](const std::string& v, Config& c) {
      if (v == "1") c.dense_fallback = true;
      else if (v == "0") c.dense_fallback = false;
      else return bad("MGS_DENSE_FALLBACK", v, "0 or 1");
      return Status::OK();
    };
    s.push_back(std::move(p));
  }
  s.push_back(intParam("MGS_THREADS", "0", 0, "an integer >= 0 (0 = auto)",
                       "CPU threads for the runtime's own work on a rank (fusion, selection, scatter). "
                       "0 (auto): the cores this process may run on divided by the ranks on this node, "
                       "at most 8, so a rank never competes with its own training for cores; buckets "
                       "too small to gain run on one thread.",
                       &Config::threads));
  {
    ParamSpec p{"MGS_LIBRARY", "path", "", "a path to libmgs.so",
                "Which libmgs the Python bindings load (they search their package, then build/). "
                "Ignored by the runtime itself.", nullptr};
    p.apply = [](const std::string& v, Config& c) {
      c.library = v;
      return Status::OK();
    };
    s.push_back(std::move(p));
  }
  return s;
}

}  // namespace

std::string Config::effectivePlanner() const {
  if (planner != "auto") return planner;
  return compressor == "none" ? "mgwfbp" : "mgs";
}

const std::vector<ParamSpec>& paramSpecs() {
  static const std::vector<ParamSpec> specs = buildSpecs();
  return specs;
}

const ParamSpec* findParam(const std::string& name) {
  for (const auto& p : paramSpecs())
    if (p.name == name) return &p;
  return nullptr;
}

Status parseConfig(const std::map<std::string, std::string>& vars, Config* out) {
  Config c;
  for (const auto& [name, value] : vars) {
    if (name.rfind("MGS_", 0) != 0) continue;
    const ParamSpec* p = findParam(name);
    if (p == nullptr) {
      std::string known;
      for (const auto& q : paramSpecs()) known += (known.empty() ? "" : ", ") + q.name;
      return Status(Code::kConfig, "unknown variable " + name + "='" + value +
                                       "' (mgs knows: " + known + ")");
    }
    Status st = p->apply(value, c);
    if (!st.ok()) return st;
  }
  if (c.stall_abort_s > 0 && c.stall_abort_s < c.stall_warning_s) {
    // An abort before the warning would hide which ranks were missing.
    c.stall_warning_s = c.stall_abort_s;
  }
  *out = c;
  return Status::OK();
}

std::map<std::string, std::string> mgsEnvironment() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    if (kv.rfind("MGS_", 0) != 0) continue;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return vars;
}

std::string describeConfig(const Config& c) {
  std::ostringstream os;
  os << "MGS_COMPRESSOR=" << c.compressor << " MGS_DENSITY=" << c.density
     << " MGS_PLANNER=" << c.planner << " (" << c.effectivePlanner() << ")"
     << " MGS_FUSION_THRESHOLD_BYTES=" << c.fusion_threshold_bytes
     << " MGS_MIN_SPARSE_ELEMENTS=" << c.min_sparse_elements << " MGS_BACKEND=" << c.backend
     << " MGS_ERROR_FEEDBACK=" << c.error_feedback << " MGS_WARMUP_STEPS=" << c.warmup_steps
     << " MGS_PROFILE_STEPS=" << c.profile_steps << " MGS_CYCLE_TIME_MS=" << c.cycle_time_ms
     << " MGS_TIMELINE=" << c.timeline << " MGS_LOG_LEVEL=" << c.log_level
     << " MGS_STALL_WARNING_S=" << c.stall_warning_s << " MGS_STALL_ABORT_S=" << c.stall_abort_s
     << " MGS_CALIBRATION=" << c.calibration << " MGS_DENSE_FALLBACK=" << c.dense_fallback
     << " MGS_THREADS=" << c.threads;
  return os.str();
}

}  // namespace mgs
