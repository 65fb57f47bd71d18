// Cost models the planners optimise against (algorithms.md §2).
//
// A communication cost is a function of the bytes one call moves. Every model
// the papers use is piecewise linear in bytes: the fitted `a + b*M` line, the
// GaussianK small/large switch at 1 MiB, and a measured lookup table
// interpolated between points. CommModel stores all of them as one list of
// segments, so the planners see a single kind of function. The planners'
// dynamic programs are exact for any such function (monotone or not): they
// only need the cost of a group to depend on that group alone.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mgs::plan {

// One (bytes, seconds) measurement, as calibration produces them.
using Sample = std::pair<double, double>;

class CommModel {
 public:
  // seconds(M) = alpha + beta*M for M >= from_bytes (until the next segment).
  struct Segment {
    double from_bytes = 0;
    double alpha_s = 0;
    double beta_s_per_byte = 0;
  };

  CommModel() = default;
  static CommModel linear(double alpha_s, double beta_s_per_byte);
  // Two lines switching at `threshold_bytes` (the GaussianK allgather model).
  static CommModel switched(double threshold_bytes, double small_alpha, double small_beta, double large_alpha,
                            double large_beta);
  // Piecewise-linear interpolation of measured points, extrapolated with the
  // first/last segment. Points need distinct sizes; they are sorted here.
  static Status table(std::vector<Sample> points, CommModel* out);
  // The segments themselves (a saved model): the first starts at 0 bytes,
  // starts strictly increase, every number is finite.
  static Status fromSegments(std::vector<Segment> segments, CommModel* out);
  // Least-squares line through the samples. A negative intercept (noise at
  // small sizes) is clamped to 0 and the slope refitted through the origin,
  // so the model never predicts a negative time.
  static Status fit(const std::vector<Sample>& samples, CommModel* out);

  // Time of one call moving `bytes`; 0 bytes means no call and costs 0.
  double seconds(double bytes) const;
  // The per-call startup (intercept of the first segment): the `a` of the
  // authors' greedy MG-WFBP rule.
  double startup() const { return segments_.empty() ? 0.0 : segments_.front().alpha_s; }
  bool isLinear() const { return segments_.size() == 1; }
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  std::vector<Segment> segments_;  // sorted by from_bytes, first from 0
};

// Selection time t_s(n) for a buffer of n elements (§2.3): linear for
// threshold selectors, c*n*log2(n) for exact top-k.
struct SparsifyModel {
  enum class Kind { kLinear, kNLogN };
  Kind kind = Kind::kNLogN;
  double c_s = 0;

  double seconds(int64_t elements) const;
  // Least-squares c for the given kind from (elements, seconds) samples.
  static Status fit(Kind kind, const std::vector<Sample>& samples, SparsifyModel* out);
};

// How a sparse bucket's selected entries travel (docs/architecture.md,
// "Exchanges"):
//  kAllgather: every rank selects its own k and all P blocks of k (value,
//              index) pairs are gathered: per-rank traffic grows with P.
//  kAgreed:    one leader rank selects; its k indices are broadcast and every
//              rank allreduces its values at those indices (ScaleCom's CLT-k):
//              per-rank traffic about 3 * 4k bytes whatever P is.
//  kDense:     the whole bucket as a dense allreduce (no selection).
//  kHierarchical: with several ranks per node, a dense sum to each node's
//              leader, the fixed-block allgather between the leaders only
//              (each selects k from its node's sum), then the leaders'
//              blocks broadcast inside each node: inter-node traffic of
//              P/R ranks, R = ranks_per_node.
enum class Exchange { kAllgather = 0, kAgreed = 1, kDense = 2, kHierarchical = 3 };
// Sets of exchanges, as bits of CostModel::exchanges.
constexpr unsigned kExchangeAllgather = 1u << 0, kExchangeAgreed = 1u << 1, kExchangeDense = 1u << 2,
                   kExchangeHierarchical = 1u << 3;
constexpr unsigned kExchangeAll = kExchangeAllgather | kExchangeAgreed | kExchangeDense | kExchangeHierarchical;
constexpr unsigned exchangeBit(Exchange e) { return 1u << static_cast<unsigned>(e); }
const char* exchangeName(Exchange e);  // "allgather", "agreed", "dense", "hierarchical"
// A comma-separated set of exchange names ("allgather,agreed,dense"); false
// (and *out unchanged) for an empty set or an unknown name.
bool parseExchanges(const std::string& names, unsigned* out);

// Everything that turns a group of `elements` into seconds on one cluster.
struct CostModel {
  CommModel allreduce;  // dense allreduce of the group's bytes
  CommModel allgather;  // sparse allgather: bytes = P * k * (value bytes + 4 index bytes)
  // One-root broadcast of a buffer of this many bytes (the agreed exchange's
  // index block). Empty (cost files written before it existed): estimated
  // by `allreduce` of the same bytes, an upper bound for any sane MPI.
  CommModel broadcast;
  SparsifyModel sparsify;
  // The start-up every group pays in the runtime before its collective can
  // begin: a group is exchanged only once a negotiation round (a small
  // allreduce over every rank) has declared its last tensor ready. Added once
  // to each exchange below. Calibration measures it (the allreduce model at
  // a negotiation message's size); 0 in the papers' presets, whose
  // regression vectors stay as published. The planners merge further as it
  // grows: on 16 emulated hosts with 0.5 ms links (8.7 ms per round) the
  // mgs plan went from 4 buckets to 2 (bench/NOTES.md). The sparse
  // timelines and planners charge it per round, not per group: groups that
  // become ready in the same coordinator cycle share one round (timeline.h).
  double negotiation_s = 0;
  // The coordinator loop (plan/coordinator.h): when set, the sparse model is
  // evaluated as the runtime's coordinator runs it (rounds back to back on a
  // grid, small dense tensors allreduced on it, blocking exchanges, up to
  // `max_in_flight` allgathers at once, completions seen after a round).
  // Off by default, and in every file without it: the model above, bit for
  // bit. `cycle_s` is MGS_CYCLE_TIME_MS (runtime default 1 ms) and
  // `max_in_flight` BlockExchange::kMaxInFlight (4): runtime settings, not
  // measurements.
  bool coordinator_loop = false;
  double cycle_s = 0.001;
  int max_in_flight = 4;
  // Whether the small dense tensors' allreduces run in flight beside the
  // round's sparse buckets (coordinator model only): host tensors over MPI
  // do (Executor::startInFlight); CUDA tensors, and every allreduce under
  // MGS_NONFINITE=error (a blocking check first), run to their end on the
  // coordinator before the buckets. A file without it: true.
  bool dense_in_flight = true;
  // How much of an allgather's start-up overlaps the allgather in flight
  // before it, in [0, 1] (coordinator model only). A property of the
  // network and MPI's progress, measured by calibration (one small allgather
  // against four started together, core/calibration.h allgatherOverlap); in
  // a file without it 1, the runtime's ideal (start-ups overlap fully,
  // transfers share the link); 0 bounds it from above (one after another).
  double allgather_overlap = 1.0;
  // Exchanges in flight (the timeline model and the planners): with MPI the
  // runtime keeps a sparse bucket's allgather, agreed or hierarchical
  // exchange in flight while the next one starts, so their start-ups overlap
  // and their transfers share the link. A group's exchange then ends no
  // earlier than its start + T, nor than the previous exchange's end + T -
  // inflight_overlap x (its start-up, at most T). 0, the papers' model and
  // the default of every file without the field: one exchange after
  // another. The runtime's calibration sets it to the allgather overlap it
  // measures (allgather_overlap: one small allgather against four in
  // flight together). Without it, a plan of many small buckets (layer-wise)
  // was priced at about twice its measured span on 4-16 emulated hosts;
  // with it, and with a starved coordinator's queued groups at their CPU
  // time (queuedStageSeconds), within 15 % on 4 and 8 (docs/benchmarks.md,
  // "Emulated cluster: how well the plan predicts its steps"). It moves only
  // plans of many buckets: each bucket's fixed CPU (group_host_s,
  // host_dilation, host_steal) keeps the planner from cutting many.
  double inflight_overlap = 0.0;
  // A dense group's allreduce queued right behind the exchange before it
  // (the timeline model and the planners): the runtime runs dense buckets
  // one after another, and a stream of small allreduces back to back costs
  // each call less than the table's price of one (which calibration takes
  // as the slowest rank's median call, its wait for the last rank to arrive
  // included). Such an allreduce may then start dense_overlap x the table's
  // start-up before the one before it ends (overlapSeconds), so that it
  // costs the stream's pace. The runtime's calibration measures it (a
  // stream of small allreduces against the table's price at their size,
  // core/calibration.h denseOverlap); 0, the default of every file without
  // the field: each allreduce at the table's price. On 32 emulated hosts
  // the table priced a 4 KiB allreduce at 22-34 ms from one init to the
  // next, while a layer-wise plan's dense buckets ended 18-27 ms apart, and
  // without this the plan measured 0.74-0.90 of its price
  // (docs/benchmarks.md, "Emulated cluster: how well the plan predicts").
  double dense_overlap = 0.0;
  // The coordinator's fixed CPU per group, beyond what scales with the
  // group's size: the threshold's sample and search, starting, polling and
  // completing the group's collectives, its bookkeeping. Charged with the
  // group's selection on the first stage (firstStageSeconds), so the
  // planners weigh each extra group against the overlap it buys. The
  // runtime's calibration measures it on the coordinator's CPU clock
  // (core/calibration.cc); 0 in the papers' presets and in every file
  // without the field. On 4 ranks sharing 2 cores it measured 0.17-0.27 ms,
  // while a real job's coordinator spent ~0.66 ms more per extra group
  // (bench/NOTES.md, sitting 8): a lower bound, enough to tip the plan.
  double group_host_s = 0.0;
  // Whether the coordinator's CPU comes out of backward. 0 (the default):
  // the coordinator has a core of its own and its work (selection,
  // group_host_s) only delays the exchanges. > 0: the cores are busy with
  // training (more busy threads than cores), every second of coordinator
  // work delays backward by about this many seconds, and the sparse model
  // is then planned with Selection::kCompute and first stages of
  // firstStageSeconds. The runtime measures it on rank 0 over the profiled
  // steps, from its coordinator thread's run-queue wait (core/host_load.h),
  // and plans with it; it is not written to the calibration file (a
  // property of the job's load, not of the cluster).
  double host_steal = 0.0;
  // How many seconds of wall time a second of the coordinator's CPU takes
  // while the cores it may use are busy but not with training (host_steal
  // 0): the node's other ranks' coordinators, other jobs, the kernel's
  // network work. Each group's fixed CPU (group_host_s, measured on the
  // coordinator's CPU clock) then delays its exchanges by this many times
  // its CPU. The runtime measures it on rank 0 over the profiled steps,
  // (CPU + run-queue wait) / CPU of its coordinator thread (core/host_load.h),
  // and plans with it; like host_steal, not written to the calibration file.
  // 1 (the default, and every file without it): the coordinator finds a
  // core when it wants one.
  double host_dilation = 1.0;
  // Which exchanges a sparse group may use (kExchange* bits); the planners
  // and the runtime take, per group, the one chooseExchange() names. The
  // default is the allgather alone (the papers' model); the runtime sets it
  // from MGS_EXCHANGE and MGS_DENSE_FALLBACK.
  unsigned exchanges = kExchangeAllgather;
  int workers = 1;
  double density = 0.001;
  int bytes_per_element = 4;
  // The hierarchical exchange: ranks per node (R; 1: no node has two ranks,
  // the exchange is never chosen). Nodes are workers / R (rounded up).
  int ranks_per_node = 1;
  // Inside one node: a reduce (or a broadcast) of this many bytes among its
  // R ranks. Empty (not measured): estimated by `allreduce` of the same
  // bytes, an upper bound, so that an unmeasured model never prefers it.
  CommModel node;
  // The allgather among the node leaders, bytes = nodes * k * (value + 4
  // index bytes). Empty: `allgather` at those bytes (measured on all ranks:
  // an upper bound).
  CommModel leader_allgather;

  // k = clamp(floor(n*density), 1, n), as the selectors compute it.
  int64_t selected(int64_t elements) const;
  double allreduceSeconds(int64_t elements) const;
  double allgatherSeconds(int64_t elements) const;
  double sparsifySeconds(int64_t elements) const { return sparsify.seconds(elements); }
  double broadcastSeconds(double bytes) const;
  // The models the terms above fall back on when a file left one out:
  // broadcast and node are then estimated by `allreduce`, the leaders'
  // allgather by `allgather` (see each field).
  const CommModel& broadcastModel() const { return broadcast.segments().empty() ? allreduce : broadcast; }
  const CommModel& nodeModel() const { return node.segments().empty() ? allreduce : node; }
  const CommModel& leaderModel() const { return leader_allgather.segments().empty() ? allgather : leader_allgather; }
  // The agreed exchange's communication: broadcast of k 4-byte indices, then
  // an allreduce of k values.
  double agreedSeconds(int64_t elements) const;
  int nodes() const { return ranks_per_node <= 1 ? workers : (workers + ranks_per_node - 1) / ranks_per_node; }
  double nodeSeconds(double bytes) const;
  // The hierarchical exchange's communication: the dense reduce inside the
  // node, the leaders' allgather, the broadcast of their blocks inside the
  // node (plus one negotiation round).
  double hierarchicalSeconds(int64_t elements) const;
  // Communication time of `e` for a group (selection not included), with
  // one negotiation round (negotiation_s) charged to it: what a group costs
  // alone, and what chooseExchange compares.
  double exchangeSeconds(Exchange e, int64_t elements) const;
  // The same without the negotiation round: the timelines charge rounds
  // themselves, one per round the runtime runs, which groups that become
  // ready together share (timeline.h, negotiationRound).
  double wireSeconds(Exchange e, int64_t elements) const;
  // How much of a group's exchange may overlap the exchange in flight before
  // it: inflight_overlap x the start-ups of its collectives, at most its
  // wireSeconds; for dense (the runtime completes a dense bucket before the
  // next starts) dense_overlap x the allreduce's start-up, the part a
  // queued allreduce saves.
  double overlapSeconds(Exchange e, int64_t elements) const;
  // The same before the cap at the exchange's own time: the overlap
  // fraction (inflight_overlap, or dense_overlap for dense) x the
  // start-ups of e's collectives. What the online refit takes off a call
  // that ran queued (core/online_cost.h).
  double overlapStartupSeconds(Exchange e) const;
  // Selection time `e` needs first (0 for dense).
  double selectionSeconds(Exchange e, int64_t elements) const;
  // What a group costs the sparse model's first stage: its selection plus
  // the fixed per-group CPU (group_host_s x host_dilation); with host_steal > 0 (the stage
  // is then the compute stream), host_steal x group_host_s alone: on busy
  // cores the per-element work costs backward the same whichever group it
  // is in, and the layers' backward times, measured by the runtime with
  // that work going on, already hold it.
  double firstStageSeconds(Exchange e, int64_t elements) const;
  // Whether the coordinator waits for cores that training does not hold
  // (host_dilation > 1, host_steal 0).
  bool starvedCoordinator() const { return host_steal <= 0 && host_dilation > 1; }
  // The first stage of a group that the coordinator runs right after the
  // previous group's, in the same turn on a core (it shares that group's
  // negotiation round; timeline.h, QueuedStage): its selection and
  // group_host_s, not stretched by a wait for a core. firstStageSeconds
  // unless starvedCoordinator().
  double queuedStageSeconds(Exchange e, int64_t elements) const;
  // The allowed exchange with the least selection + communication time;
  // ties go to the lower enum value (allgather, then agreed, then dense,
  // then hierarchical). The hierarchical exchange is a candidate only with
  // ranks_per_node > 1 and at least 2 nodes. With no bit set it answers
  // kAllgather. Pure: the same on every rank
  // given the same model.
  Exchange chooseExchange(int64_t elements) const;
};

// Named models from the papers' fitted tables, for reproduction (see
// docs/planner.md for the list): "10gbe-P{2,4,8,16}", "1gbe-P{2,4,8,16}",
// "gk-1gbe-P{2,4,8,16}". Sets every field but density.
Status costModelPreset(const std::string& name, CostModel* out);
std::vector<std::string> costModelPresetNames();

}  // namespace mgs::plan
