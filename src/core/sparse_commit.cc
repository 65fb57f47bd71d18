// The sparse pipeline's non-finite handling and deferred residual commit
// (declared in sparse_pipeline.h; MGS_NONFINITE in docs/c-api.md).
//
// Why a scratch slab: with error feedback a rank computes acc = gradient +
// residual for every entry before it knows whether another rank had a NaN.
// That addition cannot be undone exactly in floating point (r = acc - x loses
// the low bits of r whenever |x| >> |r|), and a copy of the old residual
// would cost a second write stream. Writing acc to a separate slab costs the
// same read streams as the in-place add and keeps the old residual intact
// until the exchange tells every rank the same verdict; committing is then a
// pointer swap (ResidualStore::adopt), and the old slab is reused as the next
// bucket's scratch.
#include <algorithm>
#include <string>

#include "common/logging.h"
#include "core/device.h"
#include "core/nonfinite.h"
#include "core/sparse_pipeline.h"

namespace mgs {

std::shared_ptr<std::vector<float>> SparsePipeline::takeSlab(size_t n) {
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

void SparsePipeline::giveSlab(std::shared_ptr<std::vector<float>>&& slab) {
  if (!slab || slab.use_count() != 1) return;
  // Buckets in flight plus a few committed ones' predecessors.
  if (slabs_.size() >= 2 * kMaxInFlight + 2) slabs_.erase(slabs_.begin());  // the oldest
  slabs_.push_back(std::move(slab));
}

Status SparsePipeline::fuseMembers(const std::vector<Request>& members, const float* r, float* acc, int* bad_member,
                                   size_t* non_finite) {
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
        return Status(st.code(), "rank " + std::to_string(comm_.rank()) + ", tensor '" + m.name + "': " + st.message());
      src = stage_.data();
    }
    const size_t bad = fuseIntoFloat(src, m.input.dtype, cnt, m.sig.prescale, r ? r + off : nullptr, acc + off);
    if (bad && *bad_member < 0) *bad_member = static_cast<int>(i);
    *non_finite += bad;
    off += cnt;
  }
  return Status::OK();
}

Status SparsePipeline::nonFiniteStatus(const std::vector<Request>& members, int bad_member, size_t non_finite,
                                       size_t n) const {
  const std::string bucket = bucketName(members);
  const std::string what = bad_member >= 0 ? "tensor '" + members[bad_member].name + "'" : bucket;
  return Status(Code::kNumeric, "rank " + std::to_string(comm_.rank()) + ": non-finite gradient in " + what +
                                    (members.size() > 1 ? " (in " + bucket + ")" : "") + ": " +
                                    std::to_string(non_finite) + " of " + std::to_string(n) +
                                    " values are NaN or Inf after adding the residual");
}

std::string SparsePipeline::failedRanks(const uint64_t* codes, size_t cap, const std::vector<Request>& members,
                                        bool* other_error) const {
  std::string failed;
  for (int i = 0; i < comm_.size(); ++i) {
    if (codes[i] <= cap) continue;
    const uint64_t m = UINT64_MAX - 1 - codes[i];  // wraps to huge for UINT64_MAX
    const bool numeric = codes[i] != UINT64_MAX && m < members.size();
    *other_error |= !numeric;
    failed +=
        std::string(failed.empty() ? "" : "; ") + "rank " + std::to_string(i) +
        (numeric ? ": non-finite gradient in tensor '" + members[m].name + "'" : ": local error (see that rank's log)");
  }
  return failed;
}

Status SparsePipeline::failedVerdict(const std::string& what, const std::string& failed, bool other_error,
                                     const Status& local) {
  std::string msg = what + " failed: " + failed;
  if (!other_error) msg += " (MGS_NONFINITE=error: the step was not applied, residuals are unchanged)";
  if (!local.ok()) msg += "; on this rank: " + local.message();
  const Code code = !local.ok() ? local.code() : (other_error ? Code::kInternal : Code::kNumeric);
  return Status(code, msg);
}

void SparsePipeline::settleResidual(const std::vector<Request>& members, std::shared_ptr<std::vector<float>>&& acc,
                                    bool commit) {
  if (!acc) return;
  if (!commit || !config_.error_feedback) {
    giveSlab(std::move(acc));
    return;
  }
  std::vector<ResidualStore::Member> ms;
  for (const auto& m : members) ms.push_back({&m.name, m.input.numel()});
  std::shared_ptr<std::vector<float>> old;
  {
    auto lk = residuals_.lock();
    old = residuals_.adopt(ms, std::move(acc));
  }
  giveSlab(std::move(old));
}

void SparsePipeline::zeroResidual(const std::vector<Request>& members) {
  if (!config_.error_feedback) return;
  auto lk = residuals_.lock();
  std::vector<ResidualStore::Member> ms;
  size_t n = 0;
  for (const auto& m : members) {
    ms.push_back({&m.name, m.input.numel()});
    n += m.input.numel();
  }
  float* r = residuals_.contiguous(ms);
  std::fill(r, r + n, 0.0f);
}

Status SparsePipeline::writeNaNOutputs(const std::vector<Request>& members) {
  Status st;
  for (const auto& m : members) {
    const size_t cnt = m.output.numel();
    Status ws;
    if (m.output.onCuda()) {
      stage_.resize(m.output.bytes());
      fillNaN(stage_.data(), m.output.dtype, cnt);
      ws = device::copyFromHost(m.output, stage_.data(), stage_.size());
    } else {
      fillNaN(m.output.data, m.output.dtype, cnt);
    }
    if (st.ok()) st = ws;
  }
  return st;
}

}  // namespace mgs
