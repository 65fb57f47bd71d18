// Ran on an H100 (src/device/cuda/cuda_local_stage.h).
#include "cuda_local_stage.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/sparse_block.h"
#include "common/cuda_check.h"
#include "compress/synthetic_gradient.h"
#include "cuda_local_stage_parts.h"
#include "host_sync.h"
#include "runtime_kernels.h"

namespace mgs::cuda {

Status CudaLocalStage::create(const LocalStageOptions& options, int device, std::unique_ptr<CudaLocalStage>* out) {
  MGS_ENSURE(device >= 0 && device < deviceCount(), kCuda,
             "CUDA device " << device << " is not visible (" << deviceCount() << " CUDA devices)");
  std::unique_ptr<CudaLocalStage> s(new CudaLocalStage(options, device));
  MGS_CUDA_CHECK(cudaSetDevice(device));
  MGS_RETURN_IF_ERROR(DeviceBucketEngine::create(device, nullptr, &s->engine_));
  *out = std::move(s);
  return Status::OK();
}

CudaLocalStage::~CudaLocalStage() {
  // Slots give their buffers back to the engine's pool: before the engine goes.
  held_.clear();
  dropped_.clear();
  (void)cudaSetDevice(device_);
  // Teardown waits for the work in flight before freeing pinned memory it
  // may still write (not steady state: not counted in hostSyncs).
  if (engine_) (void)cudaStreamSynchronize(asStream(engine_->stream()));
  for (auto& slot : slots_) {
    (void)cudaFreeHost(slot.host);
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(slot.event));
  }
  if (localDone_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(localDone_));
  if (ncclDone_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ncclDone_));
}

Status CudaLocalStage::newBuf(size_t floats, BufPtr* out) {
  void* p = nullptr;
  MGS_RETURN_IF_ERROR(engine_->pool().take(floats * sizeof(float), &p));
  DeviceSlabPool* pool = &engine_->pool();
  *out = BufPtr(new Buf{p, floats}, [pool](Buf* b) {
    pool->give(b->p);
    delete b;
  });
  return Status::OK();
}

bool CudaLocalStage::accepts(const LocalJob& job) const {
  // The allgather block, and the agreed exchange (its leader selects, the
  // others only fuse: cuda_agreed.cc). Dense buckets and the hierarchical
  // exchange's given accumulators go to the host.
  if (job.dense_acc || job.acc_in || !job.members) return false;
  if (job.index_block) {
    if (job.select && (!job.selector || !job.block || !job.agreed_values)) return false;
  } else if (!job.block || !job.select || !job.selector) {
    return false;
  }
  if (job.n == 0 || job.n >= (size_t{1} << 32)) return false;
  for (const auto& m : *job.members) {
    if (!m.input.onCuda() || m.input.device != device_) return false;
    if (m.input.dtype != MGS_FLOAT32 && m.input.dtype != MGS_FLOAT16 && m.input.dtype != MGS_BFLOAT16) return false;
  }
  return true;
}

Status CudaLocalStage::selectorFor(const compress::Selector& cpu, const GpuSelector** out) {
  const double density = cpu.options().density;
  auto it = selectors_.find(density);
  if (it == selectors_.end()) {
    std::unique_ptr<GpuSelector> g;
    MGS_RETURN_IF_ERROR(GpuSelector::create(cpu.name(), cpu.options(), &g));
    it = selectors_.emplace(density, std::move(g)).first;
  }
  *out = it->second.get();
  return Status::OK();
}

Status CudaLocalStage::contiguous(const std::vector<Request>& members, size_t n, float** out) {
  // Laid out like this bucket already (every step once the plan is stable)?
  auto first = held_.find(members[0].name);
  if (first != held_.end() && first->second.offset == 0 && first->second.buf->floats == n) {
    const BufPtr& buf = first->second.buf;
    size_t off = 0;
    bool same = true;
    for (const auto& m : members) {
      auto it = held_.find(m.name);
      if (it == held_.end() || it->second.buf != buf || it->second.offset != off || it->second.n != m.input.numel()) {
        same = false;
        break;
      }
      off += m.input.numel();
    }
    if (same) {
      *out = static_cast<float*>(buf->p);
      return Status::OK();
    }
  }
  BufPtr nb;
  MGS_RETURN_IF_ERROR(newBuf(n, &nb));
  float* base = static_cast<float*>(nb->p);
  std::vector<float> host;
  size_t off = 0;
  for (const auto& m : members) {
    const size_t c = m.input.numel();
    auto it = held_.find(m.name);
    if (it != held_.end() && it->second.n == c) {
      MGS_CUDA_CHECK(cudaMemcpyAsync(base + off, it->second.data(), c * sizeof(float), cudaMemcpyDeviceToDevice,
                                     asStream(engine_->stream())));
    } else {
      // First time on the device: the host store's residual (or zeros)
      // moves here. Pageable source: the call returns once it is staged.
      host.resize(c);
      opt_.residuals->takeLocked(m.name, host.data(), c);
      MGS_CUDA_CHECK(cudaMemcpyAsync(base + off, host.data(), c * sizeof(float), cudaMemcpyHostToDevice,
                                     asStream(engine_->stream())));
    }
    off += c;
  }
  off = 0;
  for (const auto& m : members) {
    held_[m.name] = Slot{nb, off, m.input.numel()};
    off += m.input.numel();
  }
  *out = base;
  return Status::OK();
}

Status CudaLocalStage::enqueueLocalPart(const LocalJob& job, void* d_block, void* words, BufPtr* acc,
                                        std::vector<void*>* scratch) {
  // The residual store's lock is held by the caller.
  const std::vector<Request>& members = *job.members;
  const size_t n = job.n, M = members.size();
  const GpuSelector* sel = nullptr;  // none: fuse only (an agreed non-leader)
  if (job.select) MGS_RETURN_IF_ERROR(selectorFor(*job.selector, &sel));
  std::vector<BucketMember> bm(M);
  for (size_t i = 0; i < M; ++i) {
    const Request& m = members[i];
    bm[i].name = m.name;
    bm[i].d_grad = m.input.data;
    bm[i].dtype = m.input.dtype;
    bm[i].count = m.input.numel();
    bm[i].prescale = m.sig.prescale;
    bm[i].readyEvent = m.input.ready_event;
    bm[i].readyStream = m.input.stream;
  }
  dropped_.clear();
  float* d_res = nullptr;
  if (opt_.error_feedback) MGS_RETURN_IF_ERROR(contiguous(members, n, &d_res));
  MGS_RETURN_IF_ERROR(newBuf(n, acc));
  void* d_ws = nullptr;
  size_t ws = 0;
  if (sel) {
    MGS_RETURN_IF_ERROR(sel->workspaceBytes(n, &ws));
    MGS_RETURN_IF_ERROR(engine_->pool().take(ws, &d_ws));
    scratch->push_back(d_ws);
  }
  LocalStageArgs a;
  a.members = &bm;
  a.d_residual = d_res;
  a.d_acc = static_cast<float*>((*acc)->p);
  a.d_block = d_block;
  a.cap = job.cap;
  a.d_workspace = d_ws;
  a.workspaceBytes = ws;
  a.step = job.step;
  a.name = job.name;
  MGS_RETURN_IF_ERROR(sel ? engine_->enqueueLocal(*sel, a) : engine_->enqueueFuse(a));
  // The engine's words are valid until its next enqueueLocal (stream order).
  if (words)
    MGS_CUDA_CHECK(cudaMemcpyAsync(words, engine_->localWords(), (M + 1) * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                   asStream(engine_->stream())));
  return Status::OK();
}

Status CudaLocalStage::runSparse(const LocalJob& job, LocalOutcome* out, BufPtr* acc) {
  const std::vector<Request>& members = *job.members;
  const size_t n = job.n, cap = job.cap, M = members.size();
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  // Held for the call: framework threads reading residuals wait for it.
  auto lk = opt_.residuals->lock();
  Scratch scratch{engine_->pool(), {}};
  void* d_block = nullptr;
  MGS_RETURN_IF_ERROR(scratch.take(block::allgatherBytes(cap), &d_block));
  MGS_RETURN_IF_ERROR(enqueueLocalPart(job, d_block, nullptr, acc, &scratch.bufs));
  const double density = job.selector->options().density;
  // Only the block (and M + 1 words) crosses to the host, for the MPI exchange.
  words_.resize((M + 1) * sizeof(uint32_t));
  MGS_CUDA_CHECK(
      cudaMemcpyAsync(job.block, d_block, block::allgatherBytes(cap), cudaMemcpyDeviceToHost, asStream(engine_->stream())));
  MGS_CUDA_CHECK(cudaMemcpyAsync(words_.data(), engine_->localWords(), words_.size(), cudaMemcpyDeviceToHost,
                                 asStream(engine_->stream())));
  MGS_RETURN_IF_ERROR(syncStream(engine_->stream()));

  out->selected = true;
  out->k = compress::kForDensity(n, density);
  const block::AllgatherBlock b(job.block, cap);
  const block::Header h = block::decodeHeader(b.header(), cap, M);
  if (h.kind == block::Header::kCount) {
    out->count = h.count;
    out->reported = h.count;
    return Status::OK();
  }
  size_t nf = 0;
  for (size_t m = 0; m < M; ++m) nf += localWord(m);
  b.finish(failedSelection(members, h, nf, n, out));
  return Status::OK();
}

uint64_t CudaLocalStage::failedSelection(const std::vector<Request>& members, const block::Header& h, size_t nf,
                                         size_t n, LocalOutcome* out) const {
  if (h.kind == block::Header::kFailure && h.bad_member >= 0) {
    out->bad_member = h.bad_member;
    out->non_finite = nf;
    out->status = nonFiniteStatus(opt_.rank, members, h.bad_member, nf, n);
    return block::failureCode(h.bad_member);
  }
  const uint32_t failure = localWord(members.size());
  out->status =
      Status(Code::kInternal, "rank " + std::to_string(opt_.rank) + ": GPU selection of " + bucketName(members) +
                                  " failed (device failure word " + std::to_string(static_cast<int32_t>(failure)) + ")");
  return block::failureCode(-1);
}

Status CudaLocalStage::timeCollectives(Communicator& comm, const CollectiveSizes& sizes,
                                       std::vector<double>* seconds) {
  MGS_ENSURE(seconds != nullptr, kInvalidArgument, "timeCollectives: no output");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  Scratch scratch{engine_->pool(), {}};
  void *d_buf = nullptr, *d_recv = nullptr;
  const size_t bufB = sizes.bufferBytes(), recvB = sizes.recvBytes(comm.size());
  MGS_RETURN_IF_ERROR(scratch.take(bufB, &d_buf));
  MGS_RETURN_IF_ERROR(scratch.take(recvB, &d_recv));
  cudaStream_t stream = asStream(engine_->stream());
  MGS_CUDA_CHECK(cudaMemsetAsync(d_buf, 0, bufB, stream));  // zeros: no NaN in the sums
  MGS_CUDA_CHECK(cudaMemsetAsync(d_recv, 0, recvB, stream));
  MGS_RETURN_IF_ERROR(syncStream(stream));  // before the communicator's stream reads them
  seconds->clear();
  // Blocking collectives: every call has ended when measureCollectives
  // returns, so the buffers go back to the pool with nothing in flight.
  return measureCollectives(comm, sizes, d_buf, d_recv, seconds);
}

Status CudaLocalStage::timeSelection(const compress::Selector& cpu, const std::vector<size_t>& sizes,
                                     std::vector<double>* seconds) {
  MGS_ENSURE(!sizes.empty() && seconds != nullptr, kInvalidArgument, "timeSelection: no sizes");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  const GpuSelector* sel = nullptr;
  MGS_RETURN_IF_ERROR(selectorFor(cpu, &sel));
  const size_t nmax = *std::max_element(sizes.begin(), sizes.end());
  size_t ws = 0;
  MGS_RETURN_IF_ERROR(sel->workspaceBytes(nmax, &ws));
  const size_t cap = std::max<size_t>(sel->maxCount(nmax), 1);
  cudaStream_t stream = asStream(engine_->stream());
  Scratch scratch{engine_->pool(), {}};
  void *d_x = nullptr, *d_acc = nullptr, *d_vals = nullptr, *d_idx = nullptr, *d_ws = nullptr, *d_count = nullptr;
  MGS_RETURN_IF_ERROR(scratch.take(nmax * sizeof(float), &d_x));
  MGS_RETURN_IF_ERROR(scratch.take(nmax * sizeof(float), &d_acc));
  MGS_RETURN_IF_ERROR(scratch.take(cap * sizeof(float), &d_vals));
  MGS_RETURN_IF_ERROR(scratch.take(cap * sizeof(uint32_t), &d_idx));
  MGS_RETURN_IF_ERROR(scratch.take(ws, &d_ws));
  MGS_RETURN_IF_ERROR(scratch.take(sizeof(uint32_t), &d_count));
  std::vector<float> x(nmax);
  compress::syntheticGradient(x.data(), nmax);
  MGS_CUDA_CHECK(cudaMemcpyAsync(d_x, x.data(), nmax * sizeof(float), cudaMemcpyHostToDevice, stream));
  struct Events {  // destroyed on every path
    cudaEvent_t e[2] = {nullptr, nullptr};
    ~Events() {
      for (cudaEvent_t x : e)
        if (x) (void)cudaEventDestroy(x);
    }
  } ev;
  MGS_CUDA_CHECK(cudaEventCreate(&ev.e[0]));
  MGS_CUDA_CHECK(cudaEventCreate(&ev.e[1]));
  compress::SelectArgs a;
  a.x = nullptr;  // in place, as the device bucket selects
  a.residual = static_cast<float*>(d_acc);
  a.outValues = static_cast<float*>(d_vals);
  a.outIndices = static_cast<uint32_t*>(d_idx);
  a.workspace = d_ws;
  a.workspaceBytes = ws;
  a.name = "calibration";
  seconds->clear();
  for (size_t n : sizes) {
    a.n = n;
    std::vector<double> reps;
    for (int rep = 0; rep < 4; ++rep) {  // the first call warms up
      MGS_CUDA_CHECK(cudaMemcpyAsync(d_acc, d_x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      MGS_CUDA_CHECK(cudaEventRecord(ev.e[0], stream));
      MGS_RETURN_IF_ERROR(
          sel->enqueue(a, DeviceSelectOutputs{static_cast<uint32_t*>(d_count), nullptr, nullptr}, stream));
      MGS_CUDA_CHECK(cudaEventRecord(ev.e[1], stream));
      MGS_RETURN_IF_ERROR(syncEvent(ev.e[1]));
      float ms = 0;
      MGS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.e[0], ev.e[1]));
      if (rep > 0) reps.push_back(ms * 1e-3);
    }
    std::sort(reps.begin(), reps.end());
    seconds->push_back(reps[reps.size() / 2]);
  }
  return Status::OK();
}

void CudaLocalStage::run(const LocalJob& job, LocalOutcome* out) {
  *out = LocalOutcome{};
  const auto t0 = std::chrono::steady_clock::now();
  out->fuse_end = out->select_begin = t0;  // fused and selected in one device sequence
  BufPtr acc;
  Status st = job.index_block ? runAgreed(job, out, &acc) : runSparse(job, out, &acc);
  out->select_end = std::chrono::steady_clock::now();
  if (!st.ok()) {
    // A CUDA call failed on the host side: the bucket fails on every rank
    // through the block (or, for an agreed non-leader, its flag), nothing
    // commits.
    out->status = Status(st.code(), "rank " + std::to_string(opt_.rank) + ": device local stage of " +
                                        bucketName(*job.members) + ": " + st.message());
    out->count = 0;
    out->bad_member = -1;
    if (job.block && job.index_block)
      block::IndexBlock(job.block, job.cap).finish(block::failureCode(-1));
    else if (job.block)
      block::AllgatherBlock(job.block, job.cap).finish(block::failureCode(-1));
  }
  if (!out->status.ok()) out->count = 0;
  auto slab = std::make_unique<Slab>();
  slab->buf = std::move(acc);
  slab->n = job.n;
  out->slab = std::move(slab);
}

Status CudaLocalStage::readSlab(const LocalSlab& slab, float* dst) {
  const auto& s = static_cast<const Slab&>(slab);
  MGS_ENSURE(s.buf != nullptr, kInternal, "device slab without memory (its bucket failed before fusing)");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  MGS_CUDA_CHECK(
      cudaMemcpyAsync(dst, s.buf->p, s.n * sizeof(float), cudaMemcpyDeviceToHost, asStream(engine_->stream())));
  return syncStream(engine_->stream());
}

void CudaLocalStage::settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> slab, bool commit) {
  if (!slab) return;
  auto& s = static_cast<Slab&>(*slab);
  // Dropped: the buffer goes back to the pool when the last reference goes.
  if (!commit || !opt_.error_feedback || !s.buf) return;
  auto lk = opt_.residuals->lock();
  size_t off = 0;
  for (const auto& m : members) {
    held_[m.name] = Slot{s.buf, off, m.input.numel()};
    off += m.input.numel();
  }
}

void CudaLocalStage::zeroResidual(const std::vector<Request>& members) {
  if (!opt_.error_feedback) return;
  auto lk = opt_.residuals->lock();
  if (cudaSetDevice(device_) != cudaSuccess) return;
  for (const auto& m : members) {
    auto it = held_.find(m.name);
    if (it != held_.end())
      (void)cudaMemsetAsync(it->second.data(), 0, it->second.n * sizeof(float), asStream(engine_->stream()));
  }
  (void)syncStream(engine_->stream());
}

Status CudaLocalStage::evictLocked(const std::vector<std::string>& names) {
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& name : names) {
    auto it = held_.find(name);
    if (it == held_.end()) continue;
    out.emplace_back(name, std::vector<float>(it->second.n));
    MGS_CUDA_CHECK(cudaMemcpyAsync(out.back().second.data(), it->second.data(), it->second.n * sizeof(float),
                                   cudaMemcpyDeviceToHost, asStream(engine_->stream())));
  }
  if (out.empty()) return Status::OK();
  MGS_RETURN_IF_ERROR(syncStream(engine_->stream()));
  for (auto& [name, v] : out) {
    opt_.residuals->putLocked(name, v.data(), v.size());
    held_.erase(name);
  }
  return Status::OK();
}

Status CudaLocalStage::evict(const std::vector<Request>& members) {
  auto lk = opt_.residuals->lock();
  std::vector<std::string> names;
  for (const auto& m : members)
    if (held_.count(m.name)) names.push_back(m.name);
  return evictLocked(names);
}

Status CudaLocalStage::evictAll() {
  auto lk = opt_.residuals->lock();
  std::vector<std::string> names;
  for (const auto& kv : held_) names.push_back(kv.first);
  return evictLocked(names);
}

bool CudaLocalStage::acceptsScatter(const std::vector<Request>& members) const {
  if (members.empty()) return false;
  for (const auto& m : members) {
    const TensorDesc& o = m.output;
    if (!o.onCuda() || o.device != device_ || o.numel() != m.input.numel()) return false;
    if (o.dtype != MGS_FLOAT32 && o.dtype != MGS_FLOAT16 && o.dtype != MGS_BFLOAT16) return false;
  }
  return true;
}

Status CudaLocalStage::scatterBlocks(const std::vector<Request>& members, const char* recv, int P, size_t cap,
                                     const std::vector<double>& factors) {
  MGS_ENSURE(factors.size() == members.size(), kInvalidArgument, "device scatter: one factor per member");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  const std::vector<BucketMember> bm = outputMembers(members, factors);
  Scratch scratch{engine_->pool(), {}};
  void* d_recv = nullptr;
  const size_t bytes = static_cast<size_t>(P) * block::allgatherBytes(cap);
  MGS_RETURN_IF_ERROR(scratch.take(bytes, &d_recv));
  MGS_CUDA_CHECK(cudaMemcpyAsync(d_recv, recv, bytes, cudaMemcpyHostToDevice, asStream(engine_->stream())));
  ScatterArgs a;
  a.members = &bm;
  a.d_recv = d_recv;
  a.P = P;
  a.cap = cap;
  a.propagate = true;  // validated on the host: no failure code reaches here
  PendingVerdict pv;
  MGS_RETURN_IF_ERROR(engine_->enqueueScatter(a, &pv));
  MGS_RETURN_IF_ERROR(pv.wait());
  BucketVerdict v;
  MGS_RETURN_IF_ERROR(pv.verdict(&v));
  MGS_ENSURE(v.kind == VerdictKind::kOk, kInternal,
             "device scatter of " << bucketName(members) << ": the device's verdict (" << static_cast<int>(v.kind)
                                  << ") differs from the host's validation");
  return Status::OK();
}

bool CudaLocalStage::holds(const std::string& name, size_t* n) const {
  auto it = held_.find(name);
  if (it == held_.end()) return false;
  *n = it->second.n;
  return true;
}

Status CudaLocalStage::read(const std::string& name, float* dst, size_t n) const {
  auto it = held_.find(name);
  MGS_ENSURE(it != held_.end() && it->second.n == n, kInvalidArgument,
             "tensor '" << name << "' has no device residual of " << n << " elements");
  MGS_CUDA_CHECK(cudaSetDevice(device_));  // a framework thread calls this
  MGS_CUDA_CHECK(
      cudaMemcpyAsync(dst, it->second.data(), n * sizeof(float), cudaMemcpyDeviceToHost, asStream(engine_->stream())));
  return syncStream(engine_->stream());
}

Status CudaLocalStage::write(const std::string& name, const float* src, size_t n) {
  auto it = held_.find(name);
  MGS_ENSURE(it != held_.end() && it->second.n == n, kInvalidArgument,
             "tensor '" << name << "' has no device residual of " << n << " elements");
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  MGS_CUDA_CHECK(
      cudaMemcpyAsync(it->second.data(), src, n * sizeof(float), cudaMemcpyHostToDevice, asStream(engine_->stream())));
  return syncStream(engine_->stream());
}

void CudaLocalStage::drop(const std::string& name) {
  // A framework thread may call this (mgs_residual_restore with another
  // size): the buffer goes back to the pool, which only the coordinator
  // touches, at the coordinator's next call.
  auto it = held_.find(name);
  if (it == held_.end()) return;
  dropped_.push_back(std::move(it->second.buf));
  held_.erase(it);
}

}  // namespace mgs::cuda
