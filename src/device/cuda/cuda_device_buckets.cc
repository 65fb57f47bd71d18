// Device buckets of the CUDA local stage (src/device/cuda/cuda_local_stage.h):
// startBucket and its pending object.
// Ran on an H100 (src/device/cuda/cuda_local_stage.h).
#include <cuda_runtime.h>

#include <chrono>
#include <cstring>

#include "core/sparse_block.h"
#include "common/cuda_check.h"
#include "cuda_local_stage.h"
#include "cuda_local_stage_parts.h"
#include "host_sync.h"
#include "runtime_kernels.h"

namespace mgs::cuda {

// ---- Device buckets -------------------------------------------------------------
// Ran on an H100 at np 1 (gpu/device_bucket). The order of one bucket, all enqueued:
//   engine stream: [ready events] fuse, select into d_send, seal | local words -> pinned
//                  (or, for a rank that cannot serve the bucket: its failure header and seal -> d_send)
//                  record localDone_
//   NCCL stream:   wait localDone_, allgather d_send -> d_recv (P blocks), record ncclDone_
//   engine stream: wait ncclDone_, scatter (verdict on the device, outputs or nothing)
//                  verdict words -> pinned (PendingVerdict), record the slot's event
// d_send, d_recv and the selector's workspace go back to the pool at once:
// every later use is enqueued on the engine stream after the scatter, which
// is after the allgather (stream order through ncclDone_).

class CudaLocalStage::Pending final : public PendingDeviceBucket {
 public:
  explicit Pending(CudaLocalStage* stage) : stage_(stage) {}
  ~Pending() override {
    if (slot_.host) stage_->giveSlot(slot_);
  }

  Status test(bool* done) override {
    *done = false;
    if (nccl_) {
      // The communicator's own poll: async errors, its deadline, abort.
      bool exchanged = false;
      MGS_RETURN_IF_ERROR(nccl_->test(&exchanged));
      if (!exchanged) return Status::OK();
    }
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(slot_.event));
    if (e == cudaErrorNotReady) return Status::OK();
    MGS_CUDA_CHECK(e);
    *done = true;
    return Status::OK();
  }

  Status wait() override {
    if (nccl_) MGS_RETURN_IF_ERROR(nccl_->wait());
    return syncEvent(slot_.event);
  }

  Status result(DeviceBucketResult* out) override {
    DeviceBucketResult r;
    r.k = k_;
    const char* host = static_cast<const char*>(slot_.host);
    const uint64_t* headers = reinterpret_cast<const uint64_t*>(host + 16);
    if (scattered_) {
      BucketVerdict v;
      MGS_RETURN_IF_ERROR(verdict_.verdict(&v));
      // The hierarchical exchange's words: the nodes' headers, then every rank's code.
      headers = verdict_.words() + 2 + nodes_;
      r.node_headers.assign(verdict_.words() + 2, verdict_.words() + 2 + nodes_);
      r.malformed_rank = v.malformedRank;
      r.written = v.kind == VerdictKind::kOk;
      r.nan_written = v.kind == VerdictKind::kNaNWritten;
    }
    r.headers.assign(headers, headers + P_);
    if (!local_.ok()) {  // this rank sent a failure code (found while enqueuing)
      r.local = local_;
      *out = std::move(r);
      return Status::OK();
    }
    const size_t M = members_.size();
    const block::Header h = block::decodeHeader(r.headers[static_cast<size_t>(rank_)], cap_, M);
    const char* words = host + 16 + 8 * static_cast<size_t>(P_);
    if (h.kind == block::Header::kCount) {
      r.count = h.count;
      if (nodes_ > 0) {
        // Its leader's selection, on a leader; nothing selected elsewhere.
        const block::Header nh =
            block::decodeHeader(leadNode_ >= 0 ? r.node_headers[static_cast<size_t>(leadNode_)] : 0, cap_, M);
        r.count = nh.kind == block::Header::kCount ? nh.count : 0;
      }
    } else if (h.kind == block::Header::kFailure && h.bad_member >= 0 && h.cause == block::StagingCause::kNone) {
      std::vector<uint32_t> nonfinite(M);
      std::memcpy(nonfinite.data(), words, M * sizeof(uint32_t));
      for (uint32_t c : nonfinite) r.non_finite += c;
      r.bad_member = h.bad_member;
      r.local = nonFiniteStatus(stage_->opt_.rank, members_, h.bad_member, r.non_finite, n_);
    } else {
      int32_t failure = 0;
      std::memcpy(&failure, words + M * sizeof(uint32_t), sizeof failure);
      r.local = Status(Code::kInternal, "rank " + std::to_string(stage_->opt_.rank) + ": GPU selection of " +
                                            bucketName(members_) + " failed (device failure word " +
                                            std::to_string(failure) + ")");
    }
    *out = std::move(r);
    return Status::OK();
  }

  std::unique_ptr<LocalSlab> takeSlab() override { return std::move(slab_); }

  CudaLocalStage* stage_;
  HostSlot slot_;  // [failure header, seal | P headers | M + 1 local words]
  std::unique_ptr<PendingCollective> nccl_;
  std::unique_ptr<PendingCollective> nccl_first_;  // the agreed exchange's broadcast (nccl_: its allreduce, later on the stream)
  std::vector<std::unique_ptr<PendingCollective>> nccl_more_;  // the hierarchical exchange's earlier collectives
  int nodes_ = 0;      // the hierarchical exchange: how many node blocks lead the verdict words
  int leadNode_ = -1;  // and the node this rank leads (leader_comm's rank), or -1
  PendingVerdict verdict_;
  bool scattered_ = false;  // the device scatter ran (else the P headers were copied into the slot)
  Status local_;            // a failure found while enqueuing (a staging cause, a CUDA error)
  std::vector<Request> members_;
  int rank_ = 0, P_ = 1;
  size_t n_ = 0, cap_ = 0, k_ = 0;
  std::unique_ptr<LocalSlab> slab_;
};

Status CudaLocalStage::takeSlot(size_t bytes, HostSlot* out) {
  // A free slot whose last use has passed on the device (its event).
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].bytes < bytes) continue;
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(slots_[i].event));
    if (e == cudaErrorNotReady) continue;
    MGS_CUDA_CHECK(e);
    *out = slots_[i];
    slots_.erase(slots_.begin() + static_cast<std::ptrdiff_t>(i));
    return Status::OK();
  }
  // Warm-up (or a bigger bucket, more ranks): a new one.
  HostSlot s;
  cudaEvent_t ev = nullptr;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  s.event = ev;
  const size_t nb = (bytes + 255) / 256 * 256;
  const cudaError_t e = cudaHostAlloc(&s.host, nb, cudaHostAllocDefault);
  if (e != cudaSuccess) (void)cudaEventDestroy(ev);
  MGS_CUDA_CHECK(e);
  s.bytes = nb;
  *out = s;
  return Status::OK();
}

Status CudaLocalStage::ensureBucketEvents() {
  if (localDone_) return Status::OK();
  cudaEvent_t a = nullptr, b = nullptr;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
  localDone_ = a;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&b, cudaEventDisableTiming));
  ncclDone_ = b;
  return Status::OK();
}

Status CudaLocalStage::newPending(const DeviceBucketJob& dj, std::unique_ptr<Pending>* out) {
  const LocalJob& job = *dj.job;
  const std::vector<Request>& members = *job.members;
  const size_t M = members.size(), cap = job.cap;
  const int P = dj.comm->size();
  MGS_ENSURE(dj.factors.size() == M, kInvalidArgument, "device bucket: one output factor per member");
  MGS_ENSURE(cap >= 1 && job.n > 0 && job.n < (size_t{1} << 32), kInvalidArgument,
             "device bucket " << bucketName(members) << ": n = " << job.n << ", cap = " << cap);
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  MGS_RETURN_IF_ERROR(ensureBucketEvents());
  auto p = std::make_unique<Pending>(this);
  p->members_ = members;
  p->rank_ = dj.comm->rank();
  p->P_ = P;
  p->n_ = job.n;
  p->cap_ = cap;
  p->k_ = compress::kForDensity(job.n, job.selector->options().density);
  MGS_RETURN_IF_ERROR(takeSlot(16 + 8 * static_cast<size_t>(P) + 4 * (M + 1), &p->slot_));
  std::memset(static_cast<char*>(p->slot_.host) + 16 + 8 * static_cast<size_t>(P), 0, 4 * (M + 1));  // local words
  *out = std::move(p);
  return Status::OK();
}

Status CudaLocalStage::servesBucket(const std::vector<Request>& members, int comm_device, int* bad,
                                    block::StagingCause* cause, Status* why) const {
  *bad = -1;
  *cause = deviceBucketProblem(members, comm_device, bad);
  if (*cause == block::StagingCause::kNone && comm_device != device_) {
    *cause = block::StagingCause::kWrongDevice;  // this stage lives on another device than the exchange
    *bad = 0;
  }
  if (*cause == block::StagingCause::kNone) return Status::OK();
  const TensorDesc& in = members[static_cast<size_t>(*bad)].input;
  *why = Status(Code::kInvalidArgument,
                "rank " + std::to_string(opt_.rank) + ", tensor '" + members[static_cast<size_t>(*bad)].name + "' of " +
                    bucketName(members) + ": " + block::stagingCauseText(*cause) + " (input on " +
                    (in.onCuda() ? "CUDA device " + std::to_string(in.device) : std::string("the CPU")) +
                    ", the NCCL exchange on CUDA device " + std::to_string(comm_device) + "); every rank fails this bucket");
  return Status::OK();
}

Status CudaLocalStage::startBucket(const DeviceBucketJob& dj, std::unique_ptr<PendingDeviceBucket>* out) {
  MGS_ENSURE(dj.job != nullptr && dj.job->members != nullptr && !dj.job->members->empty() && dj.comm != nullptr &&
                 dj.comm_stream != nullptr && dj.job->selector != nullptr,
             kInvalidArgument, "device bucket: incomplete job");
  if (dj.dense) return startDenseBucket(dj, out);
  if (dj.hier) return startHierBucket(dj, out);
  if (dj.leader >= 0) return startAgreedBucket(dj, out);
  const LocalJob& job = *dj.job;
  const std::vector<Request>& members = *job.members;
  const size_t cap = job.cap, bb = block::allgatherBytes(cap);
  const int P = dj.comm->size();
  cudaStream_t stream = asStream(engine_->stream());
  std::unique_ptr<Pending> p;
  MGS_RETURN_IF_ERROR(newPending(dj, &p));
  char* host = static_cast<char*>(p->slot_.host);
  auto* fail = reinterpret_cast<uint64_t*>(host);
  char* words = host + 16 + 8 * static_cast<size_t>(P);
  Scratch scratch{engine_->pool(), {}};
  void *d_send = nullptr, *d_recv = nullptr;
  MGS_RETURN_IF_ERROR(scratch.take(bb, &d_send));
  MGS_RETURN_IF_ERROR(scratch.take(static_cast<size_t>(P) * bb, &d_recv));

  // Can this rank serve the bucket? If not, it still takes part in the
  // exchange, with a code that names the member and the cause on every rank.
  int bad = -1;
  block::StagingCause cause = block::StagingCause::kNone;
  MGS_RETURN_IF_ERROR(servesBucket(members, dj.comm_device, &bad, &cause, &p->local_));
  uint64_t failure = 0;
  if (cause != block::StagingCause::kNone) {
    failure = block::stagingCode(static_cast<uint32_t>(bad), cause);
  } else {
    auto lk = opt_.residuals->lock();
    BufPtr acc;
    const Status st = enqueueLocalPart(job, d_send, words, &acc, &scratch.bufs);
    if (!st.ok()) {
      failure = block::failureCode(-1);
      p->local_ = Status(st.code(), "rank " + std::to_string(opt_.rank) + ": device local stage of " +
                                        bucketName(members) + ": " + st.message());
    } else {
      auto slab = std::make_unique<Slab>();
      slab->buf = std::move(acc);
      slab->n = job.n;
      p->slab_ = std::move(slab);
    }
  }
  if (!p->local_.ok()) {
    // The failure code and its seal, written last into this rank's block.
    fail[0] = failure;
    fail[1] = failure ^ block::kAllgatherSeal;
    MGS_CUDA_CHECK(cudaMemcpyAsync(d_send, &fail[0], 8, cudaMemcpyHostToDevice, stream));
    MGS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(d_send) + block::sealOffset(cap), &fail[1], 8,
                                   cudaMemcpyHostToDevice, stream));
  }

  // The allgather of the fixed-capacity blocks, after the local part.
  cudaStream_t ncclStream = asStream(dj.comm_stream);
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(localDone_), stream));
  MGS_CUDA_CHECK(cudaStreamWaitEvent(ncclStream, static_cast<cudaEvent_t>(localDone_), 0));
  MGS_RETURN_IF_ERROR(dj.comm->startAllgather(d_send, bb, d_recv, &p->nccl_));
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ncclDone_), ncclStream));
  MGS_RETURN_IF_ERROR(engine_->waitEvent(ncclDone_));

  if (p->local_.ok()) {
    // The verdict over every rank's header and the scatter, on the device.
    const std::vector<BucketMember> bm = outputMembers(members, dj.factors);
    ScatterArgs a;
    a.members = &bm;
    a.d_recv = d_recv;
    a.P = P;
    a.cap = cap;
    a.propagate = dj.propagate;
    MGS_RETURN_IF_ERROR(engine_->enqueueScatter(a, &p->verdict_));
    p->scattered_ = true;
  } else {
    // This rank's outputs may be unusable and its code fails the bucket on
    // every rank anyway: no scatter, the P headers alone come to the host.
    MGS_CUDA_CHECK(
        cudaMemcpy2DAsync(host + 16, 8, d_recv, bb, 8, static_cast<size_t>(P), cudaMemcpyDeviceToHost, stream));
  }
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(p->slot_.event), stream));
  *out = std::move(p);
  return Status::OK();
}

Status CudaLocalStage::slottedLocalPart(const DeviceBucketJob& dj, const LocalJob& job, void* d_block, Pending* p,
                                        std::vector<void*>* scratch, uint32_t* hostSlot, uint64_t* failure,
                                        float** d_acc) {
  const std::vector<Request>& members = *job.members;
  char* words = static_cast<char*>(p->slot_.host) + 16 + 8 * static_cast<size_t>(dj.comm->size());
  *hostSlot = 0;
  *failure = 0;
  *d_acc = nullptr;
  int bad = -1;
  block::StagingCause cause = block::StagingCause::kNone;
  MGS_RETURN_IF_ERROR(servesBucket(members, dj.comm_device, &bad, &cause, &p->local_));
  if (cause != block::StagingCause::kNone) {
    *failure = block::stagingCode(static_cast<uint32_t>(bad), cause);
    *hostSlot = block::agreedSlot(bad, static_cast<uint8_t>(cause));
    return Status::OK();
  }
  auto lk = opt_.residuals->lock();
  BufPtr acc;
  const Status st = enqueueLocalPart(job, d_block, words, &acc, scratch);
  if (!st.ok()) {
    *failure = block::failureCode(-1);
    *hostSlot = block::agreedSlot(-1, 0);
    p->local_ = Status(st.code(), "rank " + std::to_string(opt_.rank) + ": device local stage of " +
                                      bucketName(members) + ": " + st.message());
    return Status::OK();
  }
  *d_acc = static_cast<float*>(acc->p);
  auto slab = std::make_unique<Slab>();
  slab->buf = std::move(acc);
  slab->n = job.n;
  p->slab_ = std::move(slab);
  return Status::OK();
}

Status CudaLocalStage::handOver(std::unique_ptr<Pending> p, std::unique_ptr<PendingDeviceBucket>* out) {
  p->scattered_ = true;
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(p->slot_.event), asStream(engine_->stream())));
  *out = std::move(p);
  return Status::OK();
}

// ---- The agreed exchange's device bucket (never run on a GPU) ------------------
// The order of one bucket, all enqueued (routed_local_stage.h, DeviceBucketJob):
//   engine stream: [ready events] fuse; on the leader select into d_block, seal
//                  (or, for a leader that cannot serve the bucket: its failure header and seal)
//                  local words -> pinned, record localDone_
//   NCCL stream:   wait localDone_, broadcast d_block from the leader, record ncclDone_
//   engine stream: wait ncclDone_, this rank's values and slot -> d_vals (agreedGather), record localDone_
//   NCCL stream:   wait localDone_, allreduce d_vals (cap + P floats), record ncclDone_
//   engine stream: wait ncclDone_, verdict and outputs (agreedScatter), verdict words -> pinned,
//                  record the slot's event
// A rank that cannot serve the bucket (or failed to enqueue its local part)
// still takes part in both collectives, its slot saying why; it writes no
// output (the verdict fails the bucket on every rank).
Status CudaLocalStage::startAgreedBucket(const DeviceBucketJob& dj, std::unique_ptr<PendingDeviceBucket>* out) {
  const LocalJob& job = *dj.job;
  const std::vector<Request>& members = *job.members;
  const size_t M = members.size(), cap = job.cap, bb = block::allgatherBytes(cap);
  const int P = dj.comm->size(), rank = dj.comm->rank();
  const bool lead = rank == dj.leader;
  MGS_ENSURE(dj.leader < P, kInvalidArgument, "agreed device bucket: leader " << dj.leader << " of " << P << " ranks");
  MGS_ENSURE(job.select == lead, kInvalidArgument, "agreed device bucket: only its leader selects");
  cudaStream_t stream = asStream(engine_->stream());
  cudaStream_t ncclStream = asStream(dj.comm_stream);
  std::unique_ptr<Pending> p;
  MGS_RETURN_IF_ERROR(newPending(dj, &p));
  char* host = static_cast<char*>(p->slot_.host);
  auto* fail = reinterpret_cast<uint64_t*>(host);
  Scratch scratch{engine_->pool(), {}};
  void *d_block = nullptr, *d_vals = nullptr;
  const size_t valsB = ((cap + static_cast<size_t>(P)) * sizeof(float) + 255) / 256 * 256;
  MGS_RETURN_IF_ERROR(scratch.take(bb, &d_block));
  MGS_RETURN_IF_ERROR(scratch.take(valsB + 8, &d_vals));
  auto* d_state = reinterpret_cast<uint64_t*>(static_cast<char*>(d_vals) + valsB);

  uint32_t hostSlot = 0;
  uint64_t failure = 0;
  float* d_acc = nullptr;
  MGS_RETURN_IF_ERROR(
      slottedLocalPart(dj, job, lead ? d_block : nullptr, p.get(), &scratch.bufs, &hostSlot, &failure, &d_acc));
  if (lead && !p->local_.ok()) {
    // The failure code and its seal: what every rank receives from the leader.
    fail[0] = failure;
    fail[1] = failure ^ block::kAllgatherSeal;
    MGS_CUDA_CHECK(cudaMemcpyAsync(d_block, &fail[0], 8, cudaMemcpyHostToDevice, stream));
    MGS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(d_block) + block::sealOffset(cap), &fail[1], 8,
                                   cudaMemcpyHostToDevice, stream));
  }

  // The leader's block to every rank.
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(localDone_), stream));
  MGS_CUDA_CHECK(cudaStreamWaitEvent(ncclStream, static_cast<cudaEvent_t>(localDone_), 0));
  MGS_RETURN_IF_ERROR(dj.comm->startBroadcast(d_block, bb, dj.leader, &p->nccl_first_));
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ncclDone_), ncclStream));
  MGS_RETURN_IF_ERROR(engine_->waitEvent(ncclDone_));

  // This rank's values at the leader's indices and its slot.
  AgreedGatherArgs g;
  g.d_block = d_block;
  g.cap = cap;
  g.n = job.n;
  g.members = static_cast<uint32_t>(M);
  g.P = P;
  g.rank = rank;
  g.lead = lead;
  g.hostSlot = hostSlot;
  g.d_acc = d_acc;
  g.d_vals = static_cast<float*>(d_vals);
  g.d_state = d_state;
  MGS_RETURN_IF_ERROR(engine_->enqueueAgreedGather(g));

  // Their sum over every rank, with the slots.
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(localDone_), stream));
  MGS_CUDA_CHECK(cudaStreamWaitEvent(ncclStream, static_cast<cudaEvent_t>(localDone_), 0));
  MGS_RETURN_IF_ERROR(dj.comm->startAllreduce(d_vals, cap + static_cast<size_t>(P), MGS_FLOAT32, CommOp::kSum, &p->nccl_));
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ncclDone_), ncclStream));
  MGS_RETURN_IF_ERROR(engine_->waitEvent(ncclDone_));

  // The verdict and the outputs (none from a rank whose part failed: its
  // outputs may be unusable, and its slot fails the bucket everywhere).
  const std::vector<BucketMember> bm = p->local_.ok() ? outputMembers(members, dj.factors) : std::vector<BucketMember>();
  AgreedFinishArgs f;
  f.members = &bm;
  f.d_block = d_block;
  f.d_vals = static_cast<const float*>(d_vals);
  f.d_state = d_state;
  f.cap = cap;
  f.n = job.n;
  f.bucketMembers = static_cast<uint32_t>(M);
  f.P = P;
  f.leader = dj.leader;
  f.propagate = dj.propagate;
  MGS_RETURN_IF_ERROR(engine_->enqueueAgreedFinish(f, &p->verdict_));
  return handOver(std::move(p), out);
}

// ---- The dense fallback's device bucket (never run on a GPU) -------------------
// The order of one bucket, all enqueued (routed_local_stage.h, DeviceBucketJob):
//   engine stream: [ready events] fuse (no selection), local words -> pinned;
//                  acc and this rank's slot -> d_vals, acc +0 (denseGather), record localDone_
//   NCCL stream:   wait localDone_, allreduce d_vals (n + P floats), record ncclDone_
//   engine stream: wait ncclDone_, verdict and outputs (denseScatter), verdict words -> pinned,
//                  record the slot's event
// A rank that cannot serve the bucket (or failed to enqueue its local part)
// still takes part in the allreduce with zeros and its slot; it writes no
// output (the verdict fails the bucket on every rank).
Status CudaLocalStage::startDenseBucket(const DeviceBucketJob& dj, std::unique_ptr<PendingDeviceBucket>* out) {
  const LocalJob& job = *dj.job;
  const std::vector<Request>& members = *job.members;
  const size_t M = members.size(), n = job.n;
  const int P = dj.comm->size(), rank = dj.comm->rank();
  MGS_ENSURE(!job.select && dj.leader < 0, kInvalidArgument, "dense device bucket: selects nothing, has no leader");
  cudaStream_t stream = asStream(engine_->stream());
  cudaStream_t ncclStream = asStream(dj.comm_stream);
  std::unique_ptr<Pending> p;
  MGS_RETURN_IF_ERROR(newPending(dj, &p));
  Scratch scratch{engine_->pool(), {}};
  void* d_vals = nullptr;
  MGS_RETURN_IF_ERROR(scratch.take((n + static_cast<size_t>(P)) * sizeof(float), &d_vals));

  uint32_t hostSlot = 0;
  uint64_t failure = 0;
  float* d_acc = nullptr;
  MGS_RETURN_IF_ERROR(slottedLocalPart(dj, job, nullptr, p.get(), &scratch.bufs, &hostSlot, &failure, &d_acc));

  DenseGatherArgs g;
  g.d_acc = d_acc;
  g.n = n;
  g.members = static_cast<uint32_t>(M);
  g.P = P;
  g.rank = rank;
  g.hostSlot = hostSlot;
  g.d_vals = static_cast<float*>(d_vals);
  MGS_RETURN_IF_ERROR(engine_->enqueueDenseGather(g));

  // The one collective: every rank's acc and slot, summed.
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(localDone_), stream));
  MGS_CUDA_CHECK(cudaStreamWaitEvent(ncclStream, static_cast<cudaEvent_t>(localDone_), 0));
  MGS_RETURN_IF_ERROR(dj.comm->startAllreduce(d_vals, n + static_cast<size_t>(P), MGS_FLOAT32, CommOp::kSum, &p->nccl_));
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ncclDone_), ncclStream));
  MGS_RETURN_IF_ERROR(engine_->waitEvent(ncclDone_));

  const std::vector<BucketMember> bm = p->local_.ok() ? outputMembers(members, dj.factors) : std::vector<BucketMember>();
  DenseFinishArgs f;
  f.members = &bm;
  f.d_vals = static_cast<const float*>(d_vals);
  f.n = n;
  f.bucketMembers = static_cast<uint32_t>(M);
  f.P = P;
  f.propagate = dj.propagate;
  MGS_RETURN_IF_ERROR(engine_->enqueueDenseFinish(f, &p->verdict_));
  return handOver(std::move(p), out);
}

// ---- The hierarchical exchange's device bucket (never run on a GPU) --------------
// The order of one bucket, all enqueued (routed_local_stage.h, DeviceBucketJob):
//   engine stream: [ready events] fuse (no selection), local words -> pinned;
//                  acc -> d_sum and this rank's slot -> d_slots, acc +0 (denseGather), record localDone_
//   NCCL stream:   wait localDone_, allreduce d_slots (P floats, every rank), allreduce d_sum (n floats,
//                  the node), record ncclDone_
//   leader:        engine: wait ncclDone_, select d_sum in place into d_block (enqueueSelectGiven),
//                  d_sum (the sum less the selection) -> its slab, record localDone_;
//                  NCCL: wait localDone_, allgather d_block among the leaders -> d_recv
//   NCCL stream:   broadcast d_recv (nodes blocks) from the node's leader, record ncclDone_
//   engine stream: wait ncclDone_, verdict and outputs (scatterHierarchical), verdict words -> pinned,
//                  record the slot's event
// Every collective of the bucket is on the device communicator's stream
// (the node and leader communicators split from it share it), so their
// order is the enqueue order, the same on every rank of a communicator.
Status CudaLocalStage::startHierBucket(const DeviceBucketJob& dj, std::unique_ptr<PendingDeviceBucket>* out) {
  const LocalJob& job = *dj.job;
  const std::vector<Request>& members = *job.members;
  const size_t M = members.size(), n = job.n, cap = job.cap, bb = block::allgatherBytes(cap);
  const int P = dj.comm->size(), rank = dj.comm->rank();
  MGS_ENSURE(dj.node_comm != nullptr && dj.nodes >= 1, kInvalidArgument, "hierarchical device bucket: no node communicator");
  const bool lead = dj.node_comm->rank() == 0;
  MGS_ENSURE(lead == (dj.leader_comm != nullptr) && job.select == lead, kInvalidArgument,
             "hierarchical device bucket: only the node's leader selects and allgathers");
  cudaStream_t stream = asStream(engine_->stream());
  cudaStream_t ncclStream = asStream(dj.comm_stream);
  std::unique_ptr<Pending> p;
  MGS_RETURN_IF_ERROR(newPending(dj, &p));
  p->nodes_ = dj.nodes;
  p->leadNode_ = lead ? dj.leader_comm->rank() : -1;
  Scratch scratch{engine_->pool(), {}};
  void *d_vals = nullptr, *d_block = nullptr, *d_recv = nullptr;
  MGS_RETURN_IF_ERROR(scratch.take((n + static_cast<size_t>(P)) * sizeof(float), &d_vals));  // [sum | P slots]
  MGS_RETURN_IF_ERROR(scratch.take(bb, &d_block));
  MGS_RETURN_IF_ERROR(scratch.take(static_cast<size_t>(dj.nodes) * bb, &d_recv));
  float* d_sum = static_cast<float*>(d_vals);
  float* d_slots = d_sum + n;

  uint32_t hostSlot = 0;
  uint64_t failure = 0;
  float* d_acc = nullptr;
  LocalJob fuse = job;
  fuse.select = false;  // the leader selects from the node's sum, below
  MGS_RETURN_IF_ERROR(slottedLocalPart(dj, fuse, nullptr, p.get(), &scratch.bufs, &hostSlot, &failure, &d_acc));
  // 1. acc into the node's sum (acc left +0) and this rank's slot.
  DenseGatherArgs g;
  g.d_acc = d_acc;
  g.n = n;
  g.members = static_cast<uint32_t>(M);
  g.P = P;
  g.rank = rank;
  g.hostSlot = hostSlot;
  g.d_vals = d_sum;
  MGS_RETURN_IF_ERROR(engine_->enqueueDenseGather(g));
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(localDone_), stream));
  MGS_CUDA_CHECK(cudaStreamWaitEvent(ncclStream, static_cast<cudaEvent_t>(localDone_), 0));
  std::unique_ptr<PendingCollective> op;
  MGS_RETURN_IF_ERROR(dj.comm->startAllreduce(d_slots, static_cast<size_t>(P), MGS_FLOAT32, CommOp::kSum, &op));
  p->nccl_more_.push_back(std::move(op));
  // 2. The node's sum.
  MGS_RETURN_IF_ERROR(dj.node_comm->startAllreduce(d_sum, n, MGS_FLOAT32, CommOp::kSum, &op));
  p->nccl_more_.push_back(std::move(op));
  if (lead) {
    // 3. The leader's selection from it; the sum less the selection is its new residual.
    MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ncclDone_), ncclStream));
    MGS_RETURN_IF_ERROR(engine_->waitEvent(ncclDone_));
    const GpuSelector* sel = nullptr;
    MGS_RETURN_IF_ERROR(selectorFor(*job.selector, &sel));
    size_t ws = 0;
    MGS_RETURN_IF_ERROR(sel->workspaceBytes(n, &ws));
    void* d_ws = nullptr;
    MGS_RETURN_IF_ERROR(scratch.take(ws, &d_ws));
    std::vector<BucketMember> counted(M);  // the member count, for the seal
    LocalStageArgs a;
    a.members = &counted;
    a.d_acc = d_sum;
    a.d_block = d_block;
    a.cap = cap;
    a.d_workspace = d_ws;
    a.workspaceBytes = ws;
    a.step = job.step;
    a.name = job.name;
    MGS_RETURN_IF_ERROR(engine_->enqueueSelectGiven(*sel, a, n));
    if (d_acc) MGS_CUDA_CHECK(cudaMemcpyAsync(d_acc, d_sum, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(localDone_), stream));
    MGS_CUDA_CHECK(cudaStreamWaitEvent(ncclStream, static_cast<cudaEvent_t>(localDone_), 0));
    // 4. The leaders' blocks.
    MGS_RETURN_IF_ERROR(dj.leader_comm->startAllgather(d_block, bb, d_recv, &op));
    p->nccl_more_.push_back(std::move(op));
  }
  // 5. Inside the node.
  MGS_RETURN_IF_ERROR(dj.node_comm->startBroadcast(d_recv, static_cast<size_t>(dj.nodes) * bb, 0, &p->nccl_));
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ncclDone_), ncclStream));
  MGS_RETURN_IF_ERROR(engine_->waitEvent(ncclDone_));

  // 6. The verdict and the outputs (none from a rank whose part failed).
  const std::vector<BucketMember> bm = p->local_.ok() ? outputMembers(members, dj.factors) : std::vector<BucketMember>();
  HierFinishArgs f;
  f.members = &bm;
  f.d_recv = d_recv;
  f.nodes = dj.nodes;
  f.d_slots = d_slots;
  f.P = P;
  f.cap = cap;
  f.n = n;
  f.bucketMembers = static_cast<uint32_t>(M);
  f.propagate = dj.propagate;
  MGS_RETURN_IF_ERROR(engine_->enqueueHierFinish(f, &p->verdict_));
  return handOver(std::move(p), out);
}

}  // namespace mgs::cuda
