// Every MGS_* environment variable, declared once: name, kind, default,
// allowed values, documentation, whether all ranks must agree on it, how to
// parse it into Config and how to print it back. That one table drives parsing
// at mgs_init, the cross-rank agreement check, the debug printout of the
// effective configuration, `mgsrun` flags and `--help`, and
// docs/configuration.md (checked against it by a unit test).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mgs {

// Parsed, validated configuration. Field defaults are the documented defaults
// (a unit test checks that each table default parses to the field's default).
struct Config {
  std::string compressor = "none";
  double density = 0.001;
  std::string planner = "auto";  // auto: mgs when sparse; without a compressor no plan ("none")
  int64_t fusion_threshold_bytes = 64ll << 20;
  bool fusion_trials = true;  // MGS_FUSION_TRIALS: dense jobs try thresholds around it (core/fusion_trials.h)
  int64_t min_sparse_elements = 4096;
  std::string backend = "auto";
  bool error_feedback = true;
  int64_t warmup_steps = kWarmupAuto;  // MGS_WARMUP_STEPS; kWarmupAuto: by density (effectiveWarmupSteps)
  int64_t profile_steps = 5;
  double cycle_time_ms = 1.0;
  std::string timeline;  // empty: no timeline
  std::string log_level = "warn";
  double stall_warning_s = 60.0;
  double stall_abort_s = 0.0;  // 0: never abort
  std::string calibration = "auto";
  bool dense_fallback = true;
  std::string exchange = "auto";        // MGS_EXCHANGE: auto, allgather, agreed, hierarchical
  int64_t node_size = 0;                // MGS_NODE_SIZE: ranks per node for the hierarchical exchange; 0 = by host
  double replan_tolerance = 0.15;       // MGS_REPLAN_TOLERANCE: 0 disables online re-planning
  int64_t plan_trial_steps = 3;         // MGS_PLAN_TRIAL_STEPS: steps each candidate plan runs on trial; 0 = none
  std::string nonfinite = "propagate";  // MGS_NONFINITE: propagate | error
  int64_t threads = 0;                  // MGS_THREADS: CPU threads for the runtime's own work; 0 = auto
  std::string gpu_launches = "auto";    // MGS_GPU_LAUNCHES: auto | per-pass (the GPU selector's launch shapes)
  std::string plan_model = "timeline";  // MGS_PLAN_MODEL: timeline | coordinator
  std::string plan_file;                // MGS_PLAN_FILE: saved merge plan (read if it exists, else written); empty: none
  std::string library;                  // MGS_LIBRARY: read by the Python bindings, ignored by the runtime

  // The planner actually used, resolving "auto" ("none" without a compressor).
  std::string effectivePlanner() const;
  // MGS_WARMUP_STEPS=auto: no warm-up at density >= 0.01, and 50 steps per
  // decade below it (50 at 0.001, 100 at 0.0001), rounded to a whole step.
  // An explicit value is returned as given.
  int64_t effectiveWarmupSteps() const;
  static constexpr int64_t kWarmupAuto = -1;
};

// Whether a parameter steers a decision that ranks take independently but
// must take identically (what is sent, when a partial bucket flushes, which
// collectives run at init). Those are compared across ranks at mgs_init.
enum class Scope { kSameOnAllRanks, kPerRank };

struct ParamSpec {
  std::string name;           // "MGS_DENSITY"
  std::string type;           // "float", "int", "bool", "enum", "path", "string"
  std::string default_value;  // as a user would write it
  std::string allowed;        // human-readable allowed values, used in errors
  std::string doc;
  Scope scope = Scope::kSameOnAllRanks;
  // Parse `value` into `config`; an error message says what is allowed.
  std::function<Status(const std::string& value, Config& config)> apply;
  // The field's value in `config`, written so that apply() reads it back to
  // the same value (doubles with enough digits to round-trip).
  std::function<std::string(const Config& config)> show;
};

// The table of all parameters, in documentation order.
const std::vector<ParamSpec>& paramSpecs();
// nullptr when `name` is not an mgs parameter.
const ParamSpec* findParam(const std::string& name);

// The values MGS_BACKEND accepts: the same in every build (whether the chosen
// backend is built in and usable is checked at init: core/device_backend.h).
const std::vector<std::string>& backendNames();

// Parse a set of variables (name -> value; only names starting with "MGS_" are
// looked at). Unknown MGS_* names and bad values give kConfig errors naming the
// variable, the value and what is allowed.
Status parseConfig(const std::map<std::string, std::string>& vars, Config* out);
// All MGS_* variables of this process's environment.
std::map<std::string, std::string> mgsEnvironment();

// "MGS_COMPRESSOR=topk MGS_DENSITY=0.01 ..." (every parameter, table order) for
// debug logs.
std::string describeConfig(const Config& config);

// --- Cross-rank agreement -----------------------------------------------------
// One 64-bit digest per kSameOnAllRanks parameter, in table order. Ranks
// allgather their digests and compare them with agreementErrors().
std::vector<uint64_t> agreementDigests(const Config& config);
// `all` holds every rank's agreementDigests(), rank after rank. Empty when
// they agree; else a message naming each differing variable, this rank's
// value and the ranks whose value differs from rank 0's.
std::string agreementErrors(const Config& config, const std::vector<uint64_t>& all, int size);
// The whole check: `allgather(in, bytes, out)` gathers `bytes` from each rank
// into `out` in rank order (the communicator's allgather). kConfig on every
// rank when any rank differs from rank 0.
Status checkAgreement(const Config& config, int size,
                      const std::function<Status(const void* in, size_t bytes, void* out)>& allgather);

}  // namespace mgs
