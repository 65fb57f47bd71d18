// DeviceBucketEngine and DeviceSlabPool (device_bucket.h): the host side of
// the device-resident bucket. Everything here only enqueues on the engine's
// stream: no cudaStreamSynchronize, no blocking copy, no cudaMalloc once warm.
// Ran on an H100 (tests/gpu/bucket_gpu_test.cc, 2026-11-26).
#include "device_bucket.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include <cuda_runtime_api.h>

#include "bucket_kernels.h"
#include "common/check.h"
#include "common/cuda_check.h"
#include "gpu_selector.h"
#include "host_sync.h"

namespace mgs::cuda {
namespace {

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }
constexpr size_t kAlign = 256;
size_t alignUp(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

// cudaEventQuery without blocking: 1 passed, 0 not yet; errors through the macro.
Status eventPassed(void* event, bool* passed) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) {
    *passed = false;
    return Status::OK();
  }
  MGS_CUDA_CHECK(e);
  *passed = true;
  return Status::OK();
}

size_t maxCountOf(const std::vector<BucketMember>& members) {
  size_t m = 0;
  for (const auto& b : members) m = std::max(m, b.count);
  return m;
}

}  // namespace

// ---- DeviceSlabPool ----------------------------------------------------------

DeviceSlabPool::~DeviceSlabPool() {
  if (free_.empty() && used_.empty()) return;
  (void)cudaSetDevice(device_);
  for (auto& s : free_) (void)cudaFree(s.p);
  for (auto& s : used_) (void)cudaFree(s.p);
}

Status DeviceSlabPool::take(size_t bytes, void** out) {
  bytes = alignUp(std::max<size_t>(bytes, 1));
  // Best fit, but not more than twice too big (as the CPU slab pool).
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i) {
    const size_t b = free_[i].bytes;
    if (b >= bytes && b <= 2 * bytes + 4096 && (best == free_.size() || b < free_[best].bytes)) best = i;
  }
  if (best == free_.size()) {
    MGS_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    MGS_CUDA_CHECK(cudaMalloc(&p, bytes));  // warm-up only: steady state reuses
    ++allocations_;
    used_.push_back(Slab{p, bytes});
  } else {
    used_.push_back(free_[best]);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
  }
  *out = used_.back().p;
  return Status::OK();
}

void DeviceSlabPool::give(void* p) {
  if (!p) return;
  for (size_t i = 0; i < used_.size(); ++i) {
    if (used_[i].p != p) continue;
    free_.push_back(used_[i]);
    used_.erase(used_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

// ---- PendingVerdict ------------------------------------------------------------

PendingVerdict::~PendingVerdict() { release(); }

PendingVerdict::PendingVerdict(PendingVerdict&& o) noexcept { *this = std::move(o); }

PendingVerdict& PendingVerdict::operator=(PendingVerdict&& o) noexcept {
  if (this == &o) return *this;
  release();
  owner_ = o.owner_;
  event_ = o.event_;
  host_ = o.host_;
  hostWords_ = o.hostWords_;
  P_ = o.P_;
  cap_ = o.cap_;
  members_ = o.members_;
  propagate_ = o.propagate_;
  o.owner_ = nullptr;
  o.event_ = nullptr;
  o.host_ = nullptr;
  return *this;
}

void PendingVerdict::release() {
  if (owner_ && event_) owner_->verdictFree_.push_back({event_, host_, hostWords_});
  owner_ = nullptr;
  event_ = nullptr;
  host_ = nullptr;
}

Status PendingVerdict::test(bool* done) {
  MGS_ENSURE(event_ != nullptr, kInvalidArgument, "PendingVerdict: no scatter was enqueued");
  return eventPassed(event_, done);
}

Status PendingVerdict::wait() {
  MGS_ENSURE(event_ != nullptr, kInvalidArgument, "PendingVerdict: no scatter was enqueued");
  return syncEvent(event_);
}

Status PendingVerdict::verdict(BucketVerdict* out) const {
  MGS_ENSURE(host_ != nullptr, kInvalidArgument, "PendingVerdict: no scatter was enqueued");
  return decodeVerdict(host_, P_, cap_, members_, propagate_, out);
}

// ---- DeviceBucketEngine ----------------------------------------------------------

Status DeviceBucketEngine::create(int device, void* stream, std::unique_ptr<DeviceBucketEngine>* out) {
  MGS_CUDA_CHECK(cudaSetDevice(device));
  std::unique_ptr<DeviceBucketEngine> e(new DeviceBucketEngine(device));
  if (stream) {
    e->stream_ = stream;
  } else {
    cudaStream_t s = nullptr;
    MGS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    e->stream_ = s;
    e->ownStream_ = true;
  }
  cudaEvent_t ev = nullptr;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  e->readyEvent_ = ev;
  *out = std::move(e);
  return Status::OK();
}

DeviceBucketEngine::~DeviceBucketEngine() {
  (void)cudaSetDevice(device_);
  // Teardown waits for the work in flight before freeing what it uses
  // (not steady state: not counted in hostSyncs).
  if (stream_) (void)cudaStreamSynchronize(asStream(stream_));
  for (auto& s : ring_) {
    (void)cudaFreeHost(s.host);
    (void)cudaFree(s.dev);
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(s.event));
  }
  for (auto& v : verdictFree_) {
    (void)cudaFreeHost(v.host);
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(v.event));
  }
  if (readyEvent_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(readyEvent_));
  pool_.give(d_words_);
  if (ownStream_) (void)cudaStreamDestroy(asStream(stream_));
}

Status DeviceBucketEngine::upload(const void* host, size_t bytes, void** d_out) {
  // A free slot: its last copy has left the pinned buffer (event passed).
  // The device side is reused in stream order. Not found: a new slot.
  size_t pick = ring_.size();
  for (size_t t = 0; t < ring_.size() && pick == ring_.size(); ++t) {
    const size_t i = (next_ + t) % ring_.size();
    bool passed = false;
    MGS_RETURN_IF_ERROR(eventPassed(ring_[i].event, &passed));
    if (passed) pick = i;
  }
  if (pick == ring_.size()) {
    Staging s;
    cudaEvent_t ev = nullptr;
    MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    s.event = ev;
    ring_.push_back(s);
  }
  Staging& s = ring_[pick];
  if (s.bytes < bytes) {  // warm-up (or a bigger bucket): grow this slot
    if (s.host) MGS_CUDA_CHECK(cudaFreeHost(s.host));
    if (s.dev) MGS_CUDA_CHECK(cudaFree(s.dev));
    s.host = s.dev = nullptr;
    s.bytes = 0;
    const size_t nb = alignUp(bytes);
    MGS_CUDA_CHECK(cudaHostAlloc(&s.host, nb, cudaHostAllocDefault));
    MGS_CUDA_CHECK(cudaMalloc(&s.dev, nb));
    s.bytes = nb;
  }
  std::memcpy(s.host, host, bytes);
  MGS_CUDA_CHECK(cudaMemcpyAsync(s.dev, s.host, bytes, cudaMemcpyHostToDevice, asStream(stream_)));
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(s.event), asStream(stream_)));
  next_ = (pick + 1) % ring_.size();
  *d_out = s.dev;
  return Status::OK();
}

Status DeviceBucketEngine::waitReady(const std::vector<BucketMember>& members) {
  const void* last = nullptr;
  for (const auto& m : members) {
    if (m.readyEvent) {
      if (m.readyEvent == last) continue;
      MGS_CUDA_CHECK(cudaStreamWaitEvent(asStream(stream_), static_cast<cudaEvent_t>(m.readyEvent), 0));
      last = m.readyEvent;
    } else {
      // No event: what the framework's stream has enqueued so far (recorded
      // now, waited for on the device; the host does not wait).
      MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(readyEvent_), asStream(m.readyStream)));
      MGS_CUDA_CHECK(cudaStreamWaitEvent(asStream(stream_), static_cast<cudaEvent_t>(readyEvent_), 0));
      last = nullptr;
    }
  }
  return Status::OK();
}

Status DeviceBucketEngine::waitEvent(void* event) {
  MGS_ENSURE(event != nullptr, kInvalidArgument, "DeviceBucketEngine::waitEvent: null event");
  MGS_CUDA_CHECK(cudaStreamWaitEvent(asStream(stream_), static_cast<cudaEvent_t>(event), 0));
  return Status::OK();
}

Status DeviceBucketEngine::recordEvent(void** event) {
  cudaEvent_t ev = nullptr;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const cudaError_t e = cudaEventRecord(ev, asStream(stream_));
  if (e != cudaSuccess) (void)cudaEventDestroy(ev);
  MGS_CUDA_CHECK(e);
  *event = ev;
  return Status::OK();
}

void DeviceBucketEngine::destroyEvent(void* event) {
  if (event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

Status DeviceBucketEngine::fuseInto(const LocalStageArgs& a, size_t* n, uint32_t** d_nonfinite, int32_t** d_failure) {
  MGS_ENSURE(a.members != nullptr, kInvalidArgument, "device local stage of " << a.name << ": no members");
  std::vector<FuseDesc> descs;
  MGS_RETURN_IF_ERROR(buildFuseDescs(*a.members, &descs, n));
  MGS_ENSURE(*n == 0 || a.d_acc != nullptr, kInvalidArgument, "device local stage of " << a.name << ": no acc slab");
  MGS_ENSURE(a.d_residual == nullptr || a.d_residual != a.d_acc, kInvalidArgument,
             "device local stage of " << a.name << ": the acc slab aliases the residual (the residual must stay "
                                      << "intact until the verdict)");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  MGS_RETURN_IF_ERROR(waitReady(*a.members));
  const uint32_t M = static_cast<uint32_t>(descs.size());
  MGS_RETURN_IF_ERROR(ensureWords(M, d_nonfinite, d_failure));
  void* d_descs = nullptr;
  if (M) MGS_RETURN_IF_ERROR(upload(descs.data(), descs.size() * sizeof(FuseDesc), &d_descs));
  MGS_CUDA_CHECK(kernels::fuseMembers(static_cast<const FuseDesc*>(d_descs), M, maxCountOf(*a.members), a.d_residual,
                                      a.d_acc, *d_nonfinite, stream_));
  return Status::OK();
}

Status DeviceBucketEngine::ensureWords(uint32_t M, uint32_t** d_nonfinite, int32_t** d_failure) {
  // Non-finite counts (M words) and the selector's failure word.
  const size_t wb = alignUp((M + 1) * sizeof(uint32_t));
  if (wordsBytes_ < wb) {
    pool_.give(d_words_);  // stream order: its last users were enqueued before any new one
    d_words_ = nullptr;
    wordsBytes_ = 0;
    MGS_RETURN_IF_ERROR(pool_.take(wb, &d_words_));
    wordsBytes_ = wb;
  }
  *d_nonfinite = static_cast<uint32_t*>(d_words_);
  *d_failure = reinterpret_cast<int32_t*>(*d_nonfinite + M);
  return Status::OK();
}

Status DeviceBucketEngine::enqueueLocal(const GpuSelector& selector, const LocalStageArgs& a) {
  MGS_ENSURE(a.d_block != nullptr && reinterpret_cast<uintptr_t>(a.d_block) % 8 == 0, kInvalidArgument,
             "device local stage of " << a.name << ": the block is null or not 8-byte aligned");
  size_t n = 0;
  uint32_t* d_nonfinite = nullptr;
  int32_t* d_failure = nullptr;
  MGS_RETURN_IF_ERROR(fuseInto(a, &n, &d_nonfinite, &d_failure));
  return selectInto(selector, a, n, d_nonfinite, d_failure);
}

Status DeviceBucketEngine::enqueueSelectGiven(const GpuSelector& selector, const LocalStageArgs& a, size_t n) {
  MGS_ENSURE(a.members != nullptr && a.d_acc != nullptr, kInvalidArgument,
             "device selection of " << a.name << ": no members or no sum");
  MGS_ENSURE(a.d_block != nullptr && reinterpret_cast<uintptr_t>(a.d_block) % 8 == 0, kInvalidArgument,
             "device selection of " << a.name << ": the block is null or not 8-byte aligned");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  const uint32_t M = static_cast<uint32_t>(a.members->size());
  uint32_t* d_nonfinite = nullptr;
  int32_t* d_failure = nullptr;
  MGS_RETURN_IF_ERROR(ensureWords(M, &d_nonfinite, &d_failure));
  MGS_CUDA_CHECK(cudaMemsetAsync(d_nonfinite, 0, (M + 1) * sizeof(uint32_t), asStream(stream_)));  // nothing fused
  return selectInto(selector, a, n, d_nonfinite, d_failure);
}

Status DeviceBucketEngine::selectInto(const GpuSelector& selector, const LocalStageArgs& a, size_t n,
                                      const uint32_t* d_nonfinite, int32_t* d_failure) {
  const size_t need = selector.maxCount(n);
  MGS_ENSURE(a.cap >= need, kInvalidArgument,
             "device local stage of " << a.name << ": block capacity " << a.cap << " < the selector's bound " << need);
  MGS_CUDA_CHECK(kernels::clearHeader(a.d_block, stream_));
  char* block = static_cast<char*>(a.d_block);
  compress::SelectArgs s;
  s.x = nullptr;  // in place: d_acc already holds acc
  s.dtype = MGS_FLOAT32;
  s.residual = a.d_acc;
  s.n = n;
  s.outValues = reinterpret_cast<float*>(block + block::valuesOffset());
  s.outIndices = reinterpret_cast<uint32_t*>(block + block::indicesOffset(a.cap));
  s.workspace = a.d_workspace;
  s.workspaceBytes = a.workspaceBytes;
  s.step = a.step;
  s.name = a.name;
  // The count lands in the header's low word (zeroed above, little-endian).
  MGS_RETURN_IF_ERROR(
      selector.enqueue(s, DeviceSelectOutputs{reinterpret_cast<uint32_t*>(block), d_failure, nullptr}, stream_));
  MGS_CUDA_CHECK(kernels::sealBlock(a.d_block, a.cap, d_nonfinite, static_cast<uint32_t>(a.members->size()), d_failure,
                                    stream_));
  return Status::OK();
}

Status DeviceBucketEngine::enqueueFuse(const LocalStageArgs& a) {
  size_t n = 0;
  uint32_t* d_nonfinite = nullptr;
  int32_t* d_failure = nullptr;
  MGS_RETURN_IF_ERROR(fuseInto(a, &n, &d_nonfinite, &d_failure));
  MGS_CUDA_CHECK(cudaMemsetAsync(d_failure, 0, sizeof(int32_t), asStream(stream_)));  // no selector ran
  return Status::OK();
}

Status DeviceBucketEngine::enqueueGatherZero(float* d_acc, const uint32_t* d_idx, size_t count, float* d_vals) {
  MGS_ENSURE(count == 0 || (d_acc && d_idx && d_vals), kInvalidArgument, "device gather: a null buffer");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  MGS_CUDA_CHECK(kernels::gatherZero(d_acc, d_idx, count, d_vals, stream_));
  return Status::OK();
}

Status DeviceBucketEngine::scatterInto(const std::vector<BucketMember>& members, size_t n, size_t words,
                                       const char* what, const std::function<int(const OutScratch&)>& launch,
                                       uint64_t** d_verdict) {
  std::vector<OutDesc> descs;
  size_t mn = 0;
  MGS_RETURN_IF_ERROR(buildOutDescs(members, &descs, &mn));
  if (!members.empty()) n = mn;
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  // Scratch: sum (n floats), touched (n bytes), the verdict words. Given back
  // at once: the next user is enqueued after these kernels (stream order).
  const size_t sumB = alignUp(n * sizeof(float)), touchB = alignUp(n), verdictB = alignUp(words * 8);
  void* scratch = nullptr;
  MGS_RETURN_IF_ERROR(pool_.take(sumB + touchB + verdictB, &scratch));
  char* sc = static_cast<char*>(scratch);
  OutScratch o;
  o.n = n;
  o.members = static_cast<uint32_t>(descs.size());
  o.maxCount = maxCountOf(members);
  o.d_sum = reinterpret_cast<float*>(sc);
  o.d_touched = reinterpret_cast<uint8_t*>(sc + sumB);
  o.d_verdict = reinterpret_cast<uint64_t*>(sc + sumB + touchB);
  void* d_descs = nullptr;
  Status st;
  if (!descs.empty()) st = upload(descs.data(), descs.size() * sizeof(OutDesc), &d_descs);
  o.d_out = static_cast<const OutDesc*>(d_descs);
  if (st.ok()) {
    const int e = launch(o);
    if (e != 0) st = Status(Code::kCuda, std::string(what) + ": " + cudaGetErrorName(static_cast<cudaError_t>(e)));
  }
  pool_.give(scratch);
  if (d_verdict) *d_verdict = o.d_verdict;
  return st;
}

Status DeviceBucketEngine::enqueueAgreedScatter(const std::vector<BucketMember>& members, const uint32_t* d_idx,
                                                const float* d_vals, size_t count) {
  MGS_ENSURE(count == 0 || (d_idx && d_vals), kInvalidArgument, "device agreed scatter: a null buffer");
  return scatterInto(members, 0, 1, "device agreed scatter", [&](const OutScratch& o) {
    return kernels::scatterAgreed(d_idx, d_vals, count, o.n, o.members, o.d_out, o.maxCount, o.d_sum, o.d_touched,
                                  o.d_verdict, stream_);
  });
}

Status DeviceBucketEngine::enqueueScatter(const ScatterArgs& a, PendingVerdict* out) {
  MGS_ENSURE(a.members != nullptr && out != nullptr, kInvalidArgument, "device scatter: no members or no verdict");
  MGS_ENSURE(a.P >= 1 && a.P <= 65535, kInvalidArgument, "device scatter: P = " << a.P);
  MGS_ENSURE(a.d_recv != nullptr, kInvalidArgument, "device scatter: no received blocks");
  uint64_t* d_verdict = nullptr;
  MGS_RETURN_IF_ERROR(scatterInto(
      *a.members, 0, verdictWords(a.P), "device scatter",
      [&](const OutScratch& o) {
        return kernels::scatterBlocks(a.d_recv, a.P, a.cap, o.n, o.members, o.d_out, o.maxCount, a.propagate,
                                      o.d_sum, o.d_touched, o.d_verdict, stream_);
      },
      &d_verdict));
  return verdictToHost(d_verdict, a.P, a.cap, a.members->size(), a.propagate, out);
}

Status DeviceBucketEngine::verdictToHost(const uint64_t* d_verdict, int P, size_t cap, size_t members,
                                         bool propagate, PendingVerdict* out) {
  const size_t words = verdictWords(P);
  // The verdict's way to the host: pinned words + an event (recycled).
  PendingVerdict pv;
  for (size_t i = 0; i < verdictFree_.size(); ++i) {
    if (verdictFree_[i].words < words) continue;
    pv.event_ = verdictFree_[i].event;
    pv.host_ = verdictFree_[i].host;
    pv.hostWords_ = verdictFree_[i].words;
    verdictFree_.erase(verdictFree_.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  }
  pv.owner_ = this;
  if (!pv.event_) {
    cudaEvent_t ev = nullptr;
    MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    pv.event_ = ev;
    void* h = nullptr;
    MGS_CUDA_CHECK(cudaHostAlloc(&h, words * 8, cudaHostAllocDefault));  // pv owns both from here
    pv.host_ = static_cast<uint64_t*>(h);
    pv.hostWords_ = words;
  }
  pv.P_ = P;
  pv.cap_ = cap;
  pv.members_ = members;
  pv.propagate_ = propagate;
  MGS_CUDA_CHECK(cudaMemcpyAsync(pv.host_, d_verdict, words * 8, cudaMemcpyDeviceToHost, asStream(stream_)));
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(pv.event_), asStream(stream_)));
  *out = std::move(pv);
  return Status::OK();
}

Status DeviceBucketEngine::enqueueAgreedGather(const AgreedGatherArgs& a) {
  MGS_ENSURE(a.d_block && a.d_vals && a.d_state, kInvalidArgument, "device agreed gather: a null buffer");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  const int e = kernels::agreedGather(a.d_block, a.cap, a.n, a.members, a.P, a.rank, a.lead, a.hostSlot,
                                      static_cast<const uint32_t*>(localWords()), a.d_acc, a.d_vals, a.d_state, stream_);
  MGS_ENSURE(e == 0, kCuda, "device agreed gather: " << cudaGetErrorName(static_cast<cudaError_t>(e)));
  return Status::OK();
}

Status DeviceBucketEngine::enqueueAgreedFinish(const AgreedFinishArgs& a, PendingVerdict* out) {
  MGS_ENSURE(a.members != nullptr && out != nullptr && a.d_block && a.d_vals && a.d_state, kInvalidArgument,
             "device agreed scatter: an incomplete job");
  MGS_ENSURE(a.P >= 1 && a.P <= 65535 && a.leader >= 0 && a.leader < a.P, kInvalidArgument,
             "device agreed scatter: P = " << a.P << ", leader " << a.leader);
  uint64_t* d_verdict = nullptr;
  MGS_RETURN_IF_ERROR(scatterInto(
      *a.members, a.n, verdictWords(a.P), "device agreed scatter",
      [&](const OutScratch& o) {
        return kernels::agreedScatter(a.d_block, a.cap, o.n, a.bucketMembers, a.d_vals, a.d_state, a.P, a.leader,
                                      o.members, o.d_out, o.maxCount, a.propagate, o.d_sum, o.d_touched, o.d_verdict,
                                      stream_);
      },
      &d_verdict));
  return verdictToHost(d_verdict, a.P, a.cap, a.bucketMembers, a.propagate, out);
}

Status DeviceBucketEngine::enqueueDenseGather(const DenseGatherArgs& a) {
  MGS_ENSURE(a.d_vals && (a.hostSlot != 0 || a.d_acc), kInvalidArgument, "device dense gather: a null buffer");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  const int e = kernels::denseGather(a.d_acc, a.n, a.members, a.P, a.rank, a.hostSlot,
                                     static_cast<const uint32_t*>(localWords()), a.d_vals, stream_);
  MGS_ENSURE(e == 0, kCuda, "device dense gather: " << cudaGetErrorName(static_cast<cudaError_t>(e)));
  return Status::OK();
}

Status DeviceBucketEngine::enqueueDenseFinish(const DenseFinishArgs& a, PendingVerdict* out) {
  MGS_ENSURE(a.members != nullptr && out != nullptr && a.d_vals, kInvalidArgument,
             "device dense scatter: an incomplete job");
  MGS_ENSURE(a.P >= 1 && a.P <= 65535, kInvalidArgument, "device dense scatter: P = " << a.P);
  uint64_t* d_verdict = nullptr;
  MGS_RETURN_IF_ERROR(scatterInto(
      *a.members, a.n, verdictWords(a.P), "device dense scatter",
      [&](const OutScratch& o) {
        return kernels::denseScatter(a.d_vals, a.n, a.bucketMembers, a.P, o.members, o.d_out, o.maxCount, a.propagate,
                                     o.d_verdict, stream_);
      },
      &d_verdict));
  return verdictToHost(d_verdict, a.P, 0, a.bucketMembers, a.propagate, out);
}

Status DeviceBucketEngine::enqueueHierFinish(const HierFinishArgs& a, PendingVerdict* out) {
  MGS_ENSURE(a.members != nullptr && out != nullptr && a.d_recv && a.d_slots, kInvalidArgument,
             "device hierarchical scatter: an incomplete job");
  MGS_ENSURE(a.nodes >= 1 && a.P >= 1 && a.nodes + a.P <= 65535, kInvalidArgument,
             "device hierarchical scatter: " << a.nodes << " nodes, P = " << a.P);
  uint64_t* d_verdict = nullptr;
  MGS_RETURN_IF_ERROR(scatterInto(
      *a.members, a.n, verdictWords(a.nodes + a.P), "device hierarchical scatter",
      [&](const OutScratch& o) {
        return kernels::scatterHierarchical(a.d_recv, a.nodes, a.d_slots, a.P, a.cap, o.n, a.bucketMembers, o.members,
                                            o.d_out, o.maxCount, a.propagate, o.d_sum, o.d_touched, o.d_verdict,
                                            stream_);
      },
      &d_verdict));
  return verdictToHost(d_verdict, a.nodes + a.P, a.cap, a.bucketMembers, a.propagate, out);
}

}  // namespace mgs::cuda
