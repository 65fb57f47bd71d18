// A sparse bucket's exchange as an object (docs/architecture.md "Extension
// points"). SparsePipeline (sparse_pipeline.h) runs the same steps for every
// bucket: it picks the exchange's registration (exchangeRegistry(), by the
// plan's plan::Exchange), which starts one BucketExchange; the pipeline keeps
// the started exchanges in a queue, moves them on, finishes them in order,
// publishes the statistics and completes the handles. Each exchange owns its
// buffers, its pending collectives and its phases:
//
//   exchange_allgather.cc     the fixed-block allgather (host blocks, MPI)
//   exchange_device.cc        the allgather of a device bucket (NCCL, enqueued)
//   exchange_agreed.cc        the agreed index broadcast + values' allreduce
//   exchange_hierarchical.cc  node sum, leaders' allgather, node broadcast
//   exchange_dense.cc         the dense fallback (one allreduce)
//
// Every rank starts the same exchange for a bucket at the same negotiated
// place and takes the same verdict from the same received bytes (a failure
// on one rank names that rank and tensor on every rank). Everything runs on
// the coordinator thread; ExchangeContext outlives every exchange.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "compress/selector.h"
#include "core/block_exchange.h"
#include "core/device.h"
#include "core/local_stage.h"
#include "core/online_cost.h"
#include "core/request.h"
#include "core/routed_local_stage.h"
#include "core/scatter_stage.h"
#include "core/sparse_stats.h"
#include "core/timeline.h"
#include "plan/cost_model.h"

namespace mgs {

// The hierarchical exchange's communicators (exchange_hierarchical.cc),
// made at init on every rank alike.
struct NodeGroups {
  std::unique_ptr<Communicator> node, leaders;  // leaders: node leaders only
  std::unique_ptr<Communicator> node_bcast;     // the node broadcast in flight (nonblocking backends)
  bool hierarchy = false;                       // at least 2 nodes, one of them with 2 or more ranks
  int nodes = 0, ranks_per_node = 1;
  int color = -1;                               // this rank's node as split() took it (the device split reuses it)
};
// Groups the ranks into nodes (MGS_NODE_SIZE, or by host name). Collective.
Status setupNodes(Communicator& comm, const Config& config, NodeGroups* g);
// The cost model's node and leader terms (CostModel::node, leader_allgather),
// measured and max-reduced over every rank. Collective; only with a hierarchy.
Status measureNodes(Communicator& comm, const NodeGroups& g, plan::CostModel* cost);

// What every exchange uses of the pipeline: owned by SparsePipeline.
struct ExchangeContext {
  ExchangeContext(Communicator& c, const Config& cfg, SparseStats& s, OnlineCost& o, BlockExchange& b, ScatterStage& sc)
      : comm(c), config(cfg), stats(s), online(o), blocks(b), scatter(sc) {}

  Communicator& comm;
  const Config& config;
  SparseStats& stats;
  OnlineCost& online;
  BlockExchange& blocks;
  ScatterStage& scatter;
  Timeline* timeline = nullptr;  // rank 0's, or null
  RoutedLocalStage* local = nullptr;
  std::function<const compress::Selector&(double density)> selector;
  std::function<uint64_t()> step;  // the schedule's step (the selector's seed)
  // Whether a bucket of CUDA tensors runs as a device bucket (the same
  // answer on every rank; SparsePipeline::deviceBucket) and the device
  // communicator it would use.
  std::function<bool(const std::vector<Request>&, const LocalJob&)> device_bucket;
  std::function<device::DeviceComm*()> device_comm;
  // Nonblocking backends only (null: phases run to their end at once): the
  // agreed values' allreduce, and the failure names of the agreed and
  // hierarchical exchanges. Phases started at different moments on
  // different ranks need a communicator of their own each, in bucket order.
  std::unique_ptr<Communicator> values_comm, names_comm;
  NodeGroups nodes;
  bool hierarchical_staged_warned = false;  // the warning that CUDA buckets are staged, once
  std::vector<uint64_t> counts;  // per-rank block headers (scratch)

  bool phasesInFlight() const { return values_comm != nullptr; }
  bool propagateNonFinite() const { return config.nonfinite == "propagate"; }
  void countPath(BucketPath p, uint64_t buckets, uint64_t bytes) {
    stats.path_buckets[static_cast<int>(p)] += buckets;
    stats.path_bytes[static_cast<int>(p)] += bytes;
  }
  // Per member, the factor each touched output entry gets
  // (ScatterStage::outputFactor): what a resident stage's scatter applies.
  std::vector<double> factors(const std::vector<Request>& members) const {
    std::vector<double> f(members.size());
    for (size_t i = 0; i < members.size(); ++i) f[i] = scatter.outputFactor(members[i]);
    return f;
  }
  // Where a bucket ran that the local stage served (not a device bucket).
  static BucketPath pathOf(const std::vector<Request>& members, const LocalOutcome& out);
  // The local stage for `job`, its FUSE and SELECT spans (from t0) and the
  // selection's time for the online cost model.
  void runLocal(const LocalJob& job, Clock::time_point t0, LocalOutcome* out);
  // Pooled float buffers (the agreed values, the hierarchical node sum).
  std::vector<float> takeVals(size_t n);
  void giveVals(std::vector<float>&& v) { vals_pool_.push_back(std::move(v)); }
  // The allgather of every rank's failure code that names the failed ranks
  // (failure paths only; names_comm in flight, in bucket order).
  Status startNames(const uint64_t* code, std::vector<uint64_t>* codes, std::unique_ptr<PendingCollective>* op);
  // "rank r: non-finite gradient in tensor 't'; rank q: ..." for each rank
  // whose code (block header with this cap) is a failure; sets *other_error
  // if some failure is not a non-finite value.
  std::string failedRanks(const uint64_t* codes, size_t cap, const std::vector<Request>& members,
                          bool* other_error) const;
  static Status failedVerdict(const std::string& what, const std::string& failed, bool other_error,
                              const Status& local);

 private:
  std::vector<std::vector<float>> vals_pool_;
};

// Per communicator, whether a bucket's next phase may start on it now: only
// once that communicator's phase started for every earlier bucket in flight
// (the same order on every rank). SparsePipeline::pumpInFlight passes one
// through the queue, oldest first. Keys are stable addresses naming a lane
// (the owning unique_ptr), not the communicators, which may be null.
class PhaseOrder {
 public:
  bool free(const void* lane) const;
  void block(const void* lane);

 private:
  std::vector<const void*> blocked_;
};

class BucketExchange {
 public:
  explicit BucketExchange(std::vector<Request>&& members) : members_(std::move(members)) {}
  virtual ~BucketExchange() = default;
  BucketExchange(const BucketExchange&) = delete;
  BucketExchange& operator=(const BucketExchange&) = delete;

  std::vector<Request>& members() { return members_; }
  // Its index in the plan that ran it (-1: none), the schedule's step and
  // when negotiation declared its last member ready on every rank: the
  // online check's per-bucket figures (OnlineCost::bucketFinished).
  void setPlanBucket(int index, uint64_t step, Clock::time_point declared) {
    plan_bucket_ = index;
    plan_step_ = step;
    plan_declared_ = declared;
  }
  int planBucket() const { return plan_bucket_; }
  uint64_t planStep() const { return plan_step_; }
  Clock::time_point planDeclared() const { return plan_declared_; }
  // Queued: finished in order by the pipeline's poll(); else start() ran it
  // to its end and the pipeline finishes it at once.
  virtual bool queued() const { return true; }
  // The queue's bound once this one joined: the oldest is finished while
  // more are in flight. Every kind counts in stats.in_flight_max.
  virtual size_t maxInFlight() const { return BlockExchange::kMaxInFlight; }
  // Phased exchanges are moved on by progress() (never waiting), from poll()
  // and from every blocking wait of the coordinator; the pipeline waits for
  // one by pumping every bucket. Others wait inside finish().
  virtual bool phased() const { return false; }
  virtual void progress(PhaseOrder& order) { (void)order; }
  // Whether finish() would return without waiting.
  virtual bool ready() = 0;
  // The verdict, the outputs, the residual's settlement (before the handles
  // complete: the next step may start) and the statistics; the members'
  // status. The pipeline then publishes the statistics, completes the
  // handles and calls release().
  virtual Status finish() = 0;
  // Buffers back to their pools.
  virtual void release() {}
  // After a fatal error, instead of finish(): a collective may still write
  // into the buffers (a peer may be gone), so they are leaked, never freed.
  virtual void abandon() {}

 protected:
  std::vector<Request> members_;
  int plan_bucket_ = -1;
  uint64_t plan_step_ = 0;
  Clock::time_point plan_declared_{};
};

// What the pipeline hands an exchange's start: the bucket, its members
// (moved into the exchange), the local stage not yet run.
struct BucketStart {
  std::vector<Request>& members;
  size_t n = 0;
  double density = 0;
  std::string name;      // bucketName(members)
  Clock::time_point t0;  // the bucket's start (the FUSE span)
};

// One registration per exchange. The pipeline takes the first entry whose
// exchange is the plan's and whose claims() (null: always) says yes, the
// same answer on every rank; start() runs the local stage and starts the
// collectives at the bucket's negotiated place.
struct ExchangeEntry {
  plan::Exchange exchange;
  const char* name;
  bool (*claims)(ExchangeContext& ctx, const BucketStart& b);
  std::unique_ptr<BucketExchange> (*start)(ExchangeContext& ctx, BucketStart& b);
};
const std::vector<ExchangeEntry>& exchangeRegistry();

}  // namespace mgs
