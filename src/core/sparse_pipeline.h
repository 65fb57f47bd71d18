// The sparse gradient pipeline (algorithms.md sections 5, 7-9): it wires the
// stages of docs/architecture.md "Sparse pipeline stages" and takes the
// verdict of each bucket, the same on every rank.
//
//   BucketSchedule (bucket_schedule.h)  which tensors form a bucket, when a
//                                       step ends; its Replanner
//                                       (replanner.h): profile / plan / re-plan
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
// The job's cost model has one owner, JobCostModel (job_cost_model.h): the
// schedule's planning and each bucket's exchange choice ask it.
//
// Each bucket's exchange is an object (core/bucket_exchange.h: allgather,
// device, agreed, hierarchical, dense, one file each); the pipeline picks it
// by the plan's exchange, keeps the started ones in a queue (finished in
// order, at most a few in flight), moves phased ones on and publishes the
// statistics before completing the handles. Everything runs on the
// coordinator thread.
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
#include "core/bucket_exchange.h"
#include "core/bucket_schedule.h"
#include "core/device.h"
#include "core/local_stage.h"
#include "core/routed_local_stage.h"
#include "core/job_cost_model.h"
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
  void setTimeline(Timeline* timeline) {
    ctx_.timeline = timeline;
    schedule_.setTimeline(timeline);
  }

  // Whether a negotiated allreduce goes through this pipeline (same answer on
  // every rank: it depends only on negotiated fields and the configuration).
  bool eligible(const Signature& sig) const;
  // Ready sparse requests, in negotiated order, declared ready by the
  // negotiation round that ended at `declared`. Completes handles of the
  // buckets that are complete; holds the others until their members arrive.
  void submit(std::vector<Request> reqs, Clock::time_point declared = Clock::now()) {
    schedule_.submit(std::move(reqs), declared);
  }
  // A ready allreduce that the framework offered for sparsification
  // (MGS_FLAG_SPARSE_OK) and that eligible() keeps dense: the planner's
  // profile takes its size and enqueue time (a sparse job only).
  void noteDense(const Request& req) {
    if (config_.compressor != "none") schedule_.noteDense(req);
  }
  // Once per coordinator cycle (BucketSchedule::endCycle).
  void endCycle(bool nothing_ready) { schedule_.endCycle(nothing_ready); }
  int idleFlushCycles() const { return schedule_.idleFlushCycles(); }
  // Finish the buckets whose exchange has completed (called every cycle).
  void poll();
  // Finish every bucket in flight (before shutdown).
  void drain();
  // Moves every phased bucket in flight (agreed, hierarchical) on as far as
  // it goes without waiting. The owner calls it from the communicator's
  // wait hook too (Runtime::loop): a phase is started for a bucket only
  // after it was started for every earlier one, and a rank blocked in a
  // collective must still start the phases that are due.
  void pumpInFlight();
  // One negotiation round with work pending, as long as it took on this
  // rank (the re-planner prices rounds from these: Replanner::roundTimed).
  void roundTimed(double seconds) { schedule_.roundTimed(seconds); }
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
  const plan::CostModel* costModel() const { return cost_.ready() ? &cost_.model() : nullptr; }
  // Called with the statistics before a bucket's handles complete, so a
  // caller woken by them reads statistics that include that bucket.
  void setStatsSink(std::function<void(const SparseStats&)> publish) { publish_ = std::move(publish); }

 private:
  SparsePipeline(Communicator& comm, const Config& config, ResidualStore& residuals, Complete complete,
                 SparseProgress* progress);
  // Phased buckets in flight when the backend has nonblocking collectives
  // (else their phases run to the end at once).
  Status setupAsync();
  Status init();
  // One complete bucket from the schedule: the exchange's local stage, then
  // the collective part every rank runs for it.
  // `plan_bucket`: its index in the plan (-1: none).
  void runBucket(std::vector<Request>& members, int plan_bucket);
  // At the first bucket of CUDA tensors under MGS_CALIBRATION=auto: time the
  // selection where it runs (the resident stage, on the GPU) and hand it to
  // the cost model (JobCostModel::agreeDeviceSelection: max-reduced over
  // ranks). Collective (on_cuda is negotiated, so every rank calls it at the
  // same bucket); a rank whose buckets are selected on the CPU keeps every
  // rank on calibration's figure.
  void calibrateDeviceSelection(std::vector<Request>& members, size_t n);
  // At the same bucket, where it runs as a device bucket: time the device
  // communicator's collectives on the resident stage's memory and hand
  // them to the cost model (JobCostModel::agreeDeviceCollectives). Collective.
  void calibrateDeviceCollectives(std::vector<Request>& members, size_t n);
  const compress::Selector& selectorFor(double density);
  // The options of every selector this pipeline makes (one per density).
  compress::SelectorOptions selectorOptions(double density) const;
  void publishStats();
  // The bucket's exchange (the same on every rank): a CUDA bucket that can
  // run on the device takes an exchange that has a device path.
  plan::Exchange chooseExchange(std::vector<Request>& members, size_t n, double density);
  // Whether this bucket runs as a device bucket: the same answer on every
  // rank (negotiated on_cuda, the backend; the first time, every rank says
  // whether its resident stage runs device buckets, in one 4-byte allreduce).
  // sparse_device.cc.
  bool deviceBucket(const std::vector<Request>& members, const LocalJob& job);
  // Whether every rank's resident stage selects this CUDA bucket (agreed once).
  bool residentEverywhere(const std::vector<Request>& members, size_t n);
  // A started exchange joins the queue (finished in order); the oldest is
  // finished first while more than its maxInFlight() are in flight.
  void pushInFlight(std::unique_ptr<BucketExchange> ex);
  void finishOldest();
  // finish(), the statistics published, the handles completed, release().
  void complete(BucketExchange& ex);
  // Waits, moving every phased bucket on, until the oldest bucket in flight
  // (a phased one) is done.
  void waitPhasedFront();

  Communicator& comm_;
  const Config config_;  // the job's, with the clamps of create()
  Complete complete_;
  int threads_;  // CPU threads for selection (MGS_THREADS resolved, common/threads.h)
  SparseStats stats_;
  JobCostModel cost_;  // before the schedule and the exchange context, which use it
  std::map<double, std::unique_ptr<compress::Selector>> selectors_;
  BucketSchedule schedule_;
  LocalStageOptions local_options_;
  std::unique_ptr<RoutedLocalStage> local_;
  BlockExchange exchange_;
  ScatterStage scatter_;
  ExchangeContext ctx_;                                   // what the exchanges use (after what it refers to)
  std::deque<std::unique_ptr<BucketExchange>> inflight_;  // started in order, finished in order
  bool in_pump_ = false;
  std::function<void(const SparseStats&)> publish_;
  std::function<device::DeviceComm*()> device_comm_;
  int device_buckets_ = -1;       // -1: not agreed yet; 0: never; 1: device buckets run
  int device_hint_ = -1;          // the device communicator's device: where the resident stage is made
  int resident_everywhere_ = -1;  // -1: not agreed yet; else whether every rank has a resident stage
};

}  // namespace mgs
