// The local stage the sparse pipeline runs (core/local_stage.h has the
// contract): it routes each bucket to the host stage (CpuLocalStage) or to a
// resident stage, one whose slabs and residuals live in memory of its own,
// a GPU's (the CUDA stage made by device::createLocalStage). A resident stage
// serves the buckets it accepts (every member a CUDA tensor on its device,
// the allgather or the agreed exchange) without the gradient crossing to the
// host: only the compact selection (and, for the agreed exchange, the agreed
// entries' values) does.
//
// One residual per tensor, wherever it lives. The resident stage registers
// as the ResidualStore's External holder, so mgs_residual_copy/restore reach
// residuals in device memory. A tensor's residual moves with its bucket:
//  - to the resident stage when a bucket it accepts first holds the tensor
//    (ResidualStore::takeLocked: the host copy is gone from then on);
//  - back to the host store (evict) before any other bucket holding that
//    tensor runs on the host stage: a dense bucket, the hierarchical
//    exchange, a bucket mixing host and device tensors.
// If handing a residual back fails, the bucket fails on this rank (a failure
// code in its block, or a failed local status for a dense bucket), so no rank
// commits it and the residual stays where it was.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/local_stage.h"
#include "core/residual_store.h"
#include "core/calibration.h"
#include "core/sparse_block.h"

namespace mgs {

// ---- Device buckets: the whole bucket as enqueued work (NCCL backend) -------
// When every member of an allgather bucket is a CUDA tensor (sig.on_cuda,
// negotiated) and CUDA tensors go through a device communicator (NCCL), the
// pipeline hands the whole bucket to the resident stage (startBucket): the
// local stage, the allgather of the fixed-capacity blocks on the device
// communicator's stream, the verdict (every rank reads all P headers on the
// device) and the scatter into the outputs are all enqueued, with no host
// synchronisation; the pipeline polls PendingDeviceBucket::test (an event
// query) and reads the verdict from pinned host memory once it is done.

// The agreed exchange's device bucket (leader >= 0; exchange_device.cc):
// every rank fuses, the leader selects into a device block of the
// allgather layout, the device communicator broadcasts that block from the
// leader, every rank takes its acc's values at the leader's indices (+0
// left in the slab; the leader's are the block's), and one allreduce sums
// [cap values | one verdict slot per rank] (block::agreedSlot). The verdict
// over the leader's block and the P slots, and the scatter (every output
// +0 but the sums at the agreed indices, times the member's factor), run on
// the device too.
//
// The dense fallback's device bucket (dense; exchange_device.cc): every
// rank fuses (no selection), and one allreduce sums [acc (n) | one verdict
// slot per rank]; the verdict over the P slots and the outputs (every entry
// the sum times the member's factor, converted) run on the device. The slab
// the pending bucket hands back is +0 everywhere: all of acc was sent.
//
// The hierarchical exchange's device bucket (hier; exchange_device.cc), for
// nodes of several ranks, every rank in this order on the device
// communicators:
//   1. fuse (no selection) into acc; this rank's verdict slot (as the
//      agreed exchange's: 0, or its staging or non-finite failure, its acc
//      then sent as zeros) into P slots summed by one allreduce on `comm`;
//   2. acc summed inside the node (an allreduce on node_comm); the slab a
//      non-leader hands back is +0 (all of its acc went into the sum);
//   3. the node's leader (node_comm rank 0) selects from the node's sum
//      into a block of the allgather layout (a failure code where the
//      selection fails, e.g. a non-finite sum); its slab is the sum with the
//      selected entries +0;
//   4. the leaders allgather their blocks (leader_comm: one block per node,
//      node order);
//   5. the leader broadcasts the `nodes` blocks inside its node (node_comm);
//   6. the verdict over the P slots and the node blocks, and the scatter of
//      the node blocks (node order, from +0, each touched entry times the
//      factor), as the allgather's device bucket decides it.
struct DeviceBucketJob {
  const LocalJob* job = nullptr;  // an allgather job; job->block is null (the block lives on the device)
  int leader = -1;                // >= 0: the agreed exchange with this leader (job->select only on it)
  bool dense = false;             // the dense fallback (leader -1, job->select false)
  bool hier = false;              // the hierarchical exchange (job->select on the node's leader only)
  Communicator* node_comm = nullptr;    // hier: this rank's node
  Communicator* leader_comm = nullptr;  // hier: the nodes' leaders; null on the other ranks
  int nodes = 0;                        // hier: how many nodes (leader_comm's size)
  Communicator* comm = nullptr;   // the device communicator: allgather on device pointers, on comm_stream
  void* comm_stream = nullptr;    // cudaStream_t its collectives run on
  int comm_device = -1;           // its CUDA device: every member's input and output must be there
  std::vector<double> factors;    // per member: the factor each touched output entry gets (ScatterStage::outputFactor)
  bool propagate = false;         // MGS_NONFINITE=propagate: non-finite codes write NaN into every output
};

// What a finished device bucket tells the host (read from pinned memory the
// device wrote).
struct DeviceBucketResult {
  // Every rank's block header, rank order (the same bytes on every rank).
  // The agreed exchange: every rank's verdict slot as a header (the
  // leader's count for a rank that contributed, else its failure code).
  // The dense fallback and the hierarchical exchange: 0 for a rank that
  // contributed, else its failure code.
  std::vector<uint64_t> headers;
  // The hierarchical exchange: every node's block header, node order
  // (malformed_rank then names a node).
  std::vector<uint64_t> node_headers;
  int malformed_rank = -1;  // the lowest rank whose block is malformed (agreed: the leader's), or -1
  bool written = false;           // the outputs hold the sum (every rank's selection applied)
  bool nan_written = false;       // propagate: NaN in every output (some rank had non-finite values)
  // This rank's local part, as LocalOutcome has it (count: the agreed
  // exchange's is the leader's, the entries every rank applies).
  Status local;
  int bad_member = -1;
  size_t non_finite = 0, count = 0, k = 0;
};

class PendingDeviceBucket {
 public:
  virtual ~PendingDeviceBucket() = default;
  // *done once every enqueued part has completed. No host synchronisation:
  // an event query, plus the device communicator's own poll (its async
  // errors and deadline: an error here means the exchange was aborted).
  virtual Status test(bool* done) = 0;
  // Blocks until done (drain at shutdown): a counted host synchronisation.
  virtual Status wait() = 0;
  // After done: what the device decided, and this rank's local part.
  virtual Status result(DeviceBucketResult* out) = 0;
  // The bucket's acc slab (acc with the sent entries +0): the pipeline
  // settles it (commit exactly when the result says written).
  virtual std::unique_ptr<LocalSlab> takeSlab() = 0;
};

// Whether `members` can run as a device bucket on CUDA device `device`
// (the device communicator's): every input a CUDA tensor there with data,
// of f32/f16/bf16; every output a CUDA tensor there of the input's size and
// a float dtype. kNone, or the first member that cannot and why (*member).
// Pure; the CUDA stage checks every bucket with it before enqueuing, and a
// rank that finds a cause sends block::stagingCode(member, cause) instead of
// a selection, so every rank fails the bucket naming the tensor and cause.
block::StagingCause deviceBucketProblem(const std::vector<Request>& members, int device, int* member);

class ResidentLocalStage : public LocalStage, public ResidualStore::External {
 public:
  // Whether `job` runs here. Pure: the same answer for the same job.
  virtual bool accepts(const LocalJob& job) const = 0;
  // Hand the residuals of `members` that are held here to the ResidualStore
  // (putLocked) and forget them here. Takes the store's lock.
  virtual Status evict(const std::vector<Request>& members) = 0;
  // The same for every residual held here (at shutdown: residuals stay
  // readable through the C ABI after the pipeline is gone).
  virtual Status evictAll() = 0;
  // Whether scatterBlocks can write these members' outputs (e.g. all CUDA
  // tensors on this stage's device). Pure.
  virtual bool acceptsScatter(const std::vector<Request>& members) const = 0;
  // The allgather's scatter into the outputs, in this stage's memory: `recv`
  // holds the P received blocks of capacity `cap` in rank order (host memory,
  // validated: every header a count); member m's output gets the sum over
  // ranks from +0, in rank order, of the values at its indices, each touched
  // entry scaled once by factors[m], every other entry +0: bitwise what
  // ScatterStage::scatterBlocks writes. Synchronous: the outputs are final
  // when it returns.
  virtual Status scatterBlocks(const std::vector<Request>& members, const char* recv, int P, size_t cap,
                               const std::vector<double>& factors) = 0;
  // The agreed exchange's scatter, in this stage's memory: `idx` holds
  // `count` distinct indices (validated, < n) and `vals` their sums over
  // every rank (host memory); member m's output is +0 everywhere but
  // vals[j] * float(factors[m]) at idx[j] (an assignment: a summed -0 stays
  // -0; factor 1 leaves the value as it is): bitwise what
  // ScatterStage::scatterAgreed writes. Synchronous.
  virtual Status scatterAgreed(const std::vector<Request>& members, const uint32_t* idx, const float* vals,
                               size_t count, const std::vector<double>& factors) {
    (void)members;
    (void)idx;
    (void)vals;
    (void)count;
    (void)factors;
    return Status(Code::kUnsupported, "this local stage has no agreed scatter");
  }

  // Seconds of one selection of n elements by this stage, for each n in
  // `sizes` (fused gradient in its memory, `cpu`'s selector and density): the
  // calibration's selection term for the buckets that run here. Blocking;
  // asked once per job, at its first bucket of device tensors.
  virtual Status timeSelection(const compress::Selector& cpu, const std::vector<size_t>& sizes,
                               std::vector<double>* seconds) {
    (void)cpu;
    (void)sizes;
    (void)seconds;
    return Status(Code::kUnsupported, "this local stage does not time its selection");
  }

  // The device communicator's collectives (NCCL), timed on this stage's
  // memory at `sizes` (measureCollectives' order and rule): the first
  // device bucket's calibration (MGS_CALIBRATION=auto), so that the cost
  // model prices the collectives device buckets run. Collective over
  // `comm` (every rank of it calls this at the same bucket).
  virtual Status timeCollectives(Communicator& comm, const CollectiveSizes& sizes, std::vector<double>* seconds) {
    (void)comm;
    (void)sizes;
    (void)seconds;
    return Status(Code::kUnsupported, "this local stage does not time the device communicator");
  }

  // Whether startBucket is implemented (the CUDA stage on the NCCL backend),
  // and whether it also takes the agreed exchange's jobs (leader >= 0), the
  // dense fallback's (dense) and the hierarchical exchange's (hier).
  virtual bool runsDeviceBuckets() const { return false; }
  virtual bool runsAgreedDeviceBuckets() const { return false; }
  virtual bool runsDenseDeviceBuckets() const { return false; }
  virtual bool runsHierarchicalDeviceBuckets() const { return false; }
  // Enqueues the whole bucket (see DeviceBucketJob). Returning OK means this
  // rank's block (a selection, a non-finite code or a staging code) goes into
  // the exchange: a member it cannot serve (deviceBucketProblem) does not
  // stop it. An error means this rank could not enqueue its part of the
  // collective (the device communicator then fails the peers at its deadline).
  // *out->takeSlab() is null when nothing was fused.
  virtual Status startBucket(const DeviceBucketJob& job, std::unique_ptr<PendingDeviceBucket>* out) {
    (void)job;
    (void)out;
    return Status(Code::kUnsupported, "this local stage does not run device buckets");
  }
};

// Asked for a job while no resident stage exists: OK with *out null when
// the job is not for one (host tensors); OK with a stage; or the reason none
// can exist here, after which it is not asked again.
using ResidentFactory = std::function<Status(const LocalJob& job, std::unique_ptr<ResidentLocalStage>* out)>;

class RoutedLocalStage final : public LocalStage {
 public:
  RoutedLocalStage(const LocalStageOptions& options, std::unique_ptr<LocalStage> host, ResidentFactory factory);
  ~RoutedLocalStage() override;
  RoutedLocalStage(const RoutedLocalStage&) = delete;
  RoutedLocalStage& operator=(const RoutedLocalStage&) = delete;

  void run(const LocalJob& job, LocalOutcome* outcome) override;
  Status extract(LocalSlab& slab, const uint32_t* idx, size_t count, float* vals) override;
  void settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> slab, bool commit) override;
  void zeroResidual(const std::vector<Request>& members) override;
  Status readSlab(const LocalSlab& slab, float* dst) override;

  // Device buckets. prepareDevice makes the resident stage if none exists yet
  // (the factory, with `job`) and says whether it runs device buckets.
  bool prepareDevice(const LocalJob& job);
  // Makes the resident stage if none exists yet; whether there is one.
  bool prepareResident(const LocalJob& job) {
    makeResident(job);
    return resident_ != nullptr;
  }
  // The resident stage's startBucket; the slab is wrapped for settle().
  // Residuals of these members stay (or move) where the resident stage
  // keeps them.
  Status startBucket(const DeviceBucketJob& job, std::unique_ptr<PendingDeviceBucket>* out);
  uint64_t deviceBuckets() const { return device_runs_; }
  // The resident stage's timeSelection (made with `job` if none exists yet);
  // kUnsupported when there is none or it does not take `job`.
  Status timeResidentSelection(const LocalJob& job, const std::vector<size_t>& sizes, std::vector<double>* seconds);

  // The resident stage, once made (tests, statistics); null before.
  ResidentLocalStage* resident() const { return resident_.get(); }
  // Buckets each stage ran so far.
  uint64_t residentBuckets() const { return resident_runs_; }
  uint64_t hostBuckets() const { return host_runs_; }

 private:
  struct Slab;
  LocalStageOptions opt_;
  std::unique_ptr<LocalStage> host_;
  ResidentFactory factory_;
  bool factory_done_ = false;
  std::unique_ptr<ResidentLocalStage> resident_;
  uint64_t resident_runs_ = 0, host_runs_ = 0, device_runs_ = 0;
  void makeResident(const LocalJob& job);
};

}  // namespace mgs
