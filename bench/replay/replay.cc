// mgs-replay: replays a model trace (tools/traces/*.json) through the real
// runtime on every rank and times the training step.
//
// One process per rank, one strategy per run (MPI cannot be initialised
// twice): the strategy sets MGS_COMPRESSOR / MGS_PLANNER before mgs_init.
// Each step: barrier (untimed; --no-step-barrier: none, each rank starts its
// next step when its last one ended, as a training job does), optional
// forward (sleep), then for every
// layer in backward order sleep until its gradient is ready (absolute
// deadlines, so oversleeping never accumulates; sleep, not busy-wait, as a
// GPU computing backward leaves the host CPU free) and enqueue an allreduce
// with MGS_FLAG_SPARSE_OK; the step ends when every handle has completed.
// Step time = max over ranks, reported as the median over the timed steps;
// period_s = rank 0's wall time per timed step, barriers included.
//
// Rank 0 also predicts the step with the planner library: with the cost
// model the runtime calibrated (MGS_CALIBRATION=<file>) and with mgs-sim's
// alpha-beta network model, both on the trace's (scaled) layer times and on
// the runtime's timeline (selection beside backward, --selection separate);
// mgs-sim also on the MGS paper's (selection on the compute stream). The
// calibrated prediction evaluates the plan on the coordinator model
// (docs/planner.md §8); predicted_calibrated_timeline_s is the model before it.
#include <mgs/mgs.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/params.h"
#include "core/plan_trials.h"
#include "instance_io.h"
#include "plan/cost_model_io.h"
#include "plan/plan.h"
#include "simulator.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "mgs-replay: %s\n", what.c_str());
  std::fflush(stderr);
  std::exit(2);
}

void check(mgs_status_t st, const char* what) {
  if (st != MGS_SUCCESS) die(std::string(what) + ": " + mgs_status_string(st) + " " + mgs_last_error());
}

struct Strategy {
  std::string name, compressor, planner;
  bool sparse;
};

Strategy strategyByName(const std::string& name, const std::string& compressor) {
  if (name == "dense") return {name, "none", "auto", false};
  if (name == "layerwise" || name == "single" || name == "mgs" || name == "mgs-greedy" || name == "fusion")
    return {name, compressor, name, true};
  die("unknown strategy '" + name + "' (dense, layerwise, single, mgs, mgs-greedy, fusion)");
}

// Heavy-tailed gradient values: real buffers tiled over the whole model.
std::vector<float> loadValues(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("cannot open gradient buffer " + path);
  f.seekg(0, std::ios::end);
  const auto bytes = static_cast<size_t>(f.tellg());
  f.seekg(0);
  std::vector<float> v(bytes / 4);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  if (!f || v.empty()) die("cannot read " + path);
  return v;
}

// A network interface's byte counters (inside an emulated host's netns,
// /sys/class/net is that namespace's); -1 when unreadable.
double ifaceBytes(const std::string& iface, const char* which) {
  if (iface.empty()) return -1;
  std::ifstream f("/sys/class/net/" + iface + "/statistics/" + which);
  double v = -1;
  if (!(f >> v)) return -1;
  return v;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string fmt(double x) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", x);
  return b;
}

std::string jsonArray(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + fmt(v[i]);
  return s + "]";
}

struct Prediction {
  double seconds = -1;  // forward + end of the last communication
  int groups = 0;
};

// Sparse-eligible layers as the runtime's profiler sees them: a tensor below
// MGS_MIN_SPARSE_ELEMENTS goes dense, and its backward time becomes part of
// the gap before the next sparse gradient.
std::vector<mgs::plan::LayerInfo> sparseLayers(const std::vector<mgs::plan::LayerInfo>& all, int64_t min_sparse) {
  std::vector<mgs::plan::LayerInfo> out;
  double carry = 0;
  for (const auto& l : all) {
    carry += l.backward_s;
    if (l.elements < min_sparse) continue;
    out.push_back({l.name, l.elements, carry});
    carry = 0;
  }
  return out;
}

// The tensors the runtime keeps dense (below MGS_MIN_SPARSE_ELEMENTS), with
// the time backward produces each: the coordinator model allreduces them on
// the coordinator (plan/coordinator.h).
std::vector<mgs::plan::DenseTensor> denseTensors(const std::vector<mgs::plan::LayerInfo>& all, int64_t min_sparse) {
  std::vector<mgs::plan::DenseTensor> out;
  double clock = 0;
  for (const auto& l : all) {
    clock += l.backward_s;
    if (l.elements < min_sparse) out.push_back({l.name, l.elements, clock});
  }
  return out;
}

// `coordinator`: the runtime plans on the timeline model (its calibration
// has no coordinator terms), so the plan is made on that model and then
// evaluated on the coordinator model, with the dense tensors, cycle
// MGS_CYCLE_TIME_MS and the runtime's 4 allgathers in flight.
Prediction predict(const Strategy& s, const std::vector<mgs::plan::LayerInfo>& layers, double forward_s,
                   int64_t min_sparse, int64_t fusion_bytes, const mgs::plan::CostModel& cost,
                   mgs::plan::Selection selection, bool coordinator = false) {
  mgs::plan::PlanInput in;
  in.cost = cost;
  in.cost.coordinator_loop = false;
  in.sparse = s.sparse;
  in.selection = selection;
  in.fusion_threshold_bytes = fusion_bytes;
  in.layers = s.sparse ? sparseLayers(layers, min_sparse) : layers;
  mgs::plan::Plan plan;
  // Dense: the runtime fuses whatever is ready per cycle up to the fusion
  // threshold; the `fusion` planner on the dense model is the closest plan.
  const std::string planner = s.sparse ? s.planner : "fusion";
  mgs::Status st = mgs::plan::computePlan(planner, in, &plan);
  if (st.ok() && coordinator && s.sparse) {
    in.cost.coordinator_loop = true;
    const char* cycle = std::getenv("MGS_CYCLE_TIME_MS");
    in.cost.cycle_s = (cycle ? std::atof(cycle) : 1.0) / 1000.0;
    in.cost.max_in_flight = 4;  // BlockExchange::kMaxInFlight
    in.dense_tensors = denseTensors(layers, min_sparse);
    // Each step starts when its mgs_barrier's round ends, and the next round
    // starts then: a round starts forward_s before backward.
    const double period = std::max(in.cost.negotiation_s, in.cost.cycle_s);
    if (period > 0) in.round_phase_s = std::fmod(std::fmod(-forward_s, period) + period, period);
    st = mgs::plan::evaluatePlan(in, plan.groups, true, &plan.predicted_s);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "mgs-replay: prediction (%s): %s\n", planner.c_str(), st.toString().c_str());
    return {};
  }
  return {forward_s + plan.predicted_s, static_cast<int>(plan.groups.size())};
}

// The calibration file the runtime wrote (MGS_CALIBRATION=<file>), read with
// the library's own parser (plan/cost_model_io.h: segments or points).
bool readCalibration(const std::string& path, int workers, double density, mgs::plan::CostModel* m) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  if (!mgs::plan::parseCostModel(ss.str(), m).ok()) return false;
  m->workers = workers;
  m->density = density;
  m->bytes_per_element = 4;
  return true;
}

// Every rank's `mine` (the same length on every rank), rank after rank,
// through the runtime's own allgather.
std::vector<double> gatherDoubles(const char* name, std::vector<double>* mine, int size) {
  int64_t n = static_cast<int64_t>(mine->size());
  mgs_tensor_t t{mine->data(), MGS_FLOAT64, 1, &n, MGS_DEVICE_CPU, nullptr, nullptr};
  mgs_handle_t h = 0;
  check(mgs_allgather_async(name, &t, &h), "mgs_allgather_async");
  check(mgs_wait(h), (std::string("allgather of ") + name).c_str());
  std::vector<double> all(static_cast<size_t>(size) * mine->size());
  int64_t all_n = static_cast<int64_t>(all.size());
  mgs_tensor_t ta{all.data(), MGS_FLOAT64, 1, &all_n, MGS_DEVICE_CPU, nullptr, nullptr};
  check(mgs_allgather_copy_output(h, &ta), "mgs_allgather_copy_output");
  mgs_release(h);
  return all;
}

// --enqueue-times: every rank's enqueue times (`mine`: timed steps x
// tensors, seconds on a clock the ranks share) gathered; per tensor, the
// mean over the steps of its time on rank 0 from rank 0's first enqueue,
// and of the last rank's enqueue of it from the last rank's first enqueue.
void enqueueTimes(std::vector<double> mine, int size, size_t steps, size_t tensors, std::vector<double>* rank0_ms,
                  std::vector<double>* everywhere_ms) {
  mine.resize(steps * tensors, 0.0);
  const std::vector<double> all = gatherDoubles("replay.enqueue_times", &mine, size);
  rank0_ms->assign(tensors, 0.0);
  everywhere_ms->assign(tensors, 0.0);
  if (steps == 0 || tensors == 0) return;
  std::vector<double> last(tensors);
  for (size_t s = 0; s < steps; ++s) {
    for (size_t i = 0; i < tensors; ++i) {
      last[i] = all[s * tensors + i];
      for (int r = 1; r < size; ++r)
        last[i] = std::max(last[i], all[static_cast<size_t>(r) * mine.size() + s * tensors + i]);
    }
    for (size_t i = 0; i < tensors; ++i) {
      (*rank0_ms)[i] += (all[s * tensors + i] - all[s * tensors]) * 1e3 / static_cast<double>(steps);
      (*everywhere_ms)[i] += (last[i] - last[0]) * 1e3 / static_cast<double>(steps);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replay a model trace through the mgs runtime and time each step"};
  std::string trace_path = "tools/traces/resnet50.json";
  std::string data_path = "tests/data/gradients/digits_cnn_step50.f32";
  std::string strategy_name = "mgs", compressor = "ldte", calibration, label, sim_network = "1gbe", wire_iface;
  double scale_elements = 1, scale_time = 1, density = 0.001;
  int steps = 10, warmup = -1, profile_steps = 5;
  bool no_forward = false, no_step_barrier = false, enqueue_times = false;
  app.add_option("-t,--trace", trace_path, "model trace (tools/traces/*.json)")->capture_default_str();
  app.add_option("-s,--strategy", strategy_name, "dense | layerwise | single | mgs (also mgs-greedy, fusion)")
      ->capture_default_str();
  app.add_option("--compressor", compressor, "MGS_COMPRESSOR for the sparse strategies")->capture_default_str();
  app.add_option("-d,--density", density, "MGS_DENSITY")->capture_default_str();
  app.add_option("--scale-elements", scale_elements, "multiply every tensor's element count")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--scale-time", scale_time, "multiply every backward (and forward) time")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-forward", no_forward, "do not sleep the trace's forward time inside the step");
  app.add_flag("--no-step-barrier", no_step_barrier,
               "no barrier before each step (one before the first): each rank starts a step when its last "
               "ended, so the step times include the wait for the other ranks that a barrier would hide");
  app.add_flag("--enqueue-times", enqueue_times,
               "add each tensor's enqueue time in the timed steps to the JSON line: on rank 0 from its own "
               "first enqueue (what the planner's profile sees), and everywhere (the last rank's enqueue of the "
               "tensor, from the last rank's first enqueue: what negotiation waits for); ranks must share one "
               "clock (one machine, as on the emulated cluster)");
  app.add_option("--steps", steps, "timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup,
                 "untimed steps first (default: profile steps + the most steps the plan trials take "
                 "(20 at MGS_PLAN_TRIAL_STEPS=3) + 3)");
  app.add_option("--profile-steps", profile_steps, "MGS_PROFILE_STEPS")->capture_default_str();
  app.add_option("--calibration", calibration,
                 "MGS_CALIBRATION file: measured once and reused by later runs (default: auto, "
                 "no calibrated prediction)");
  app.add_option("--data", data_path, "float32 gradient buffer tiled over the model")->capture_default_str();
  app.add_option("--sim-network", sim_network, "mgs-sim network preset for the alpha-beta prediction")
      ->capture_default_str();
  app.add_option("--label", label, "free text copied into the JSON line (e.g. the setting)");
  app.add_option("--wire-iface", wire_iface,
                 "read this interface's tx/rx byte counters around the timed steps (eth0 on an emulated host): "
                 "per-rank wire bytes per step, all traffic of the job included");
  CLI11_PARSE(app, argc, argv);
  if (warmup < 0) {
    // The mgs planner's trials run after the profile (docs/planner.md §7b):
    // time the plan that is kept, not the trials.
    int64_t trial_steps = mgs::Config{}.plan_trial_steps;
    if (const char* e = std::getenv("MGS_PLAN_TRIAL_STEPS")) trial_steps = std::atoll(e);
    warmup = profile_steps + mgs::maxTrialSteps(static_cast<int>(trial_steps)) + 3;
  }

  const Strategy strat = strategyByName(strategy_name, compressor);
  // The runtime reads its configuration from the environment at mgs_init.
  setenv("MGS_COMPRESSOR", strat.compressor.c_str(), 1);
  setenv("MGS_PLANNER", strat.planner.c_str(), 1);
  setenv("MGS_DENSITY", fmt(density).c_str(), 1);
  setenv("MGS_PROFILE_STEPS", std::to_string(profile_steps).c_str(), 1);
  // The timed steps are the steady state: without this, MGS_WARMUP_STEPS=auto
  // (50 steps at density 0.001) would time the warm-up's denser steps.
  setenv("MGS_WARMUP_STEPS", "0", 0);
  if (!calibration.empty()) setenv("MGS_CALIBRATION", calibration.c_str(), 1);
  int64_t min_sparse = 4096, fusion_bytes = 64ll << 20;
  if (const char* e = std::getenv("MGS_MIN_SPARSE_ELEMENTS")) min_sparse = std::atoll(e);
  if (const char* e = std::getenv("MGS_FUSION_THRESHOLD_BYTES")) fusion_bytes = std::atoll(e);

  nlohmann::json tj;
  mgs::tools::Trace trace;
  mgs::Status st = mgs::tools::readJsonFile(trace_path, &tj);
  if (st.ok()) st = mgs::tools::parseTrace(tj, &trace);
  if (!st.ok()) die(trace_path + ": " + st.message());
  for (auto& l : trace.layers) {
    l.elements = std::max<int64_t>(1, std::llround(l.elements * scale_elements));
    l.backward_s *= scale_time;
  }
  const double forward_s = no_forward ? 0.0 : trace.forward_s * scale_time;
  const std::vector<float> values = loadValues(data_path);

  check(mgs_init(), "mgs_init");
  int rank = 0, size = 1;
  check(mgs_rank(&rank), "mgs_rank");
  check(mgs_size(&size), "mgs_size");

  // Inputs hold the tiled gradient and stay untouched; outputs are separate.
  const size_t L = trace.layers.size();
  std::vector<std::vector<float>> in(L), out(L);
  std::vector<int64_t> shapes(L);
  size_t offset = static_cast<size_t>(rank) * 7919;  // ranks see different (but equally distributed) values
  int64_t total_elements = 0;
  for (size_t i = 0; i < L; ++i) {
    const int64_t n = trace.layers[i].elements;
    total_elements += n;
    shapes[i] = n;
    in[i].resize(n);
    out[i].resize(n);
    for (int64_t j = 0; j < n; ++j) in[i][j] = values[(offset + j) % values.size()];
    offset += n;
  }
  std::vector<mgs_tensor_t> tin(L), tout(L);
  for (size_t i = 0; i < L; ++i) {
    tin[i] = mgs_tensor_t{in[i].data(), MGS_FLOAT32, 1, &shapes[i], MGS_DEVICE_CPU, nullptr, nullptr};
    tout[i] = mgs_tensor_t{out[i].data(), MGS_FLOAT32, 1, &shapes[i], MGS_DEVICE_CPU, nullptr, nullptr};
  }

  std::vector<double> step_s;
  mgs_stats_t s0{}, s1{};
  double tx0 = -1, rx0 = -1;
  Clock::time_point timed_start{};
  std::vector<mgs_handle_t> handles(L);
  // --enqueue-times: per timed step and tensor, when this rank enqueued it
  // (seconds on the steady clock).
  std::vector<double> enqueued_at;
  if (enqueue_times) enqueued_at.reserve(static_cast<size_t>(steps) * L);
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      check(mgs_get_stats(&s0, sizeof s0), "mgs_get_stats");
      tx0 = ifaceBytes(wire_iface, "tx_bytes");
      rx0 = ifaceBytes(wire_iface, "rx_bytes");
      timed_start = Clock::now();
    }
    if (!no_step_barrier || step == 0) check(mgs_barrier(), "mgs_barrier");
    const auto t0 = Clock::now();
    auto ready = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(forward_s));
    for (size_t i = 0; i < L; ++i) {
      ready += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(trace.layers[i].backward_s));
      std::this_thread::sleep_until(ready);
      if (enqueue_times && step >= warmup)
        enqueued_at.push_back(std::chrono::duration<double>(Clock::now().time_since_epoch()).count());
      check(mgs_allreduce_async(trace.layers[i].name.c_str(), &tin[i], &tout[i], MGS_REDUCE_AVERAGE, 1.0, 1.0,
                                MGS_FLAG_SPARSE_OK, &handles[i]),
            "mgs_allreduce_async");
    }
    for (size_t i = 0; i < L; ++i) {
      const mgs_status_t ws = mgs_wait(handles[i]);
      if (ws != MGS_SUCCESS) die(trace.layers[i].name + ": " + mgs_handle_error(handles[i]));
      mgs_release(handles[i]);
    }
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (step >= warmup) step_s.push_back(t);
  }
  // The period: wall time per timed step, barriers included (the step
  // times above leave each step's barrier out); --steps is at least 1.
  const double period_s = std::chrono::duration<double>(Clock::now() - timed_start).count() / steps;
  check(mgs_get_stats(&s1, sizeof s1), "mgs_get_stats");
  // The running plan's buckets, predicted against measured (means over the
  // steps the online check compared; microseconds from the first gradient of
  // the rank that started the step last), for fitting the cost model.
  // Every bucket: the count first, then the entries (layer-wise has one per tensor).
  size_t npb = 0;
  std::vector<mgs_plan_bucket_t> pb;
  if (mgs_get_plan_buckets(nullptr, 0, sizeof(mgs_plan_bucket_t), &npb) == MGS_SUCCESS) {
    pb.resize(npb);
    if (mgs_get_plan_buckets(pb.data(), pb.size(), sizeof(mgs_plan_bucket_t), &npb) != MGS_SUCCESS) pb.clear();
    pb.resize(std::min(npb, pb.size()));
  }
  std::vector<double> pb_elements, pb_pred_ready, pb_meas_ready, pb_pred_end, pb_meas_end;
  for (const auto& b : pb) {
    // Milliseconds; a mean over the compared steps, -1 before the first.
    const auto mean_ms = [&b](uint64_t sum_us) { return b.checks ? double(sum_us) / double(b.checks) * 1e-3 : -1.0; };
    pb_elements.push_back(static_cast<double>(b.elements));
    pb_pred_ready.push_back(static_cast<double>(b.predicted_ready_us) * 1e-3);
    pb_meas_ready.push_back(mean_ms(b.measured_ready_sum_us));
    pb_pred_end.push_back(static_cast<double>(b.predicted_end_us) * 1e-3);
    pb_meas_end.push_back(mean_ms(b.measured_end_sum_us));
  }
  if (rank == 0 && s1.plan_trials > s0.plan_trials)
    std::cerr << "mgs-replay: " << s1.plan_trials - s0.plan_trials
              << " candidate plans first ran on trial during the timed steps: they time the trials, not the plan "
                 "kept (raise --warmup, or leave it out)\n";
  else if (rank == 0 && s0.plan_trial_running)
    std::cerr << "mgs-replay: candidate plans (a trial or its run-off) were still on trial when the timed steps "
                 "started: they time the trials, not the plan kept (raise --warmup, or leave it out)\n";
  // Wire bytes per timed step (the barriers and the runtime's negotiation
  // included), gathered with the step times: two more values per rank.
  const double tx1 = ifaceBytes(wire_iface, "tx_bytes"), rx1 = ifaceBytes(wire_iface, "rx_bytes");
  const size_t timed = step_s.size();
  step_s.push_back(tx0 >= 0 && tx1 >= 0 ? (tx1 - tx0) / timed : -1);
  step_s.push_back(rx0 >= 0 && rx1 >= 0 ? (rx1 - rx0) / timed : -1);

  // Max over ranks per step.
  const std::vector<double> all = gatherDoubles("replay.step_times", &step_s, size);
  std::vector<double> max_s(timed, 0.0);
  double tx_mean = 0, tx_max = -1, rx_mean = 0;
  for (int r = 0; r < size; ++r) {
    const double* row = &all[r * step_s.size()];
    for (size_t i = 0; i < timed; ++i) max_s[i] = std::max(max_s[i], row[i]);
    tx_mean += row[timed] / size;
    rx_mean += row[timed + 1] / size;
    tx_max = std::max(tx_max, row[timed]);
  }
  if (tx_max < 0) tx_mean = rx_mean = -1;
  std::vector<double> enq_rank0_ms, enq_everywhere_ms;
  if (enqueue_times) enqueueTimes(std::move(enqueued_at), size, timed, L, &enq_rank0_ms, &enq_everywhere_ms);
  check(mgs_shutdown(), "mgs_shutdown");

  if (rank == 0) {
    double backward = 0;
    for (const auto& l : trace.layers) backward += l.backward_s;
    // Predictions: the calibrated model (what the runtime's planner used) and
    // mgs-sim's alpha-beta network with the calibrated selection time.
    mgs::plan::CostModel cal;
    const bool have_cal = !calibration.empty() && readCalibration(calibration, size, density, &cal);
    // The runtime's model (selection on the coordinator, beside backward) and,
    // for mgs-sim, also the MGS paper's (selection on the compute stream).
    const auto kSep = mgs::plan::Selection::kSeparate, kComp = mgs::plan::Selection::kCompute;
    Prediction p_cal, p_cal_timeline, p_sim, p_sim_compute;
    if (have_cal) {
      p_cal = predict(strat, trace.layers, forward_s, min_sparse, fusion_bytes, cal, kSep, /*coordinator=*/true);
      p_cal_timeline = predict(strat, trace.layers, forward_s, min_sparse, fusion_bytes, cal, kSep);
    }
    mgs::tools::SimOptions so;
    if (mgs::tools::networkByName(sim_network, &so.network).ok()) {
      so.density = density;
      if (have_cal) so.sparsify = cal.sparsify;
      mgs::plan::CostModel simc = mgs::tools::clusterModel(so, size);
      p_sim = predict(strat, trace.layers, forward_s, min_sparse, fusion_bytes, simc, kSep);
      p_sim_compute = predict(strat, trace.layers, forward_s, min_sparse, fusion_bytes, simc, kComp);
    }
    const double med = median(max_s);
    const double dsteps = static_cast<double>(s1.sparse_steps - s0.sparse_steps);
    std::ostringstream js;
    js << "{\"bench\":\"replay\",\"model\":\"" << trace.model << "\",\"strategy\":\"" << strat.name
       << "\",\"compressor\":\"" << strat.compressor << "\",\"planner\":\"" << strat.planner << "\",\"label\":\""
       << label << "\",\"ranks\":" << size << ",\"density\":" << fmt(density)
       << ",\"scale_elements\":" << fmt(scale_elements) << ",\"scale_time\":" << fmt(scale_time) << ",\"tensors\":" << L
       << ",\"elements\":" << total_elements << ",\"forward_s\":" << fmt(forward_s)
       << ",\"backward_s\":" << fmt(backward) << ",\"warmup\":" << warmup << ",\"steps\":" << timed
       << ",\"median_s\":" << fmt(med) << ",\"min_s\":" << fmt(*std::min_element(max_s.begin(), max_s.end()))
       << ",\"max_s\":" << fmt(*std::max_element(max_s.begin(), max_s.end())) << ",\"period_s\":" << fmt(period_s)
       << ",\"step_barrier\":" << (no_step_barrier ? "false" : "true") << ",\"step_s\":" << jsonArray(max_s)
       << ",\"plan_buckets\":" << s1.plan_buckets << ",\"plans\":" << s1.plans
       << ",\"plan_span_plan_checks\":" << s1.plan_span_plan_checks << ",\"plan_span_predicted_mean_ms\":"
       << fmt(s1.plan_span_plan_checks ? double(s1.plan_span_predicted_sum_us) / double(s1.plan_span_plan_checks) / 1e3
                                       : 0)
       << ",\"plan_span_measured_mean_ms\":"
       << fmt(s1.plan_span_plan_checks ? double(s1.plan_span_measured_sum_us) / double(s1.plan_span_plan_checks) / 1e3
                                       : 0)
       << ",\"plan_bucket_elements\":" << jsonArray(pb_elements)
       << ",\"plan_bucket_ready_ms\":{\"predicted\":" << jsonArray(pb_pred_ready)
       << ",\"measured\":" << jsonArray(pb_meas_ready)
       << "},\"plan_bucket_end_ms\":{\"predicted\":" << jsonArray(pb_pred_end)
       << ",\"measured\":" << jsonArray(pb_meas_end) << "}"
       << ",\"replans_rejected\":" << s1.plan_replans_rejected << ",\"plan_round_ms\":" << s1.plan_round_us / 1e3
       << ",\"plan_rounds_timed\":" << s1.plan_rounds_timed << ",\"plan_trials\":" << s1.plan_trials
       << ",\"plan_trials_in_timed_steps\":" << s1.plan_trials - s0.plan_trials
       << ",\"plan_trial_running_at_start\":" << s0.plan_trial_running
       << ",\"allreduce_ring_min_bytes\":" << s1.allreduce_ring_min_bytes << ",\"allreduce_ring_ops_per_step\":"
       << fmt(double(s1.allreduce_ring_ops - s0.allreduce_ring_ops) / double(std::max<size_t>(1, timed)))
       << ",\"allreduce_library_ops_per_step\":"
       << fmt(double(s1.allreduce_library_ops - s0.allreduce_library_ops) / double(std::max<size_t>(1, timed)))
       << ",\"sparse_buckets_per_step\":" << fmt(dsteps > 0 ? (s1.sparse_buckets - s0.sparse_buckets) / dsteps : 0)
       << ",\"dense_buckets_per_step\":"
       << fmt(dsteps > 0 ? (s1.sparse_dense_buckets - s0.sparse_dense_buckets) / dsteps : 0)
       << ",\"selected_over_target\":"
       << fmt(s1.sparse_target > s0.sparse_target
                  ? double(s1.sparse_selected - s0.sparse_selected) / double(s1.sparse_target - s0.sparse_target)
                  : 0)
       << ",\"payload_bytes_per_step\":"
       << fmt(dsteps > 0 ? double(s1.sparse_bytes_sent - s0.sparse_bytes_sent) / dsteps : 0)
       << ",\"wire_tx_bytes_per_step_mean\":" << fmt(tx_mean) << ",\"wire_tx_bytes_per_step_max\":" << fmt(tx_max)
       << ",\"wire_rx_bytes_per_step_mean\":" << fmt(rx_mean) << ",\"exchange\":\""
       << (std::getenv("MGS_EXCHANGE") ? std::getenv("MGS_EXCHANGE") : "allgather") << "\""
       << ",\"fusion_threshold_bytes\":" << fusion_bytes
       << ",\"fusion_threshold_kept_bytes\":" << s1.fusion_threshold_bytes << ",\"fusion_trials\":" << s1.fusion_trials
       << ",\"fusion_max_tensor_bytes\":" << s1.fusion_max_tensor_bytes << ",\"sent_over_dense\":"
       << fmt(s1.sparse_dense_bytes > s0.sparse_dense_bytes ? double(s1.sparse_bytes_sent - s0.sparse_bytes_sent) /
                                                                  double(s1.sparse_dense_bytes - s0.sparse_dense_bytes)
                                                            : 1)
       << ",\"predicted_calibrated_s\":" << fmt(p_cal.seconds) << ",\"predicted_calibrated_groups\":" << p_cal.groups
       << ",\"predicted_calibrated_timeline_s\":" << fmt(p_cal_timeline.seconds)
       << ",\"predicted_sim_s\":" << fmt(p_sim.seconds) << ",\"predicted_sim_groups\":" << p_sim.groups
       << ",\"predicted_sim_compute_s\":" << fmt(p_sim_compute.seconds) << ",\"sim_network\":\"" << sim_network << "\"";
    if (enqueue_times)
      js << ",\"enqueue_rank0_ms\":" << jsonArray(enq_rank0_ms)
         << ",\"enqueue_everywhere_ms\":" << jsonArray(enq_everywhere_ms);
    js << "}";
    std::cout << js.str() << std::endl;
  }
  return 0;
}
