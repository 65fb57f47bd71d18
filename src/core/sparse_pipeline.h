// The sparse gradient pipeline (algorithms.md sections 5, 7-9): it wires the
// stages of docs/architecture.md "Sparse pipeline stages" and takes the
// verdict of each bucket, the same on every rank.
//
//   BucketSchedule (bucket_schedule.h)  which tensors form a bucket, when a
//                                       step ends, profile / plan / re-plan
//   LocalStage (local_stage.h)          fuse gradient + residual into the
//                                       bucket's acc slab, select, pack a block
//   BlockExchange (block_exchange.h)    allgather of blocks, the agreed
//                                       index broadcast, the exchange choice
//   ScatterStage (scatter_stage.h)      received blocks into the outputs
//
// Per bucket, every rank runs the same collectives whatever its local
// verdict: a rank whose local part failed (staging, a NaN) says so in its
// block's header (or a flag slot), so every rank fails the bucket together
// instead of waiting. A bucket's residual commits exactly when every rank's
// contribution was delivered; otherwise every rank's residual stays bitwise
// as it was (local_stage.h).
//
// The allgather paths are in sparse_exchange.cc, the agreed exchange in
// sparse_agreed.cc, the hierarchical one in sparse_hierarchical.cc.
// Everything runs on the coordinator thread.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "compress/selector.h"
#include "core/block_exchange.h"
#include "core/bucket_schedule.h"
#include "core/device.h"
#include "core/local_stage.h"
#include "core/routed_local_stage.h"
#include "core/online_cost.h"
#include "core/request.h"
#include "core/residual_store.h"
#include "core/scatter_stage.h"
#include "core/sparse_progress.h"
#include "core/sparse_stats.h"
#include "core/timeline.h"

namespace mgs {

class SparsePipeline {
 public:
  using Complete = std::function<void(Request& req, Status status)>;

  // Builds the pipeline and, for a sparse job (MGS_COMPRESSOR != none), its
  // selector and the cost model (MGS_CALIBRATION: a collective, identical on
  // all ranks), so a bad setting fails at init, not at the first gradient.
  // `progress` (the Runtime's, outliving the pipeline; null: an own one)
  // holds the step counter and the agreed leaders' turns, which checkpoints
  // read and restore (core/sparse_progress.h).
  static Status create(Communicator& comm, const Config& config, ResidualStore& residuals, Complete complete,
                       std::unique_ptr<SparsePipeline>* out, SparseProgress* progress = nullptr);
  // Rank 0's timeline, or null (set before the first submit).
  void setTimeline(Timeline* timeline) { timeline_ = timeline; }

  // Whether a negotiated allreduce goes through this pipeline (same answer on
  // every rank: it depends only on negotiated fields and the configuration).
  bool eligible(const Signature& sig) const;
  // Ready sparse requests, in negotiated order. Completes handles of the
  // buckets that are complete; holds the others until their members arrive.
  void submit(std::vector<Request> reqs) { schedule_.submit(std::move(reqs)); }
  // Once per coordinator cycle (BucketSchedule::endCycle).
  void endCycle(bool nothing_ready) { schedule_.endCycle(nothing_ready); }
  int idleFlushCycles() const { return schedule_.idleFlushCycles(); }
  // Finish the buckets whose exchange has completed (called every cycle).
  void poll();
  // Finish every bucket in flight (before shutdown).
  void drain();
  // Moves every agreed and hierarchical bucket in flight on as far as it
  // goes without waiting (sparse_agreed.cc). The owner calls it from the communicator's
  // wait hook too (Runtime::loop): a phase is started for a bucket only
  // after it was started for every earlier one, and a rank blocked in a
  // collective must still start the phases that are due.
  void pumpInFlight();
  // Fail everything held (shutdown).
  void failHeld(const Status& st);
  SparseStats stats() const { return stats_; }
  // Nothing held in a bucket and no exchange in flight.
  bool idle() const { return inflight_.empty() && !schedule_.holding(); }
  // Where CUDA tensors' collectives go: the device communicator (NCCL) or
  // null (MPI with host staging); under MGS_BACKEND=auto the first call
  // creates it (a collective: called at the same bucket on every rank). With
  // one, a sparse allgather bucket whose members are all CUDA tensors runs as
  // a device bucket (routed_local_stage.h): every part enqueued, no host
  // synchronisation, finished by poll() when its event has passed.
  void setDeviceComm(std::function<device::DeviceComm*()> get) { device_comm_ = std::move(get); }
  // The resident stage's factory (routed_local_stage.h), replacing
  // device::createLocalStage: tests give a stand-in. Before the first bucket.
  void setResidentFactory(ResidentFactory factory);
  // The routed local stage (tests, statistics).
  const RoutedLocalStage& localStage() const { return *local_; }
  // The cost model the exchange choice and the planner use; null before one
  // exists (compressor none). Tests, statistics.
  const plan::CostModel* costModel() const { return schedule_.haveCost() ? &schedule_.cost() : nullptr; }
  // Called with the statistics before a bucket's handles complete, so a
  // caller woken by them reads statistics that include that bucket.
  void setStatsSink(std::function<void(const SparseStats&)> publish) { publish_ = std::move(publish); }

 private:
  SparsePipeline(Communicator& comm, const Config& config, ResidualStore& residuals, Complete complete,
                 SparseProgress* progress);
  // Agreed and hierarchical buckets in flight when the backend has
  // nonblocking collectives.
  Status setupAsync();
  // Whether they are (else their phases run to the end at once).
  bool phasesInFlight() const { return values_comm_ != nullptr; }
  Status init();
  // One complete bucket from the schedule: the local stage, then the
  // collective part every rank runs for it.
  void runBucket(std::vector<Request>& members);
  // At the first bucket of CUDA tensors under MGS_CALIBRATION=auto: time the
  // selection where it runs (the resident stage, on the GPU), max-reduce over
  // ranks and use it for the model's selection term. Collective (on_cuda is
  // negotiated, so every rank calls it at the same bucket); a rank whose
  // buckets are selected on the CPU keeps every rank on calibration's figure.
  void calibrateDeviceSelection(std::vector<Request>& members, size_t n);
  bool device_selection_asked_ = false;  // once per job
  const compress::Selector& selectorFor(double density);
  // The options of every selector this pipeline makes (one per density).
  compress::SelectorOptions selectorOptions(double density) const;
  void publishStats();
  // The bucket's exchange (the same on every rank): a CUDA bucket that can
  // run on the device takes an exchange that has a device path.
  plan::Exchange chooseExchange(std::vector<Request>& members, size_t n, double density);
  bool cuda_exchange_warned_ = false;
  // Where a bucket ran that the local stage served (not a device bucket).
  static BucketPath pathOf(const std::vector<Request>& members, const LocalOutcome& out);
  void countPath(BucketPath p, uint64_t buckets, uint64_t bytes) {
    stats_.path_buckets[static_cast<int>(p)] += buckets;
    stats_.path_bytes[static_cast<int>(p)] += bytes;
  }

  // The fixed-block allgather (sparse_exchange.cc).
  struct InFlight {
    std::vector<Request> members;
    size_t n = 0, count = 0, k = 0;
    Status local;
    BucketPath path = BucketPath::kHost;  // where its gradients were fused and selected (stats, timeline)
    bool skipped = false;            // a non-finite step under MGS_NONFINITE=propagate
    bool delivered = false;          // every rank scattered every rank's selection
    std::unique_ptr<LocalSlab> acc;  // this step's residual, committed on success
    BlockExchange::Allgather ex;     // the MPI exchange (unused by a device bucket but for cap, started)
    // A device bucket (startDevice): its enqueued work, or the error of
    // enqueuing or polling it (then dev_done).
    bool device = false;
    std::unique_ptr<PendingDeviceBucket> dev;
    bool dev_done = false;
    Status dev_status;
    // An agreed bucket (sparse_agreed.cc): three collectives, each started
    // when the one before has completed, never waited for on the
    // coordinator's own account (pumpInFlight).
    struct Agreed {
      enum Phase { kNone, kIndex, kValues, kNames, kDone };
      Phase phase = kNone;
      int leader = 0;
      size_t cap = 1, count = 0;
      int bad_member = -1;
      bool reduced = false;      // the values' allreduce completed
      bool flagged = false;      // some rank's flag was raised
      bool other_error = false;  // ... for a failure that is not a non-finite value
      bool outputs_zeroed = false;  // the local stage zeroed the (in-place) outputs
      std::vector<char> block;   // the leader's index block
      std::vector<float> vals;   // [cap values | kAgreedFlags slots]
      uint64_t code = 0;         // this rank's failure code, and every rank's (kNames)
      std::vector<uint64_t> codes;
      std::unique_ptr<PendingCollective> op;  // the phase's collective
      Status status;                          // a collective or the index check failed
      Clock::time_point phase_start;
    } ag;
    bool agreed() const { return ag.phase != Agreed::kNone; }
    // A hierarchical bucket (sparse_hierarchical.cc): the node's sum, the
    // leaders' allgather (leaders only), the blocks' broadcast in the node,
    // and on a failure the allgather naming the failed ranks.
    struct Hier {
      enum Phase { kNone, kNodeSum, kLeaders, kNodeBcast, kNames, kDone };
      Phase phase = kNone;
      bool lead = false;
      std::vector<float> acc;            // [n | kHierFlags]: this rank's acc, then the node's sum
      std::unique_ptr<LocalSlab> slab;   // the leader's new residual, committed on success
      Status lead_st;                    // the leader's selection
      int lead_bad = -1, bad_member = -1;
      double density = 0;  // the bucket's, at its negotiated place
      uint64_t step = 0;   // the schedule's step then (the selector's seed)
      bool delivered = false;            // every node's block was a count: the residuals commit
      bool named = false;                // the failure names were gathered (codes)
      uint64_t code = 0;
      std::vector<uint64_t> codes;
      std::unique_ptr<PendingCollective> op;
      Status status;
      Clock::time_point phase_start;
    } hr;
    bool hier() const { return hr.phase != Hier::kNone; }
    // An agreed or hierarchical bucket whose phases have all ended.
    bool phasesDone() const {
      return (agreed() && ag.phase == Agreed::kDone) || (hier() && hr.phase == Hier::kDone);
    }
  };
  using Agreed = InFlight::Agreed;
  using Hier = InFlight::Hier;
  // Device buckets in flight at most before the oldest is waited for (a host
  // sync): high enough that a step's buckets never wait in steady state;
  // each holds its acc slab in device memory until it finishes.
  static constexpr size_t kMaxDeviceInFlight = 64;
  // Whether this bucket runs as a device bucket: the same answer on every
  // rank (negotiated on_cuda, the backend; the first time, every rank says
  // whether its resident stage runs device buckets, in one 4-byte allreduce).
  bool deviceBucket(const std::vector<Request>& members, const LocalJob& job);
  void startDevice(std::vector<Request>& members, size_t n, size_t cap, size_t k, LocalJob& job);
  bool deviceReady(InFlight& f);
  void finishDevice(InFlight& f);
  Status deviceVerdict(InFlight& f, const DeviceBucketResult& r);
  void startSparse(std::vector<Request>& members, size_t n, size_t cap, size_t k, LocalOutcome& local,
                   std::vector<char>&& block);
  void finishOldest();
  // A started exchange joins the queue (finished in order); the oldest is
  // finished first while more than BlockExchange::kMaxInFlight are in flight.
  void pushInFlight(InFlight&& f);
  Status finishSparse(InFlight& f);
  // The dense fallback; `acc` is the local stage's dense buffer (n + P
  // floats). *sent: every rank's acc went into the sum (then the residual is zero).
  Status exchangeDense(std::vector<Request>& members, size_t n, float* acc, const Status& local, int bad_member,
                       bool* sent);
  // The agreed exchange's collective part (sparse_agreed.cc); `local.slab`
  // is committed as the residual only if every rank contributed. With a
  // backend that has nonblocking collectives its three phases run in
  // flight: the index broadcast on comm_ (started here, in negotiated
  // order), the values' allreduce on values_comm_ and the failure names on
  // names_comm_ (each started when the phase before completed, which
  // differs between ranks, so each on a communicator of its own, in bucket
  // order). Otherwise they run to the end here.
  void startAgreed(std::vector<Request>& members, size_t n, size_t cap, int leader, size_t k, LocalOutcome& local,
                   std::vector<char>&& block, std::vector<float>&& vals);
  // One phase of `f`, if its collective has completed (wait: wait for it).
  void stepAgreed(InFlight& f, bool wait);
  void agreedIndexArrived(InFlight& f);
  void agreedValuesArrived(InFlight& f);
  void finishAgreed(InFlight& f);
  // The allgather of every rank's failure code that names the failed ranks
  // (failure paths only; names_comm_ in flight, in bucket order).
  Status startNames(const uint64_t* code, std::vector<uint64_t>* codes, std::unique_ptr<PendingCollective>* op);
  // Waits, moving every phased bucket on, until the oldest bucket in flight
  // (an agreed or hierarchical one) is done.
  void waitPhasedFront();
  std::vector<float> takeVals(size_t n);
  // The hierarchical exchange (sparse_hierarchical.cc). setupNodes() groups
  // the ranks into nodes (MGS_NODE_SIZE, or by host name) and makes the
  // node and leader communicators, at init, on every rank alike.
  Status setupNodes();
  // The cost model's node and leader terms (CostModel::node,
  // leader_allgather), measured unless MGS_CALIBRATION=off or its file has them.
  Status measureNodes(plan::CostModel* cost);
  // Started at the bucket's negotiated place, then moved on by pumpInFlight()
  // as the agreed exchange is (in flight with nonblocking collectives: the
  // node's sum on node_comm_, the leaders' allgather on leader_comm_, the
  // node broadcast on node_bcast_comm_, names on names_comm_; each started
  // in bucket order); or run to the end at once.
  void startHierarchical(std::vector<Request>& members, size_t n, double density, LocalOutcome& local,
                         std::vector<float>&& acc);
  // One phase of a hierarchical bucket, if its collective has completed.
  void stepHier(InFlight& f, bool wait);
  void hierSumArrived(InFlight& f);
  void hierBlocksArrived(InFlight& f);
  void finishHier(InFlight& f);
  static constexpr size_t kHierFlags = 2;  // as kAgreedFlags, in the node sum
  // Slots after the agreed exchange's values: ranks that failed, and of
  // those, failures other than a non-finite value. They give every rank the
  // same verdict inside the allreduce the exchange does anyway.
  static constexpr size_t kAgreedFlags = 2;

  // The error of a bucket some rank failed: `codes` holds every rank's block
  // header (the same on all ranks), `local` adds this rank's details.
  // "rank r: non-finite gradient in tensor 't'; rank q: ..." for each rank
  // whose code is a failure (block::decodeHeader with this cap); sets
  // *other_error if some failure is not a non-finite value.
  std::string failedRanks(const uint64_t* codes, size_t cap, const std::vector<Request>& members,
                          bool* other_error) const;
  static Status failedVerdict(const std::string& what, const std::string& failed, bool other_error,
                              const Status& local);
  bool propagateNonFinite() const { return config_.nonfinite == "propagate"; }

  Communicator& comm_;
  const Config config_;  // the job's, with the clamps of create()
  Timeline* timeline_ = nullptr;
  Complete complete_;
  int threads_;  // CPU threads for selection (MGS_THREADS resolved, common/threads.h)
  SparseStats stats_;
  OnlineCost online_;
  std::map<double, std::unique_ptr<compress::Selector>> selectors_;
  BucketSchedule schedule_;
  LocalStageOptions local_options_;
  std::unique_ptr<RoutedLocalStage> local_;
  BlockExchange exchange_;
  ScatterStage scatter_;
  std::deque<InFlight> inflight_;   // started in order, finished in order
  std::vector<uint64_t> counts_;    // per-rank block headers
  std::vector<std::vector<float>> vals_pool_;  // agreed exchange: values (+ kAgreedFlags slots)
  // The agreed exchange's second and third phases (nonblocking backends
  // only; null: the phases run to the end at once).
  std::unique_ptr<Communicator> values_comm_, names_comm_;
  bool in_pump_ = false;
  // The hierarchical exchange: this rank's node and (on node leaders) the
  // leaders' communicator; nodes_ nodes of at most ranks_per_node_ ranks.
  std::unique_ptr<Communicator> node_comm_, leader_comm_;
  bool hierarchy_ = false;  // at least 2 nodes, one of them with 2 or more ranks
  int nodes_ = 0, ranks_per_node_ = 1;
  std::unique_ptr<Communicator> node_bcast_comm_;  // the node broadcast, in flight (nonblocking backends)
  std::function<void(const SparseStats&)> publish_;
  std::function<device::DeviceComm*()> device_comm_;
  int device_buckets_ = -1;  // -1: not agreed yet; 0: never; 1: device buckets run
  int device_hint_ = -1;     // the device communicator's device: where the resident stage is made
  int resident_everywhere_ = -1;  // -1: not agreed yet; else whether every rank has a resident stage
  bool residentEverywhere(const std::vector<Request>& members, size_t n);
};

}  // namespace mgs
