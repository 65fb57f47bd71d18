// The sparse gradient pipeline: plan-driven buckets, selection with error
// feedback, sparse allgather, scatter-add (algorithms.md sections 5, 7-9).
//
// Everything here runs on the coordinator thread and sees the negotiated
// ready lists, which are identical on every rank; so step boundaries, the
// moment of (re)planning and bucket completion are decided identically
// everywhere without extra messages. Only the plan itself (computed on rank
// 0 from rank 0's recorded gradient timings) is broadcast.
//
// Steps: a step ends when a sparse tensor name is seen again. The first
// MGS_PROFILE_STEPS steps run layer-wise (one bucket per tensor) while rank 0
// records when each gradient was enqueued; then the cost model is resolved
// (calibration), the planner runs on rank 0 and the plan is broadcast. A
// tensor name the plan does not know drops the plan and starts a new
// profile. Residuals live per tensor (ResidualStore), so they survive this.
// With MGS_REPLAN_TOLERANCE > 0, rank 0 keeps recording the last
// MGS_PROFILE_STEPS steps, and every step boundary checks the plan's predicted
// step against the measured one (online_cost.h); a re-plan uses the recent
// steps' timings and the refitted cost model, with no layer-wise profile.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "compress/selector.h"
#include "core/online_cost.h"
#include "core/request.h"
#include "core/residual_store.h"
#include "core/timeline.h"
#include "plan/cost_model.h"

namespace mgs {

struct SparseStats {
  uint64_t steps = 0;          // completed steps
  uint64_t buckets = 0;        // buckets exchanged sparsely
  uint64_t agreed_buckets = 0;  // of those, by the agreed-index exchange (sparse_agreed.cc)
  uint64_t dense_buckets = 0;  // buckets the cost model sent dense
  uint64_t selected = 0;       // entries this rank sent
  uint64_t target = 0;         // k summed over sparse buckets
  uint64_t bytes_sent = 0;     // values + indices this rank sent (dense buckets: the payload)
  uint64_t dense_bytes = 0;    // what a dense allreduce would have sent
  uint64_t plan_buckets = 0;   // buckets in the current plan (0: profiling)
  uint64_t plans = 0;          // plans computed
};

class SparsePipeline {
 public:
  using Complete = std::function<void(Request& req, Status status)>;

  SparsePipeline(Communicator& comm, const Config& config, Timeline* timeline, ResidualStore& residuals,
                 Complete complete);
  Status init();
  // The cost model measured at init (MGS_CALIBRATION), identical on all ranks.
  void setCostModel(const plan::CostModel& cost) {
    cost_ = cost;
    have_cost_ = true;
  }

  // Whether a negotiated allreduce goes through this pipeline (same answer on
  // every rank: it depends only on negotiated fields and the configuration).
  bool eligible(const Signature& sig) const;
  // Ready sparse requests, in negotiated order. Completes handles of the
  // buckets that are complete; holds the others until their members arrive.
  void submit(std::vector<Request> reqs);
  // Called once per coordinator cycle with whether the negotiated ready list
  // was empty (identical on every rank). After about a second of empty cycles
  // in a row (idleFlushCycles), partially filled buckets run with what they
  // have: a tensor the framework never submits this step cannot hold the
  // others forever. A second, because a rank that merely lags behind must not
  // split buckets (seen with 100 ms on an oversubscribed host).
  void endCycle(bool nothing_ready);
  int idleFlushCycles() const;
  // Finish the buckets whose exchange has completed (called every cycle).
  void poll();
  // Finish every bucket in flight (before shutdown).
  void drain();
  // Fail everything held (shutdown).
  void failHeld(const Status& st);
  SparseStats stats() const { return stats_; }
  // Nothing held in a bucket and no exchange in flight.
  bool idle() const {
    if (!inflight_.empty()) return false;
    for (const auto& b : buckets_)
      if (!b.ready.empty()) return false;
    return true;
  }
  // Called with the statistics before a bucket's handles complete, so a
  // caller woken by them reads statistics that include that bucket.
  void setStatsSink(std::function<void(const SparseStats&)> publish) { publish_ = std::move(publish); }

 private:
  struct Bucket {
    std::vector<std::string> members;  // plan order
    std::map<std::string, Request> ready;
  };

  // "name" for one tensor, "bucket[first .. last] (n tensors)" otherwise.
  static std::string bucketName(const std::vector<Request>& members);
  void onStepBoundary();
  // Online re-planning (online_cost.h): the per-step check, collective.
  void checkPlan();
  void flushPartialBuckets();
  Status replan();
  void runBucket(std::vector<Request>& members);
  // *sent: every rank's acc went into the sum (then the residual is zero).
  Status exchangeDense(std::vector<Request>& members, size_t n, const Status& local, int bad_member, bool* sent);
  // The agreed-index exchange and the per-bucket choice (sparse_agreed.cc).
  unsigned allowedExchanges() const;  // plan::kExchange* bits from MGS_EXCHANGE, MGS_DENSE_FALLBACK
  plan::Exchange pickExchange(size_t n, double density) const;
  static size_t indexBlockBytes(size_t cap);
  // The leader of the agreed bucket `name` (bucketName): its name's hash
  // plus the times it was applied, mod P. A function of the bucket alone,
  // not of the order buckets are negotiated in (which timing decides), so
  // runs are reproducible bitwise; the same on every rank; rotating over
  // ranks step by step, and spread over ranks within a step. A bucket some
  // rank's flag stopped (a skipped loss-scaling step) does not count, so it
  // leaves the next leaders as it leaves the residuals.
  int agreedLeader(const std::string& name) const;
  // The agreed exchange's collective part; `acc` is the local stage's slab
  // (runBucket), committed as the residual only if every rank contributed.
  void runAgreed(std::vector<Request>& members, size_t n, size_t cap, int leader, size_t count, size_t k,
                 const Status& local, int bad_member, std::vector<char>&& block,
                 std::shared_ptr<std::vector<float>>&& acc);
  // Slots after the agreed exchange's values: ranks that failed, and of
  // those, failures other than a non-finite value. They give every rank the
  // same verdict inside the allreduce the exchange does anyway.
  static constexpr size_t kAgreedFlags = 2;
  // The error of an agreed bucket some rank failed, naming every failed rank
  // (a collective: every rank calls it after reading the same flags).
  Status agreedFailure(const std::vector<Request>& members, const Status& local, int bad_member);
  // A sparse bucket whose allgather is in flight.
  struct InFlight {
    std::vector<Request> members;
    size_t n = 0, cap = 1, count = 0, k = 0;
    Status local, start;
    bool skipped = false;                   // a non-finite step under MGS_NONFINITE=propagate
    bool delivered = false;                 // every rank scattered every rank's selection
    std::shared_ptr<std::vector<float>> acc;  // this step's residual, committed on success
    std::vector<char> send, recv;
    std::unique_ptr<PendingCollective> op;
    Clock::time_point started;
  };
  static constexpr size_t kMaxInFlight = 4;
  static size_t blockBytes(size_t cap);
  std::vector<char> takeBuffer(size_t bytes);
  void giveBuffer(std::vector<char>&& b);
  static uint64_t failureCode(int bad_member);
  void startSparse(std::vector<Request>& members, size_t n, size_t cap, size_t count, size_t k, const Status& local,
                   int bad_member, std::vector<char>&& block, std::shared_ptr<std::vector<float>>&& acc);

  // Non-finite gradients and the deferred residual commit (sparse_commit.cc).
  // A bucket computes acc = gradient + residual into a scratch slab, never
  // into the residual: the residual changes only when the bucket commits, so
  // a bucket that fails, or is skipped because some rank had NaN/Inf, leaves
  // every rank's residual bitwise as it was before the step.
  std::shared_ptr<std::vector<float>> takeSlab(size_t n);
  void giveSlab(std::shared_ptr<std::vector<float>>&& slab);
  // acc[0..n) = gradients (+ residual r, unless null), staging CUDA inputs.
  // *bad_member: the first member with a NaN/Inf in acc (or -1); *non_finite:
  // how many values of acc are NaN/Inf.
  Status fuseMembers(const std::vector<Request>& members, const float* r, float* acc, int* bad_member,
                     size_t* non_finite);
  Status nonFiniteStatus(const std::vector<Request>& members, int bad_member, size_t non_finite, size_t n) const;
  bool propagateNonFinite() const { return config_.nonfinite == "propagate"; }
  // The error of a bucket some rank failed: `failed` lists every rank's
  // failure (the same text on all ranks), `local` adds this rank's details.
  // "rank r: non-finite gradient in tensor 't'; rank q: ..." for each rank
  // whose code (a block header, failureCode) is above cap; sets
  // *other_error if some failure is not a non-finite value.
  std::string failedRanks(const uint64_t* codes, size_t cap, const std::vector<Request>& members,
                          bool* other_error) const;
  static Status failedVerdict(const std::string& what, const std::string& failed, bool other_error,
                              const Status& local);
  // Commit (success: acc becomes the members' residual) or drop acc.
  void settleResidual(const std::vector<Request>& members, std::shared_ptr<std::vector<float>>&& acc, bool commit);
  // The dense bucket's commit: everything was sent, the residual is zero.
  void zeroResidual(const std::vector<Request>& members);
  // Every member's output filled with NaN (the propagate verdict).
  Status writeNaNOutputs(const std::vector<Request>& members);
  void finishOldest();
  void publishStats();
  Status finishSparse(InFlight& f);
  double outputFactor(const Request& m) const;
  Status writeOutput(const Request& m, const float* src, size_t cnt);
  double currentDensity() const;
  const compress::Selector& selectorFor(double density);

  Communicator& comm_;
  const Config& config_;
  Timeline* timeline_;
  ResidualStore& residuals_;
  Complete complete_;
  int threads_;  // CPU threads for selection (MGS_THREADS resolved, common/threads.h)

  uint64_t step_ = 0;
  // Per agreed bucket (its bucketName): how many times it was applied.
  // Picks its next leader (agreedLeader).
  std::unordered_map<std::string, uint64_t> agreed_turns_;
  static constexpr size_t kMaxAgreedTurns = 1 << 16;
  int idle_cycles_ = 0;
  std::unordered_set<std::string> seen_;  // names seen in the current step
  uint64_t profile_start_ = 0;            // step at which the current profile began
  // Rank 0: enqueue time of each name, per profiled step.
  std::vector<std::vector<std::pair<std::string, Clock::time_point>>> profile_;
  std::unordered_map<std::string, int64_t> elements_;
  bool have_plan_ = false, plan_stale_ = false;
  std::unordered_map<std::string, size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  bool have_cost_ = false;
  plan::CostModel cost_;
  std::map<double, std::unique_ptr<compress::Selector>> selectors_;
  OnlineCost online_;

  // Reused buffers (no allocation in steady state).
  std::vector<float> out_;                  // dense/staged outputs
  std::vector<std::shared_ptr<std::vector<float>>> slabs_;  // scratch acc slabs for reuse
  std::deque<InFlight> inflight_;           // started in order, finished in order
  std::vector<std::vector<char>> pool_;     // exchange blocks for reuse
  std::vector<uint64_t> counts_, touched_;  // per-rank counts; bitmap of scaled entries (kept zero)
  std::vector<float*> dest_;                // per member: where its result goes
  std::vector<size_t> offsets_;             // member offsets in the bucket (M + 1)
  std::vector<char> workspace_, stage_;
  std::vector<float> agreed_vals_;          // agreed exchange: values (+ kAgreedFlags slots)
  SparseStats stats_;
  std::function<void(const SparseStats&)> publish_;
};

}  // namespace mgs
