#include "common/params.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/check.h"

extern char** environ;

namespace mgs {
namespace {

Status bad(const std::string& name, const std::string& value, const std::string& allowed) {
  return Status(Code::kConfig, "invalid " + name + "='" + value + "': expected " + allowed);
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

// Shortest of %.15g / %.17g that reads back to the same double, so the
// printout stays readable ("0.001") and the agreement digest is exact.
std::string showDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string joined(const std::vector<std::string>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + values[i];
  return s;
}

// Builders for the kinds of parameter; each returns a ParamSpec with `apply`
// and `show` bound to one Config field, so a row of the table is the only
// place a parameter is written down.
ParamSpec enumParam(std::string name, std::string def, std::vector<std::string> values, Scope scope, std::string doc,
                    std::string Config::*field) {
  const std::string allowed = "one of " + joined(values);
  ParamSpec p{name, "enum", std::move(def), allowed, std::move(doc), scope, nullptr, nullptr};
  p.apply = [name, values, allowed, field](const std::string& v, Config& c) {
    for (const auto& ok : values)
      if (v == ok) {
        c.*field = v;
        return Status::OK();
      }
    return bad(name, v, allowed);
  };
  p.show = [field](const Config& c) { return c.*field; };
  return p;
}

// A number in [lo, hi], or (lo, hi] when lo_open.
ParamSpec doubleParam(std::string name, std::string def, double lo, bool lo_open, double hi, std::string allowed,
                      Scope scope, std::string doc, double Config::*field) {
  ParamSpec p{name, "float", std::move(def), allowed, std::move(doc), scope, nullptr, nullptr};
  p.apply = [name, lo, lo_open, hi, allowed, field](const std::string& v, Config& c) {
    double d;
    if (!parseDouble(v, &d) || d < lo || (lo_open && d == lo) || d > hi) return bad(name, v, allowed);
    c.*field = d;
    return Status::OK();
  };
  p.show = [field](const Config& c) { return showDouble(c.*field); };
  return p;
}

ParamSpec intParam(std::string name, std::string def, int64_t lo, int64_t hi, std::string allowed, Scope scope,
                   std::string doc, int64_t Config::*field) {
  ParamSpec p{name, "int", std::move(def), allowed, std::move(doc), scope, nullptr, nullptr};
  p.apply = [name, lo, hi, allowed, field](const std::string& v, Config& c) {
    int64_t i;
    if (!parseInt(v, &i) || i < lo || i > hi) return bad(name, v, allowed);
    c.*field = i;
    return Status::OK();
  };
  p.show = [field](const Config& c) { return std::to_string(c.*field); };
  return p;
}

// An integer in [lo, hi], or "auto", stored as `auto_value` (outside [lo, hi]).
ParamSpec intOrAutoParam(std::string name, std::string def, int64_t lo, int64_t hi, int64_t auto_value,
                         std::string allowed, Scope scope, std::string doc, int64_t Config::*field) {
  ParamSpec p{name, "int", std::move(def), allowed, std::move(doc), scope, nullptr, nullptr};
  p.apply = [name, lo, hi, auto_value, allowed, field](const std::string& v, Config& c) {
    int64_t i;
    if (v == "auto") {
      i = auto_value;
    } else if (!parseInt(v, &i) || i < lo || i > hi) {
      return bad(name, v, allowed);
    }
    c.*field = i;
    return Status::OK();
  };
  p.show = [auto_value, field](const Config& c) {
    return c.*field == auto_value ? std::string("auto") : std::to_string(c.*field);
  };
  return p;
}

ParamSpec boolParam(std::string name, std::string def, Scope scope, std::string doc, bool Config::*field) {
  ParamSpec p{name, "bool", std::move(def), "0 or 1", std::move(doc), scope, nullptr, nullptr};
  p.apply = [name, field](const std::string& v, Config& c) {
    if (v != "0" && v != "1") return bad(name, v, "0 or 1");
    c.*field = v == "1";
    return Status::OK();
  };
  p.show = [field](const Config& c) { return std::string(c.*field ? "1" : "0"); };
  return p;
}

// Free text (paths); `non_empty` rejects an empty value.
ParamSpec textParam(std::string name, std::string type, std::string def, std::string allowed, bool non_empty,
                    Scope scope, std::string doc, std::string Config::*field) {
  ParamSpec p{name, std::move(type), std::move(def), allowed, std::move(doc), scope, nullptr, nullptr};
  p.apply = [name, allowed, non_empty, field](const std::string& v, Config& c) {
    if (non_empty && v.empty()) return bad(name, v, allowed);
    c.*field = v;
    return Status::OK();
  };
  p.show = [field](const Config& c) { return c.*field; };
  return p;
}

std::vector<ParamSpec> buildSpecs() {
  constexpr double kInf = HUGE_VAL;
  constexpr Scope kSame = Scope::kSameOnAllRanks, kLocal = Scope::kPerRank;
  std::vector<ParamSpec> s;
  s.push_back(enumParam("MGS_COMPRESSOR", "none", {"none", "topk", "gaussiank", "ldte", "dgc", "randomk"}, kSame,
                        "Gradient selector for tensors enqueued with MGS_FLAG_SPARSE_OK. 'none' keeps "
                        "every reduction exact (a drop-in never changes the math silently).",
                        &Config::compressor));
  s.push_back(doubleParam("MGS_DENSITY", "0.001", 0.0, true, 1.0, "a number in (0, 1]", kSame,
                          "Fraction of each merged bucket's elements to send (k = max(1, floor(density*n))).",
                          &Config::density));
  s.push_back(enumParam("MGS_PLANNER", "auto",
                        {"auto", "mgs", "mgwfbp", "mgs-greedy", "mgwfbp-greedy", "fusion", "layerwise", "single"},
                        kSame,
                        "Merge planner of the sparse buckets; 'auto' is the exact MGS dynamic program "
                        "(mgwfbp plans them on the dense model). Without a compressor no plan is made: "
                        "dense gradients are fused as they become ready, up to a threshold chosen by "
                        "MGS_FUSION_TRIALS (a planner set then gets a warning).",
                        &Config::planner));
  s.push_back(enumParam("MGS_PLAN_MODEL", "timeline", {"timeline", "coordinator"}, kSame,
                        "The cost model the runtime plans sparse buckets on. 'timeline': the MGS paper's "
                        "pipeline of selection and allgather, with negotiation rounds shared by buckets "
                        "ready together; 'coordinator': the runtime's coordinator loop (rounds on a grid, "
                        "the small dense gradients' allreduces, profiled beside the sparse ones, "
                        "allgathers in flight). Measured alike on the real training job; see "
                        "docs/planner.md section 8 for where they differ.",
                        &Config::plan_model));
  s.push_back(intParam("MGS_FUSION_THRESHOLD_BYTES", "67108864", 0, INT64_MAX, "an integer >= 0 (bytes)", kSame,
                       "Largest fused buffer for small dense operations (and the 'fusion' planner's "
                       "threshold); in a job without a compressor, the first of the thresholds "
                       "MGS_FUSION_TRIALS tries. 0 disables fusion.",
                       &Config::fusion_threshold_bytes));
  // Every rank switches thresholds at the same step boundary.
  s.push_back(boolParam("MGS_FUSION_TRIALS", "1", kSame,
                        "Jobs without a compressor: after 5 steps, run the fusion threshold "
                        "MGS_FUSION_THRESHOLD_BYTES = T and T/4, T/16 and 2T on trial like the sparse plan's "
                        "candidates (MGS_PLAN_TRIAL_STEPS; 0 or 1 turns the trials off too) and keep the "
                        "one with the shortest mean step (on a tie, T). 0 keeps T untried.",
                        &Config::fusion_trials));
  s.push_back(intParam("MGS_MIN_SPARSE_ELEMENTS", "4096", 0, INT64_MAX, "an integer >= 0", kSame,
                       "Sparse-eligible tensors smaller than this are reduced densely.", &Config::min_sparse_elements));
  s.push_back(enumParam("MGS_BACKEND", "auto", backendNames(), kSame,
                        "Communication backend for CUDA tensors. 'mpi': staged through host memory; "
                        "'nccl': NCCL on device pointers (init fails on every rank, naming the cause, in a "
                        "build without NCCL or on a host without a CUDA device); 'auto': NCCL from the first "
                        "CUDA tensor when built in and every rank has a device, else MPI.",
                        &Config::backend));
  s.push_back(boolParam("MGS_ERROR_FEEDBACK", "1", kSame,
                        "Keep unsent gradient entries as a residual added to the next step (error "
                        "feedback). 0 only for ablations.",
                        &Config::error_feedback));
  // Upper bounds keep step arithmetic (warmup_steps + 1, step counters)
  // far from overflow; no real run comes near them.
  s.push_back(intOrAutoParam("MGS_WARMUP_STEPS", "auto", 0, 1000000000, Config::kWarmupAuto,
                              "'auto' or an integer in [0, 1000000000]", kSame,
                              "Steps of DGC-style density warm-up, decaying exponentially from dense to MGS_DENSITY. "
                              "'auto': none at MGS_DENSITY >= 0.1, else 50 steps per decade below 0.1 (50 at "
                              "0.01, 100 at 0.001). 0 turns it off.",
                              &Config::warmup_steps));
  s.push_back(intParam("MGS_PROFILE_STEPS", "5", 1, 1000000000, "an integer in [1, 1000000000]", kSame,
                       "Steps recorded (gradient order and timing) before the merge plan is computed.",
                       &Config::profile_steps));
  // Steers when a partial sparse bucket is flushed, a decision every rank
  // must take in the same cycle. The floor keeps cycles-per-second in an int.
  s.push_back(doubleParam("MGS_CYCLE_TIME_MS", "1", 0.001, false, 10000.0, "a number in [0.001, 10000] (milliseconds)",
                          kSame, "Coordinator cycle: how often ranks negotiate which tensors are ready.",
                          &Config::cycle_time_ms));
  s.push_back(textParam("MGS_TIMELINE", "path", "", "a writable file path", false, kLocal,
                        "Rank 0 writes a Chrome-trace JSON timeline (chrome://tracing, Perfetto) here.",
                        &Config::timeline));
  s.push_back(enumParam("MGS_LOG_LEVEL", "warn", {"trace", "debug", "info", "warn", "error", "off"}, kLocal,
                        "Log level of the 'mgs' logger (stderr, rank in every line).", &Config::log_level));
  // Stall verdicts are taken by rank 0 alone and broadcast, so these may differ.
  s.push_back(doubleParam("MGS_STALL_WARNING_S", "60", 0.0, true, kInf, "a number > 0 (seconds)", kLocal,
                          "Warn, naming the tensor and the missing ranks, when some ranks submitted a "
                          "tensor and others did not for this long.",
                          &Config::stall_warning_s));
  s.push_back(doubleParam("MGS_STALL_ABORT_S", "0", 0.0, false, kInf, "a number >= 0 (seconds; 0 = never)", kLocal,
                          "Fail stalled operations with MGS_ERR_TIMEOUT after this long instead of "
                          "waiting forever (rank 0's value decides).",
                          &Config::stall_abort_s));
  // 'auto' runs collectives at init: every rank must take the same branch.
  s.push_back(textParam("MGS_CALIBRATION", "string", "auto", "'auto', 'off' or a JSON file path", true, kSame,
                        "Cost-model calibration: measure collectives at init ('auto'), use presets ('off'), "
                        "or load a saved JSON file (docs/planner.md). Other than 'off' (and without "
                        "MGS_PLAN_FILE), init also times the dense allreduce's two algorithms and sets the "
                        "size from which float sums take mgs's ring rather than Open MPI's, and the size below "
                        "which dense tensors are fused (64 KiB each under 'off'; docs/architecture.md).",
                        &Config::calibration));
  s.push_back(boolParam("MGS_DENSE_FALLBACK", "1", kSame,
                        "Let the cost model send a sparse bucket as a dense allreduce when that is predicted "
                        "faster. 0 always sends sparse (ablations, convergence studies).",
                        &Config::dense_fallback));
  // Which exchange a sparse bucket uses is decided on every rank alike.
  s.push_back(enumParam("MGS_EXCHANGE", "auto", {"auto", "allgather", "agreed", "hierarchical"}, kSame,
                        "How a sparse bucket's selected entries travel. 'allgather': every rank selects and "
                        "all blocks are gathered (traffic per rank grows with the ranks). 'agreed': a "
                        "rotating leader selects, its indices are broadcast and the values there are "
                        "summed by an allreduce (traffic per rank independent of the ranks). "
                        "'hierarchical': the ranks of a node (MGS_NODE_SIZE) sum their buckets densely to "
                        "the node's first rank, which selects from that sum; only these leaders allgather "
                        "their blocks, which are then broadcast inside each node (needs 2 or more nodes "
                        "of 2 or more ranks). 'auto': per bucket the allgather, or dense where "
                        "MGS_DENSE_FALLBACK allows and the calibrated cost model prices it cheaper (for a "
                        "bucket of CUDA tensors that every rank keeps on the GPU, with NCCL, once the NCCL "
                        "collectives are timed at the first such bucket). 'auto' never takes the agreed or "
                        "the hierarchical exchange: at one MGS_DENSITY the allgather applies the union of "
                        "every rank's k entries, the agreed exchange k in all and the hierarchical one k per "
                        "node, so they compress more than the density says and converge differently; name "
                        "them to use them (with NCCL they run on the device too). All follow MGS_NONFINITE "
                        "alike.",
                        &Config::exchange));
  // The node grouping decides which collectives every rank runs.
  s.push_back(intParam("MGS_NODE_SIZE", "0", 0, 1 << 20, "an integer in [0, 1048576]", kSame,
                       "Ranks per node for the hierarchical exchange: ranks r with the same r / MGS_NODE_SIZE "
                       "form a node (it must divide the number of ranks). 0: ranks on the same host (by host "
                       "name) form a node. Set it to test the hierarchy on one machine.",
                       &Config::node_size));
  // Every rank must check at the same step boundaries (a collective per step).
  s.push_back(doubleParam("MGS_REPLAN_TOLERANCE", "0.15", 0.0, false, 100.0, "a number in [0, 100] (0 = never)", kSame,
                          "Re-plan the sparse merge plan online when the measured step strays from the plan's "
                          "prediction by more than this fraction for 3 steps in a row (the cost model is refitted "
                          "from the job's own exchanges first; docs/planner.md). 0 plans once.",
                          &Config::replan_tolerance));
  // Every rank switches plans at the same step boundaries.
  s.push_back(intParam("MGS_PLAN_TRIAL_STEPS", "3", 0, 1000, "an integer in [0, 1000] (0 or 1 = no trials)", kSame,
                       "With the 'mgs' planner, the first plan after profiling is chosen by measurement: the "
                       "dynamic program's plan and a few uniform cuts (1, 2, 4 and 8 buckets' worth of bytes) "
                       "run in visits of 2 steps (the first left out) over max(2, N-1) rounds, the order "
                       "reversed every round so that warm-up drift adds the same to each; the one with the "
                       "shortest mean step (rank 0's clock) is kept if it beats the dynamic program's by 3% "
                       "and by more than the standard error of the difference (from the scatter of every "
                       "candidate's visits). 0 or 1 keeps the dynamic program's plan untried.",
                       &Config::plan_trial_steps));
  // Whether every rank plans (and profiles, trials, re-plans) or runs a saved
  // plan: all ranks must take the same branch. Rank 0 reads the file and
  // broadcasts it, so only rank 0 needs to see it.
  s.push_back(textParam("MGS_PLAN_FILE", "path", "", "a file path (read when it exists, else written)", false, kSame,
                        "Reproducible sparse runs. If the file does not exist, the job plans as usual and rank 0 "
                        "writes each merge plan it settles on there (bucket members, each bucket's exchange, "
                        "the settings, ranks and library version; replaced atomically). If it exists, every "
                        "rank runs that plan from the first step: no profiling, trials or re-planning, the "
                        "exchanges from the file; init fails on every rank when the file does not fit the job "
                        "(ranks, settings, version), and the first sparse operation fails when a tensor's name "
                        "or size is not the file's (docs/planner.md, 'Reproducible runs').",
                        &Config::plan_file));
  // Decides whether a bucket fails or completes with NaN outputs: every rank
  // must decide alike, or some would fail while others apply the step.
  s.push_back(enumParam("MGS_NONFINITE", "propagate", {"propagate", "error"}, kSame,
                        "A NaN or Inf gradient on any rank. 'propagate': the operation succeeds and its "
                        "output carries NaN/Inf on every rank (a sparse or merged bucket: all its outputs "
                        "are NaN), so a loss scaler (torch GradScaler, Keras LossScaleOptimizer) skips the "
                        "step; residuals stay as they were before the step. 'error': the operation fails "
                        "with MGS_ERR_NUMERIC on every rank, naming the tensor and the rank.",
                        &Config::nonfinite));
  // A rank's own CPU budget: threads change how fast a rank selects, never
  // what it sends, so ranks may differ.
  s.push_back(intParam("MGS_THREADS", "0", 0, 4096, "an integer in [0, 4096] (0 = auto)", kLocal,
                       "CPU threads for a rank's gradient selection passes. "
                       "0 (auto): the cores this process may run on divided by the ranks on this node, "
                       "at most 8, so a rank never competes with its own training for cores; buckets "
                       "too small to gain run on one thread.",
                       &Config::threads));
  // Both launch shapes select the same entries bit for bit (tests/gpu), so
  // ranks may differ: the choice changes how fast a GPU selects, never what.
  s.push_back(enumParam("MGS_GPU_LAUNCHES", "auto", {"auto", "per-pass"}, kLocal,
                        "Launch shapes of the GPU selector for CUDA buckets. 'auto': the histogram passes "
                        "in one cooperative launch where the device allows it, and a compaction grid sized "
                        "to the candidate list. 'per-pass': one launch per histogram pass and a compaction "
                        "block per tile of the buffer. Both select the same entries bit for bit; "
                        "docs/architecture.md ('GPU parts') says which shapes have run on a GPU.",
                        &Config::gpu_launches));
  s.push_back(textParam("MGS_LIBRARY", "path", "", "a path to libmgs.so", false, kLocal,
                        "Which libmgs the Python bindings load (they search their package, then build/). "
                        "Ignored by the runtime itself.",
                        &Config::library));
  return s;
}

// FNV-1a: stable across processes and builds, unlike std::hash.
uint64_t digest(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::string Config::effectivePlanner() const {
  if (planner != "auto") return planner;
  return compressor == "none" ? "none" : "mgs";  // none: dense gradients are fused per cycle, not planned
}

int64_t Config::effectiveWarmupSteps() const {
  if (warmup_steps != kWarmupAuto) return warmup_steps;
  // Measured (docs/convergence.md): with momentum correction, the character
  // LM at 0.01 ends 2.4% above dense without warm-up and 0.1-1.1% with 50
  // steps; digits at 0.001 gains about half a point from 100 steps over 50.
  // So 50 steps a decade below 0.1: 50 at 0.01, 100 at 0.001. It sends about
  // (W + 1) / ln(1/density) dense steps' worth of entries (11 at 0.01, 15 at
  // 0.001; twice that in bytes, a value and an index each), whatever the
  // job's length.
  if (!(density < 0.1)) return 0;
  return static_cast<int64_t>(std::llround(50.0 * std::log10(0.1 / density)));
}

const std::vector<std::string>& backendNames() {
  // 'nccl' is accepted in every build, so that a build without NCCL fails at
  // init with the cause ("built without NCCL") rather than "not one of".
  static const std::vector<std::string> names = {"auto", "mpi", "nccl"};
  return names;
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
      return Status(Code::kConfig, "unknown variable " + name + "='" + value + "' (mgs knows: " + known + ")");
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
  std::string s;
  for (const auto& p : paramSpecs()) {
    s += (s.empty() ? "" : " ") + p.name + "=" + p.show(c);
    if (p.name == "MGS_PLANNER") s += " (" + c.effectivePlanner() + ")";
    if (p.name == "MGS_WARMUP_STEPS" && c.warmup_steps == Config::kWarmupAuto)
      s += " (" + std::to_string(c.effectiveWarmupSteps()) + ")";
  }
  return s;
}

std::vector<uint64_t> agreementDigests(const Config& config) {
  std::vector<uint64_t> d;
  for (const auto& p : paramSpecs())
    if (p.scope == Scope::kSameOnAllRanks) d.push_back(digest(p.show(config)));
  return d;
}

std::string agreementErrors(const Config& config, const std::vector<uint64_t>& all, int size) {
  const size_t n = agreementDigests(config).size();
  if (size <= 0 || all.size() != n * static_cast<size_t>(size))
    return "internal: expected " + std::to_string(n) + " settings from each of " + std::to_string(size) +
           " ranks, got " + std::to_string(all.size()) + " values";
  std::string diff;
  size_t f = 0;
  for (const auto& p : paramSpecs()) {
    if (p.scope != Scope::kSameOnAllRanks) continue;
    std::string ranks;
    for (int r = 1; r < size; ++r)
      if (all[r * n + f] != all[f]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (!ranks.empty())
      diff += (diff.empty() ? "" : "; ") + p.name + " differs on ranks " + ranks + " (this rank has '" +
              p.show(config) + "')";
    ++f;
  }
  return diff;
}

Status checkAgreement(const Config& config, int size,
                      const std::function<Status(const void* in, size_t bytes, void* out)>& allgather) {
  const std::vector<uint64_t> mine = agreementDigests(config);
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(size));
  MGS_RETURN_IF_ERROR(allgather(mine.data(), mine.size() * sizeof(uint64_t), all.data()));
  const std::string diff = agreementErrors(config, all, size);
  if (diff.empty()) return Status::OK();
  return Status(Code::kConfig,
                "MGS_* settings differ from rank 0's: " + diff + "; give every rank the same settings, as mgsrun does");
}

}  // namespace mgs
