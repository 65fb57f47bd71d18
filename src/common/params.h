// Every MGS_* environment variable, declared once: name, kind, default,
// allowed values and documentation. The same table drives parsing at
// mgs_init, `mgsrun --help`, and docs/configuration.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace mgs {

// Parsed, validated configuration. Field defaults are the documented defaults.
struct Config {
  std::string compressor = "none";
  double density = 0.001;
  std::string planner = "auto";  // auto: mgs when sparse, mgwfbp when dense
  int64_t fusion_threshold_bytes = 64ll << 20;
  int64_t min_sparse_elements = 4096;
  std::string backend = "auto";
  bool error_feedback = true;
  int64_t warmup_steps = 0;
  int64_t profile_steps = 5;
  double cycle_time_ms = 1.0;
  std::string timeline;  // empty: no timeline
  std::string log_level = "warn";
  double stall_warning_s = 60.0;
  double stall_abort_s = 0.0;  // 0: never abort
  std::string calibration = "auto";
  bool dense_fallback = true;
  int64_t threads = 0;  // MGS_THREADS: CPU threads for the runtime's own work; 0 = auto
  std::string library;  // MGS_LIBRARY: read by the Python bindings, ignored by the runtime

  // The planner actually used, resolving "auto".
  std::string effectivePlanner() const;
};

struct ParamSpec {
  std::string name;          // "MGS_DENSITY"
  std::string type;          // "float", "int", "bool", "enum", "path", "string"
  std::string default_value; // as a user would write it
  std::string allowed;       // human-readable allowed values, used in errors
  std::string doc;
  // Parse `value` into `config`; an error message says what is allowed.
  std::function<Status(const std::string& value, Config& config)> apply;
};

// The table of all parameters, in documentation order.
const std::vector<ParamSpec>& paramSpecs();
// nullptr when `name` is not an mgs parameter.
const ParamSpec* findParam(const std::string& name);

// Parse a set of variables (name -> value; only names starting with "MGS_" are
// looked at). Unknown MGS_* names and bad values give kConfig errors naming the
// variable, the value and what is allowed.
Status parseConfig(const std::map<std::string, std::string>& vars, Config* out);
// All MGS_* variables of this process's environment.
std::map<std::string, std::string> mgsEnvironment();

// "MGS_DENSITY=0.01 MGS_COMPRESSOR=topk ..." for debug logs.
std::string describeConfig(const Config& config);

}  // namespace mgs
