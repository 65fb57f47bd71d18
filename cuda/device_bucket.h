// Device-resident sparse buckets: the CUDA local stage (fuse the members'
// gradients into an acc slab, select in place into a block) and the CUDA
// scatter (P received blocks -> the members' outputs), with zero host
// synchronisations on the enqueue path. Plain host header: no CUDA types
// (streams and events are void*), so src/core's stage interface can be
// adapted to it without nvcc.
//
// Ran on an H100 (gpu/bucket, 2026-11-26; compute-sanitizer memcheck clean). The pure
// parts (descriptors, block header encoding, verdict decoding) are compiled
// in every build and tested on the CPU (tests/gpu/device_bucket_plan_test.cc);
// the kernels are tested against the CPU reference only on a GPU
// (tests/gpu/bucket_gpu_test.cc, scripts/gpu_check.sh).
//
// Block layout: the allgather block of src/common/block_layout.h
//   [uint64 header | float values[cap] | uint32 indices[cap] | uint64 seal]
// header = the selected count (<= cap), or a failure code above any count;
// seal = header ^ block::kAllgatherSeal, so a short message is told from a
// whole block.
//
// One engine per device and coordinator: every call enqueues on the engine's
// stream, so stream order makes slab and buffer reuse safe without events.
// Thread-safety: coordinator thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/block_layout.h"
#include "common/status.h"
#include "mgs/mgs.h"

namespace mgs::cuda {

class GpuSelector;
class DeviceBucketEngine;

// ---- Block format: common/block_layout.h (block::allgatherBytes, the
// offsets, block::kAllgatherSeal, block::failureCode, block::isStagingCode),
// one definition for this engine, its kernels and the host exchange.

// ---- Members and their device descriptors ------------------------------------
// One tensor of a bucket, as the host knows it.
struct BucketMember {
  std::string name;              // for error messages
  const void* d_grad = nullptr;  // device gradient (f32, f16 or bf16)
  void* d_out = nullptr;         // device output, same dtype and count
  mgs_dtype_t dtype = MGS_FLOAT32;
  size_t count = 0;
  double prescale = 1.0;        // applied while fusing: acc = float(grad) * float(prescale) (+ residual)
  double outFactor = 1.0;       // applied once to every touched output entry (postscale, / P for average)
  void* readyEvent = nullptr;   // cudaEvent_t the framework recorded after producing d_grad, or null
  void* readyStream = nullptr;  // without an event: the framework's stream (recorded on, never synchronised)
};

// POD descriptors uploaded to the device (one array per call, one launch).
struct FuseDesc {
  const void* src;
  uint64_t offset;  // first element of this member in the bucket
  uint64_t count;
  float prescale;
  uint32_t dtype;  // mgs_dtype_t
};
struct OutDesc {
  void* dst;
  uint64_t offset;
  uint64_t count;
  float factor;
  uint32_t dtype;
};

// Checks dtypes (f32/f16/bf16), pointers and the bucket size (< 2^32, the
// indices are uint32), and lays the members out back to back. Errors name
// the member and the cause (kInvalidArgument).
Status buildFuseDescs(const std::vector<BucketMember>& members, std::vector<FuseDesc>* out, size_t* n);
Status buildOutDescs(const std::vector<BucketMember>& members, std::vector<OutDesc>* out, size_t* n);

// ---- Verdict of a scatter -----------------------------------------------------
// The scatter writes 2 + P uint64 words on the device; the host reads them
// later (asynchronous copy to pinned memory + an event it polls):
//   [0] kind (VerdictKind), [1] lowest rank whose block is malformed (UINT64_MAX: none),
//   [2 + r] rank r's header.
enum class VerdictKind : uint64_t { kOk = 0, kNaNWritten = 1, kFailed = 2, kMalformed = 3 };
inline size_t verdictWords(int P) { return 2 + static_cast<size_t>(P); }

struct BucketVerdict {
  VerdictKind kind = VerdictKind::kOk;
  int malformedRank = -1;
  // Per rank: -1 the block carries a count; -2 a failure without details or
  // a staging code (the raw header, words()[2 + r], names member and cause);
  // m >= 0 non-finite values in member m.
  std::vector<int> failure;
  bool committable() const { return kind == VerdictKind::kOk; }  // residuals may adopt the new slab
};
// Decodes and cross-checks the words (a kind that the headers do not imply is
// kInternal: the device and the host disagree).
Status decodeVerdict(const uint64_t* words, int P, size_t cap, size_t members, bool propagate, BucketVerdict* out);
// OK for kOk and kNaNWritten; otherwise the error every rank reports, naming
// the ranks and tensors (kNumeric for non-finite values under
// MGS_NONFINITE=error, kCommunication for a malformed block, kInternal for a
// failure without details).
Status verdictStatus(const BucketVerdict& v, const std::vector<BucketMember>& members, const std::string& bucket);

// ---- Host synchronisations ---------------------------------------------------
// Process-wide count of host synchronisations made by the device path: every
// cudaStreamSynchronize / cudaEventSynchronize / blocking copy in runtime
// code goes through syncStream/syncEvent/copyBlocking (cuda/host_sync.cc).
uint64_t hostSyncs();  // defined in CUDA builds only (cuda/host_sync.cc, library mgs_cuda)

// ---- Device slab pool --------------------------------------------------------
// Device buffers reused by best fit (as the CPU slab pool): cudaMalloc only
// when no pooled buffer fits (warm-up); steady state allocates nothing.
// Buffers are released to the pool in stream order (single stream).
class DeviceSlabPool {
 public:
  explicit DeviceSlabPool(int device) : device_(device) {}
  ~DeviceSlabPool();
  DeviceSlabPool(const DeviceSlabPool&) = delete;
  DeviceSlabPool& operator=(const DeviceSlabPool&) = delete;
  Status take(size_t bytes, void** out);                 // 256-byte aligned
  void give(void* p);                                    // p from take(); nullptr ignored
  uint64_t allocations() const { return allocations_; }  // cudaMalloc calls so far
  size_t pooled() const { return free_.size(); }

 private:
  struct Slab {
    void* p;
    size_t bytes;
  };
  int device_;
  std::vector<Slab> free_, used_;
  uint64_t allocations_ = 0;
};

// ---- The engine --------------------------------------------------------------
struct LocalStageArgs {
  const std::vector<BucketMember>* members = nullptr;
  const float* d_residual = nullptr;  // n floats, or nullptr (no error feedback / none yet)
  float* d_acc = nullptr;             // n floats: acc, then acc with the sent entries zeroed (the new residual)
  void* d_block = nullptr;            // block::allgatherBytes(cap) bytes, 8-byte aligned
  size_t cap = 0;                     // selector.maxCount(n)
  void* d_workspace = nullptr;        // selector.workspaceBytes(n), 256-byte aligned
  size_t workspaceBytes = 0;
  uint64_t step = 0;
  const char* name = "";
};

// The agreed exchange's device bucket (never run on a GPU).
struct AgreedGatherArgs {
  const void* d_block = nullptr;  // the leader's block, as broadcast (allgather layout)
  size_t cap = 0, n = 0;
  uint32_t members = 0;  // the bucket's member count
  int P = 1, rank = 0;
  bool lead = false;
  uint32_t hostSlot = 0;     // this rank's verdict slot found on the host (block::agreedSlot), or 0
  float* d_acc = nullptr;    // this rank's acc (non-leaders give up the agreed entries); null if hostSlot
  float* d_vals = nullptr;   // cap + P floats: the values, then one verdict slot per rank
  uint64_t* d_state = nullptr;  // one word: the block is malformed
};
struct AgreedFinishArgs {
  const std::vector<BucketMember>* members = nullptr;  // outputs to write; empty: the verdict only
  const void* d_block = nullptr;
  const float* d_vals = nullptr;  // summed over every rank
  const uint64_t* d_state = nullptr;
  size_t cap = 0, n = 0;
  uint32_t bucketMembers = 0;
  int P = 1, leader = 0;
  bool propagate = true;
};

// The dense fallback's device bucket (never run on a GPU).
struct DenseGatherArgs {
  float* d_acc = nullptr;  // this rank's acc (n floats; +0 afterwards); null if hostSlot
  size_t n = 0;
  uint32_t members = 0;  // the bucket's member count
  int P = 1, rank = 0;
  uint32_t hostSlot = 0;    // this rank's verdict slot found on the host (block::agreedSlot), or 0
  float* d_vals = nullptr;  // n + P floats: acc, then one verdict slot per rank
};
struct DenseFinishArgs {
  const std::vector<BucketMember>* members = nullptr;  // outputs to write; empty: the verdict only
  const float* d_vals = nullptr;                       // summed over every rank
  size_t n = 0;
  uint32_t bucketMembers = 0;
  int P = 1;
  bool propagate = true;
};

// The hierarchical exchange's device bucket (never run on a GPU).
struct HierFinishArgs {
  const std::vector<BucketMember>* members = nullptr;  // outputs to write; empty: the verdict only
  const void* d_recv = nullptr;                        // the nodes' blocks, node order
  int nodes = 1;
  const float* d_slots = nullptr;  // P verdict slots, summed over every rank
  int P = 1;
  size_t cap = 0, n = 0;
  uint32_t bucketMembers = 0;
  bool propagate = true;
};

struct ScatterArgs {
  const std::vector<BucketMember>* members = nullptr;
  const void* d_recv = nullptr;  // P blocks of block::allgatherBytes(cap), rank order
  int P = 1;
  size_t cap = 0;
  bool propagate = true;  // MGS_NONFINITE=propagate: non-finite failure codes -> NaN outputs
};

// A scatter's verdict on its way to the host. Must not outlive its engine.
class PendingVerdict {
 public:
  PendingVerdict() = default;
  ~PendingVerdict();
  PendingVerdict(PendingVerdict&&) noexcept;
  PendingVerdict& operator=(PendingVerdict&&) noexcept;
  // cudaEventQuery: no host sync. *done false: not yet.
  Status test(bool* done);
  // Blocks until the verdict is on the host (one counted host sync).
  Status wait();
  // The raw verdict words in pinned memory (verdictWords(P)), valid once
  // test() said done (or after an event recorded later on the same stream
  // has passed): [2 + r] is rank r's header.
  const uint64_t* words() const { return host_; }
  // After test() said done: the decoded verdict.
  Status verdict(BucketVerdict* out) const;

 private:
  friend class DeviceBucketEngine;
  void release();
  DeviceBucketEngine* owner_ = nullptr;  // gets the event and the pinned words back
  void* event_ = nullptr;                // cudaEvent_t recorded after the copy
  uint64_t* host_ = nullptr;             // pinned words (verdictWords(P) of them at least)
  size_t hostWords_ = 0;
  int P_ = 1;
  size_t cap_ = 0, members_ = 0;
  bool propagate_ = true;
};

class DeviceBucketEngine {
 public:
  // stream == nullptr: the engine creates its own non-blocking stream.
  static Status create(int device, void* stream, std::unique_ptr<DeviceBucketEngine>* out);
  ~DeviceBucketEngine();
  int device() const { return device_; }
  void* stream() const { return stream_; }
  DeviceSlabPool& pool() { return pool_; }

  // Local stage, all on stream(), no host sync: wait for every member's ready
  // event (cudaStreamWaitEvent), one fuse launch (acc = grad * prescale
  // (+ residual), non-finite counted per member), GpuSelector::enqueue in
  // place on d_acc writing the count into the block header, then one small
  // kernel that turns non-finite counts / the selector's failure into the
  // header's failure code and writes the seal.
  Status enqueueLocal(const GpuSelector& selector, const LocalStageArgs& a);
  // The agreed exchange's parts (never run on a GPU), all on stream(), no
  // host sync. enqueueFuse: enqueueLocal's fuse without selection or block
  // (a non-leader's accumulator; localWords() as after enqueueLocal, the
  // failure word 0). enqueueGatherZero: the leader's `count` distinct
  // indices (d_idx) leave d_acc into d_vals, +0 kept. enqueueAgreedScatter:
  // every output +0 but the summed values at the agreed indices, times the
  // member's outFactor (kernels::scatterAgreed).
  Status enqueueFuse(const LocalStageArgs& a);
  Status enqueueGatherZero(float* d_acc, const uint32_t* d_idx, size_t count, float* d_vals);
  Status enqueueAgreedScatter(const std::vector<BucketMember>& members, const uint32_t* d_idx, const float* d_vals,
                              size_t count);
  // The device words the last enqueueLocal wrote, valid until the next one
  // (stream order): one uint32 non-finite count per member, then the
  // selector's int32 failure word (0 or an mgs::Code).
  const void* localWords() const { return d_words_; }
  // Scatter, all on stream(), no host sync: validate the P blocks and decide
  // the verdict on the device, add rank by rank from +0 (bitwise the CPU's
  // order), scale each touched entry once and write the outputs (or NaN into
  // all of them under propagate when some rank sent a non-finite code); the
  // verdict words then travel to pinned host memory behind an event.
  Status enqueueScatter(const ScatterArgs& a, PendingVerdict* out);
  // The agreed exchange's device bucket (never run on a GPU), all on
  // stream(), no host sync. enqueueAgreedGather: after the leader's block
  // was broadcast, this rank's values at its indices and its verdict slot
  // into d_vals (kernels::agreedGather; the local words of the last
  // enqueueLocal/enqueueFuse). enqueueAgreedFinish: after d_vals was summed
  // over every rank, the verdict and the outputs on the device
  // (kernels::agreedScatter); the verdict words then travel to pinned host
  // memory behind an event, as enqueueScatter's.
  Status enqueueAgreedGather(const AgreedGatherArgs& a);
  Status enqueueAgreedFinish(const AgreedFinishArgs& a, PendingVerdict* out);
  // The dense fallback's device bucket (never run on a GPU), all on
  // stream(), no host sync. enqueueDenseGather: after the fuse, acc and
  // this rank's verdict slot into d_vals, acc +0 (kernels::denseGather; the
  // local words of the last enqueueLocal/enqueueFuse). enqueueDenseFinish:
  // after d_vals was summed over every rank, the verdict and the outputs
  // (kernels::denseScatter); the verdict words to pinned memory as
  // enqueueScatter's.
  Status enqueueDenseGather(const DenseGatherArgs& a);
  Status enqueueDenseFinish(const DenseFinishArgs& a, PendingVerdict* out);
  // The hierarchical exchange's device bucket (never run on a GPU), all on
  // stream(), no host sync. enqueueSelectGiven: the selection of a sum
  // already in a.d_acc (the node's, on its leader), in place, into a.d_block
  // (no fuse: a.members gives the member count only, their non-finite
  // counts are 0). enqueueHierFinish: after the node broadcast, the verdict
  // over the nodes' blocks and the slots and the outputs
  // (kernels::scatterHierarchical); verdictWords(nodes + P) words to pinned
  // memory as enqueueScatter's.
  Status enqueueSelectGiven(const GpuSelector& selector, const LocalStageArgs& a, size_t n);
  Status enqueueHierFinish(const HierFinishArgs& a, PendingVerdict* out);
  // Orders stream() after `event` (another stream's work, e.g. NCCL's).
  Status waitEvent(void* event);
  // Records a new cudaEvent_t on stream() into *event (caller destroys it with destroyEvent).
  Status recordEvent(void** event);
  static void destroyEvent(void* event);

 private:
  explicit DeviceBucketEngine(int device) : device_(device), pool_(device) {}
  // Descriptor upload from a pinned ring; a slot is reused only after its
  // event has passed (cudaEventQuery), else the ring grows (warm-up only).
  Status upload(const void* host, size_t bytes, void** d_out);
  Status waitReady(const std::vector<BucketMember>& members);
  // The three scatters' common part: the members' output descriptors
  // uploaded, scratch of sum (n floats; n = the members' count unless there
  // are none), touched (n bytes) and `words` verdict words, launch()
  // enqueueing the kernels (a cudaError_t as int); the scratch goes back at
  // once (stream order), *d_verdict keeps its verdict words' address.
  struct OutScratch {
    const OutDesc* d_out = nullptr;
    uint32_t members = 0;
    size_t n = 0, maxCount = 0;
    float* d_sum = nullptr;
    uint8_t* d_touched = nullptr;
    uint64_t* d_verdict = nullptr;
  };
  Status scatterInto(const std::vector<BucketMember>& members, size_t n, size_t words, const char* what,
                     const std::function<int(const OutScratch&)>& launch, uint64_t** d_verdict = nullptr);
  // The scatters' verdict words (verdictWords(P) at d_verdict) to pinned
  // memory behind an event (recycled).
  Status verdictToHost(const uint64_t* d_verdict, int P, size_t cap, size_t members, bool propagate,
                       PendingVerdict* out);
  // enqueueLocal's and enqueueFuse's common part: checks, the ready events,
  // the words, the fuse launch.
  Status fuseInto(const LocalStageArgs& a, size_t* n, uint32_t** d_nonfinite, int32_t** d_failure);
  // The words of M members (non-finite counts, then the failure word).
  Status ensureWords(uint32_t M, uint32_t** d_nonfinite, int32_t** d_failure);
  // enqueueLocal's and enqueueSelectGiven's selection of a.d_acc into a.d_block, and the seal.
  Status selectInto(const GpuSelector& selector, const LocalStageArgs& a, size_t n, const uint32_t* d_nonfinite,
                    int32_t* d_failure);

  int device_;
  bool ownStream_ = false;
  void* stream_ = nullptr;
  DeviceSlabPool pool_;
  struct Staging {
    void* host = nullptr;  // pinned
    void* dev = nullptr;   // device copy
    size_t bytes = 0;
    void* event = nullptr;  // recorded after the copy
  };
  std::vector<Staging> ring_;
  size_t next_ = 0;
  friend class PendingVerdict;
  struct VerdictSlot {
    void* event;
    uint64_t* host;
    size_t words;
  };
  std::vector<VerdictSlot> verdictFree_;  // recycled by ~PendingVerdict
  void* readyEvent_ = nullptr;            // recorded on a framework stream when a member has no event
  // Scratch of enqueueLocal/enqueueScatter (pooled, stream-ordered).
  void* d_words_ = nullptr;  // nonfinite counts + selector failure
  size_t wordsBytes_ = 0;
};

}  // namespace mgs::cuda
