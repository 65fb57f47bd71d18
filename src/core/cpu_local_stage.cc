#include "core/cpu_local_stage.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/device_memory.h"
#include "core/nonfinite.h"
#include "core/routed_local_stage.h"
#include "core/sparse_block.h"

namespace mgs {
namespace {

using Clock = std::chrono::steady_clock;

struct CpuSlab : LocalSlab {
  std::shared_ptr<std::vector<float>> v;
  size_t size() const override { return v->size(); }
};

std::vector<ResidualStore::Member> residualMembers(const std::vector<Request>& members) {
  std::vector<ResidualStore::Member> ms;
  for (const auto& m : members) ms.push_back({&m.name, m.input.numel()});
  return ms;
}

}  // namespace

std::string bucketName(const std::vector<Request>& m) {
  if (m.size() == 1) return m[0].name;
  return "bucket[" + m.front().name + " .. " + m.back().name + "] (" + std::to_string(m.size()) + " tensors)";
}

// Declared in core/routed_local_stage.h; here with the other helpers every
// local stage links (the CUDA stage's tests compile this file in).
block::StagingCause deviceBucketProblem(const std::vector<Request>& members, int device, int* member) {
  using C = block::StagingCause;
  const auto isFloat = [](DataType t) { return t == MGS_FLOAT32 || t == MGS_FLOAT16 || t == MGS_BFLOAT16; };
  for (size_t i = 0; i < members.size(); ++i) {
    const TensorDesc& in = members[i].input;
    const TensorDesc& o = members[i].output;
    C c = C::kNone;
    if (!in.onCuda())
      c = C::kNotCuda;
    else if (in.device != device)
      c = C::kWrongDevice;
    else if (!isFloat(in.dtype))
      c = C::kDtype;
    else if (!o.onCuda() || o.device != device || !isFloat(o.dtype) || o.numel() != in.numel())
      c = C::kOutput;
    else if ((in.data == nullptr || o.data == nullptr) && in.numel() > 0)
      c = C::kNoData;
    if (c != C::kNone) {
      *member = static_cast<int>(i);
      return c;
    }
  }
  *member = -1;
  return C::kNone;
}

Status nonFiniteStatus(int rank, const std::vector<Request>& members, int bad_member, size_t non_finite, size_t n) {
  const std::string bucket = bucketName(members);
  const std::string what = bad_member >= 0 ? "tensor '" + members[bad_member].name + "'" : bucket;
  return Status(Code::kNumeric, "rank " + std::to_string(rank) + ": non-finite gradient in " + what +
                                    (members.size() > 1 ? " (in " + bucket + ")" : "") + ": " +
                                    std::to_string(non_finite) + " of " + std::to_string(n) +
                                    " values are NaN or Inf after adding the residual");
}

bool CpuLocalStage::readsInPlace(const std::vector<Request>& members) {
  for (const Request& m : members) {
    const DataType t = m.input.dtype;
    if (m.input.onCuda() || (t != MGS_FLOAT32 && t != MGS_FLOAT16 && t != MGS_BFLOAT16)) return false;
  }
  return true;
}

int CpuLocalStage::firstNonFiniteMember(const std::vector<Request>& members, const float* r) {
  // Rare (the bucket fails): recompute each member's acc until one is not finite.
  size_t off = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const Request& m = members[i];
    const size_t cnt = m.input.numel();
    std::vector<float> acc(cnt);
    if (fuseIntoFloat(m.input.data, m.input.dtype, cnt, m.sig.prescale, r + off, acc.data()) > 0)
      return static_cast<int>(i);
    off += cnt;
  }
  return -1;
}

CpuLocalStage::Vec CpuLocalStage::takeSlab(size_t n) {
  // Best fit among the pooled slabs, but not one more than twice too big: a
  // committed slab becomes a residual and keeps its capacity.
  size_t best = slabs_.size();
  for (size_t i = 0; i < slabs_.size(); ++i) {
    const size_t c = slabs_[i]->capacity();
    if (c >= n && c <= 2 * n + 1024 && (best == slabs_.size() || c < slabs_[best]->capacity())) best = i;
  }
  if (best == slabs_.size()) return std::make_shared<std::vector<float>>(n);
  auto s = std::move(slabs_[best]);
  slabs_.erase(slabs_.begin() + static_cast<std::ptrdiff_t>(best));
  s->resize(n);  // within capacity: no allocation, no fill on shrink
  return s;
}

void CpuLocalStage::giveSlab(Vec&& slab) {
  if (!slab || slab.use_count() != 1) return;
  // Buckets in flight plus a few committed ones' predecessors.
  if (slabs_.size() >= opt_.max_slabs) slabs_.erase(slabs_.begin());  // the oldest
  slabs_.push_back(std::move(slab));
}

bool CpuLocalStage::zerosInPlace(const std::vector<Request>& members) {
  for (const Request& m : members)
    if (m.input.onCuda() || m.output.onCuda() || m.input.dtype != MGS_FLOAT32 || m.output.dtype != MGS_FLOAT32 ||
        m.output.data != m.input.data)
      return false;
  return true;
}

Status CpuLocalStage::fuseMembers(const std::vector<Request>& members, const float* r, float* acc, int* bad_member,
                                  size_t* non_finite, bool zero) {
  *bad_member = -1;
  *non_finite = 0;
  size_t off = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const Request& m = members[i];
    const size_t cnt = m.input.numel();
    const void* src = m.input.data;
    if (m.input.onCuda()) {
      stage_.resize(m.input.bytes());
      Status st = device::waitReady(m.input);
      if (st.ok()) st = device::copyToHost(stage_.data(), m.input, stage_.size());
      if (!st.ok())
        return Status(st.code(), "rank " + std::to_string(opt_.rank) + ", tensor '" + m.name + "': " + st.message());
      src = stage_.data();
    }
    size_t bad = 0;
    if (zero) {
      // A chunk at a time, zeroed while it is still in cache: the zeroing
      // costs about a tenth of a separate pass over the tensor.
      constexpr size_t kChunk = 4096;
      float* x = static_cast<float*>(m.output.data);
      for (size_t o = 0; o < cnt; o += kChunk) {
        const size_t c = std::min(kChunk, cnt - o);
        bad += fuseIntoFloat(x + o, MGS_FLOAT32, c, m.sig.prescale, r ? r + off + o : nullptr, acc + off + o);
        std::memset(x + o, 0, c * sizeof(float));
      }
    } else {
      bad = fuseIntoFloat(src, m.input.dtype, cnt, m.sig.prescale, r ? r + off : nullptr, acc + off);
    }
    if (bad && *bad_member < 0) *bad_member = static_cast<int>(i);
    *non_finite += bad;
    off += cnt;
  }
  return Status::OK();
}

void CpuLocalStage::run(const LocalJob& job, LocalOutcome* out) {
  const std::vector<Request>& members = *job.members;
  const size_t n = job.n;
  *out = LocalOutcome{};
  const bool dense = job.dense_acc != nullptr;
  Vec slab;
  float* acc;
  if (dense) {
    acc = job.dense_acc;
  } else {
    slab = takeSlab(n);
    acc = slab->data();
  }
  // Host tensors going sparse: the selector reads the members where they lie
  // and the residual (acc = x * prescale + r written to the slab in its
  // single pass), under the lock; no separate fuse pass. A given sum
  // (job.acc_in, the hierarchical exchange's node sum) is selected from as is.
  const bool given = !dense && job.acc_in != nullptr;
  const bool direct = !dense && !given && job.select && opt_.error_feedback && readsInPlace(members);
  std::unique_lock<std::mutex> lk;
  const float* r = nullptr;  // no residual without error feedback
  if (opt_.error_feedback && !given) {
    lk = opt_.residuals->lock();
    r = opt_.residuals->contiguous(residualMembers(members));
  }
  Status& local = out->status;
  if (given) {
    std::copy(job.acc_in, job.acc_in + n, acc);
  } else if (!direct) {
    const bool zero = job.zero_inputs && !dense && zerosInPlace(members);
    local = fuseMembers(members, r, acc, &out->bad_member, &out->non_finite, zero);
    out->inputs_zeroed = zero;
    if (lk.owns_lock()) lk.unlock();
  }
  if (local.ok() && out->non_finite > 0)
    local = nonFiniteStatus(opt_.rank, members, out->bad_member, out->non_finite, n);
  out->fuse_end = Clock::now();

  if (!dense) {
    if (local.ok() && job.select) {
      out->select_begin = Clock::now();
      const compress::Selector& sel = *job.selector;
      workspace_.resize(sel.workspaceBytes(n));
      compress::SelectArgs a;
      if (direct) {  // else in place: acc holds gradient + residual
        parts_.clear();
        for (const Request& m : members)
          parts_.push_back({m.input.data, m.input.dtype, static_cast<float>(m.sig.prescale), m.input.numel()});
        a.parts = compress::GradientParts{parts_.data(), parts_.size()};
      }
      a.dtype = MGS_FLOAT32;
      a.residualIn = direct ? r : nullptr;
      a.residual = acc;
      a.n = n;
      if (job.index_block) {
        // The agreed exchange: the values go into its allreduce, the index
        // block is broadcast.
        a.outValues = job.agreed_values;
        a.outIndices = block::IndexBlock(job.block, job.cap).indices();
      } else {
        const block::AllgatherBlock b(job.block, job.cap);
        a.outValues = b.values();
        a.outIndices = b.indices();
      }
      a.workspace = workspace_.data();
      a.workspaceBytes = workspace_.size();
      a.step = job.step;
      a.name = job.name;
      compress::SelectResult res;
      local = sel.select(a, &res);
      out->select_end = Clock::now();
      out->selected = true;
      out->k = res.k;
      if (local.ok()) {
        out->count = res.count;
      } else if (direct && local.code() == Code::kNumeric) {
        out->bad_member = firstNonFiniteMember(members, r);
        out->non_finite = res.nonFinite;
        local = nonFiniteStatus(opt_.rank, members, out->bad_member, res.nonFinite, n);
      } else {
        local = Status(local.code(), "rank " + std::to_string(opt_.rank) + ": " + local.message());
      }
      out->reported = res.count;
    }
    if (job.block) {
      const uint64_t header = local.ok() ? out->count : block::failureCode(out->bad_member);
      if (job.index_block) {
        block::IndexBlock(job.block, job.cap).finish(header);
      } else {
        block::AllgatherBlock(job.block, job.cap).finish(header);
      }
    }
    auto s = std::make_unique<CpuSlab>();
    s->v = std::move(slab);
    out->slab = std::move(s);
  }
}

Status CpuLocalStage::extract(LocalSlab& slab, const uint32_t* idx, size_t count, float* vals) {
  float* a = static_cast<CpuSlab&>(slab).v->data();
  for (size_t j = 0; j < count; ++j) {
    vals[j] = a[idx[j]];
    a[idx[j]] = 0.0f;
  }
  return Status::OK();
}

void CpuLocalStage::settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> slab, bool commit) {
  if (!slab) return;
  Vec acc = std::move(static_cast<CpuSlab&>(*slab).v);
  slab.reset();
  if (!commit || !opt_.error_feedback) {
    giveSlab(std::move(acc));
    return;
  }
  Vec old;
  {
    auto lk = opt_.residuals->lock();
    old = opt_.residuals->adopt(residualMembers(members), std::move(acc));
  }
  giveSlab(std::move(old));
}

void CpuLocalStage::zeroResidual(const std::vector<Request>& members) {
  if (!opt_.error_feedback) return;
  auto lk = opt_.residuals->lock();
  size_t n = 0;
  for (const auto& m : members) n += m.input.numel();
  float* r = opt_.residuals->contiguous(residualMembers(members));
  std::fill(r, r + n, 0.0f);
}

Status CpuLocalStage::readSlab(const LocalSlab& slab, float* dst) {
  const auto& v = *static_cast<const CpuSlab&>(slab).v;
  std::copy(v.begin(), v.end(), dst);
  return Status::OK();
}

}  // namespace mgs
