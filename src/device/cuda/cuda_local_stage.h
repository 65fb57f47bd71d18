// The local stage on a CUDA device (core/local_stage.h has the contract;
// core/routed_local_stage.h routes buckets to it). For a sparse allgather
// bucket whose members are all CUDA tensors (f32, f16, bf16) on its device:
//   - the coordinator's stream waits for each member's ready event
//     (cudaStreamWaitEvent), one kernel fuses gradient * prescale + residual
//     into an acc slab in device memory, the GPU selector selects in place
//     and writes the block (count, values, indices, seal) on the device
//     (DeviceBucketEngine::enqueueLocal);
//   - then the block alone (16 + 8*cap bytes, not the gradient) and the
//     non-finite counts are copied to the host for the MPI exchange: one host
//     synchronisation per bucket, counted in cuda::hostSyncs().
// Residuals live in device memory, laid out like the bucket that last used
// them (as ResidualStore does on the host); committing makes the acc slab
// the residual. They reach the C ABI through ResidualStore::External.
//
// With NCCL the whole bucket runs as enqueued work instead (startBucket,
// "device buckets" in core/routed_local_stage.h): no host synchronisation per
// bucket, the verdict read from pinned memory once an event has passed.
//
// Ran on an H100 (2026-11-26): gpu/local_stage, gpu/multirank (P = 2..4 as
// threads), gpu/device_bucket (NCCL, np 1) and python.cuda_sparse.*; the
// routing and residual hand-over it takes part in are tested on the CPU with
// a stand-in resident stage (tests/unit/core/routed_stage_test.cc), the
// pipeline's side of device buckets likewise (device_bucket_test.cc);
// tests/gpu/local_stage_gpu_test.cc and device_bucket_gpu_test.cc are
// written for the first GPU.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/routed_local_stage.h"
#include "core/sparse_block.h"
#include "device_bucket.h"
#include "gpu_selector.h"

namespace mgs::cuda {

class CudaLocalStage final : public ResidentLocalStage {
 public:
  static Status create(const LocalStageOptions& options, int device, std::unique_ptr<CudaLocalStage>* out);
  ~CudaLocalStage() override;

  bool accepts(const LocalJob& job) const override;
  void run(const LocalJob& job, LocalOutcome* outcome) override;
  Status extract(LocalSlab& slab, const uint32_t* idx, size_t count, float* vals) override;
  void settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> slab, bool commit) override;
  void zeroResidual(const std::vector<Request>& members) override;
  Status readSlab(const LocalSlab& slab, float* dst) override;
  Status evict(const std::vector<Request>& members) override;
  Status evictAll() override;
  bool acceptsScatter(const std::vector<Request>& members) const override;
  // The P received blocks go to the device (P * (16 + 8*cap) bytes, not the
  // bucket) and DeviceBucketEngine::enqueueScatter writes the outputs; one
  // host sync for its verdict, which must agree with the host's validation.
  Status scatterBlocks(const std::vector<Request>& members, const char* recv, int P, size_t cap,
                       const std::vector<double>& factors) override;
  // The agreed exchange on the device (cuda_agreed.cc; never run on a GPU):
  // run() fuses into a device slab, and on the leader selects there and
  // copies only the count indices and values to the host; extract() sends
  // the count indices to the device and brings back their values; the
  // scatter sends the count indices and sums there and writes the outputs.
  // One host sync in each of the three (the contract is synchronous).
  Status scatterAgreed(const std::vector<Request>& members, const uint32_t* idx, const float* vals, size_t count,
                       const std::vector<double>& factors) override;

  // Device buckets (core/routed_local_stage.h): the local stage into a
  // device block, the NCCL allgather of the P fixed-capacity blocks on the
  // communicator's stream (ordered by events both ways), the scatter with
  // the verdict over every rank's header decided on the device, the verdict
  // words and this rank's non-finite counts copied to pinned memory, one
  // event recorded last. No host synchronisation once warm (counted in
  // hostSyncs()). A member this rank cannot serve (deviceBucketProblem)
  // sends a staging code instead of a selection; every rank then fails the
  // bucket naming the tensor, this rank and the cause.
  bool runsDeviceBuckets() const override { return true; }
  // The agreed exchange's device bucket too (dj.leader >= 0;
  // cuda_device_buckets.cc): the leader's block broadcast and the values'
  // allreduce on the communicator's stream, the verdict and the scatter on
  // the device. Written 2026-12-01 without a GPU: never run.
  bool runsAgreedDeviceBuckets() const override { return true; }
  // And the dense fallback's (dj.dense; cuda_device_buckets.cc): the fused
  // acc and the verdict slots in one NCCL allreduce, the verdict and the
  // outputs on the device, the residual +0. Written 2026-12-02 without a
  // GPU: never run.
  bool runsDenseDeviceBuckets() const override { return true; }
  // And the hierarchical exchange's (dj.hier; cuda_device_buckets.cc): the
  // slots and the node's sum, the leader's selection from it on the
  // device, the leaders' allgather and the node broadcast on communicators
  // split from the NCCL one (sharing its stream), the verdict and the
  // scatter on the device. Written 2026-12-02 without a GPU: never run.
  bool runsHierarchicalDeviceBuckets() const override { return true; }
  Status startBucket(const DeviceBucketJob& job, std::unique_ptr<PendingDeviceBucket>* out) override;
  // The GPU selector on calibration's synthetic gradient, in place, timed
  // with events on the engine's stream: median of 3 after a warm-up, per
  // size. One host sync per call (at the first bucket of CUDA tensors, not
  // in steady state). Written 2026-11-27 without a GPU: never run.
  Status timeSelection(const compress::Selector& cpu, const std::vector<size_t>& sizes,
                       std::vector<double>* seconds) override;
  // The NCCL communicator's allreduce, allgather and broadcast on two
  // device buffers from the pool (measureCollectives: blocking calls,
  // wall-clock medians). At the same bucket as timeSelection. Written
  // 2026-12-02 without a GPU: never run.
  Status timeCollectives(Communicator& comm, const CollectiveSizes& sizes, std::vector<double>* seconds) override;

  // ResidualStore::External (called with the store's lock held).
  bool holds(const std::string& name, size_t* n) const override;
  Status read(const std::string& name, float* dst, size_t n) const override;
  Status write(const std::string& name, const float* src, size_t n) override;
  void drop(const std::string& name) override;

  int device() const { return device_; }

 private:
  // A device buffer from the engine's pool, given back when the last slot
  // or slab referencing it goes (stream-ordered reuse: one stream).
  struct Buf {
    void* p = nullptr;
    size_t floats = 0;
  };
  using BufPtr = std::shared_ptr<Buf>;
  struct Slot {
    BufPtr buf;
    size_t offset = 0, n = 0;
    float* data() const { return static_cast<float*>(buf->p) + offset; }
  };
  struct Slab;
  class Pending;
  // Pinned host memory and an event, one per device bucket in flight,
  // recycled when its Pending goes (no cudaHostAlloc once warm).
  struct HostSlot {
    void* host = nullptr;  // pinned
    size_t bytes = 0;
    void* event = nullptr;  // cudaEvent_t recorded last on the engine's stream
  };
  Status takeSlot(size_t bytes, HostSlot* out);
  Status ensureBucketEvents();  // localDone_, ncclDone_
  // Both device buckets' checks and pending object, with its pinned slot
  // [failure header, seal | P headers | M + 1 local words (zeroed)].
  Status newPending(const DeviceBucketJob& dj, std::unique_ptr<Pending>* out);
  // This rank's local part of a device bucket with verdict slots (agreed,
  // dense, hierarchical): a member it cannot serve, or a local part that
  // failed to enqueue, becomes *hostSlot (and *failure, the header code of a
  // block it leads); else job's local part (into d_block where it selects)
  // and the fused acc in *d_acc, p's slab. Scratch goes to *scratch.
  Status slottedLocalPart(const DeviceBucketJob& dj, const LocalJob& job, void* d_block, Pending* p,
                          std::vector<void*>* scratch, uint32_t* hostSlot, uint64_t* failure, float** d_acc);
  // The last of a device bucket with a device scatter: the slot's event after it, *out takes p.
  Status handOver(std::unique_ptr<Pending> p, std::unique_ptr<PendingDeviceBucket>* out);
  // Whether this rank can serve a device bucket on comm_device; if not,
  // *cause and *bad name the member and *why is this rank's error.
  Status servesBucket(const std::vector<Request>& members, int comm_device, int* bad, block::StagingCause* cause,
                      Status* why) const;
  Status startAgreedBucket(const DeviceBucketJob& job, std::unique_ptr<PendingDeviceBucket>* out);
  Status startDenseBucket(const DeviceBucketJob& job, std::unique_ptr<PendingDeviceBucket>* out);
  Status startHierBucket(const DeviceBucketJob& job, std::unique_ptr<PendingDeviceBucket>* out);
  void giveSlot(const HostSlot& s) { slots_.push_back(s); }
  // The local part of a device bucket into d_block (runSparse without the
  // copy to the host); this rank's non-finite words go to `words` (pinned).
  Status enqueueLocalPart(const LocalJob& job, void* d_block, void* words, BufPtr* acc, std::vector<void*>* scratch);

  CudaLocalStage(const LocalStageOptions& options, int device) : opt_(options), device_(device) {}
  Status newBuf(size_t floats, BufPtr* out);
  // The members' residuals back to back on the device (the store's lock
  // held): the held slab itself when laid out like this bucket, else a new
  // one filled from the held slots, the host store (takeLocked) or zeros.
  Status contiguous(const std::vector<Request>& members, size_t n, float** out);
  Status selectorFor(const compress::Selector& cpu, const GpuSelector** out);
  Status evictLocked(const std::vector<std::string>& names);
  Status runSparse(const LocalJob& job, LocalOutcome* out, BufPtr* acc);
  Status runAgreed(const LocalJob& job, LocalOutcome* out, BufPtr* acc);
  // Word i of the engine's local words as copied to words_ (i < M: member
  // i's non-finite count; M: the selector's failure word).
  uint32_t localWord(size_t i) const {
    uint32_t w = 0;
    std::memcpy(&w, words_.data() + i * sizeof(uint32_t), sizeof w);
    return w;
  }
  // A selection whose header `h` is not a count: the outcome's status
  // (non-finite values in a member, or the selector's failure) and the
  // failure code the block carries.
  uint64_t failedSelection(const std::vector<Request>& members, const block::Header& h, size_t nf, size_t n,
                           LocalOutcome* out) const;
  // Members' output descriptors for the engine's scatters.
  static std::vector<BucketMember> outputMembers(const std::vector<Request>& members,
                                                 const std::vector<double>& factors);

  LocalStageOptions opt_;
  int device_;
  std::unique_ptr<DeviceBucketEngine> engine_;
  std::map<double, std::unique_ptr<GpuSelector>> selectors_;  // by density
  std::unordered_map<std::string, Slot> held_;                // residuals on the device
  std::vector<char> words_;                                   // host copy of the engine's local words
  std::vector<char> agreed_block_;                            // the agreed leader's block, host copy
  std::vector<BufPtr> dropped_;  // dropped by a framework thread; released by the coordinator (lock held)
  std::vector<HostSlot> slots_;  // free pinned slots of device buckets
  void* localDone_ = nullptr;    // cudaEvent_t: a device bucket's local part (the NCCL stream waits for it)
  void* ncclDone_ = nullptr;     // cudaEvent_t: its allgather (the engine's stream waits for it)
};

}  // namespace mgs::cuda
