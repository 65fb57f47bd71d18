// The exchange half of the sparse pipeline: the fixed-size block each rank
// sends per bucket, the allgathers in flight and their completion (failure
// codes, scatter-add into the outputs, scaling), and the dense fallback.
// The local half (fusing into the residual slab, selection) and the step and
// plan logic are in sparse_pipeline.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "common/check.h"
#include "common/logging.h"
#include "core/device.h"
#include "core/sparse_pipeline.h"

namespace mgs {

// [header | values[cap] | indices[cap] | seal]. The seal (header ^ kSeal) at
// the far end tells a whole block from a short message: the receiver clears
// every seal slot before the allgather, so one that is not rewritten cannot
// match (a cleared 0 would need header == kSeal, itself an invalid header).
namespace {
constexpr uint64_t kSeal = 0x6d67732d626c6b21ull;  // "mgs-blk!"

// Checks the P received blocks of a bucket of n elements before any is used:
// the seal, the header (a count <= cap or a failure code), indices < n and
// finite values. Names the first bad rank.
Status validateBlocks(const char* recv, size_t bb, int P, size_t cap, size_t n, size_t members,
                      const std::string& name) {
  std::string bad;
  for (int r = 0; r < P && bad.empty(); ++r) {
    const char* block = recv + static_cast<size_t>(r) * bb;
    uint64_t header, seal;
    std::memcpy(&header, block, 8);
    std::memcpy(&seal, block + bb - 8, 8);
    const std::string who = "rank " + std::to_string(r) + " sent ";
    if (seal != (header ^ kSeal)) {
      bad = who + "a short or torn block (its end marker is missing; expected " + std::to_string(bb) + " bytes)";
      break;
    }
    // A failure code: UINT64_MAX, or UINT64_MAX - 1 - m for member m.
    if (header > cap) {
      if (header != UINT64_MAX && UINT64_MAX - 1 - header >= members)
        bad = who + "a count of " + std::to_string(header) + " above the block's capacity " + std::to_string(cap);
      continue;
    }
    const float* v = reinterpret_cast<const float*>(block + 8);
    const char* idx = block + 8 + 4 * cap;
    for (uint64_t j = 0; j < header; ++j) {
      uint32_t i;
      std::memcpy(&i, idx + 4 * j, 4);
      if (i >= n) {
        bad = who + "index " + std::to_string(i) + " at position " + std::to_string(j) + " (the bucket has " +
              std::to_string(n) + " elements)";
        break;
      }
      if (!std::isfinite(v[j])) {
        bad = who + "a non-finite value at index " + std::to_string(i);
        break;
      }
    }
  }
  if (bad.empty()) return Status::OK();
  return Status(Code::kCommunication, "sparse allreduce of " + name + ": received a malformed block: " + bad);
}
}  // namespace

size_t SparsePipeline::blockBytes(size_t cap) { return 16 + 8 * cap; }

// Block headers above any count (counts are < 2^32): UINT64_MAX for a failure
// without details, UINT64_MAX - 1 - m for non-finite values in member m.
uint64_t SparsePipeline::failureCode(int bad_member) {
  return bad_member < 0 ? UINT64_MAX : UINT64_MAX - 1 - static_cast<uint64_t>(bad_member);
}

std::vector<char> SparsePipeline::takeBuffer(size_t bytes) {
  std::vector<char> b;
  if (!pool_.empty()) {
    b = std::move(pool_.back());
    pool_.pop_back();
  }
  if (b.size() < bytes) b.resize(bytes, 0);  // zero-filled: padding is sent but never read
  return b;
}

void SparsePipeline::giveBuffer(std::vector<char>&& b) {
  if (!b.empty() && pool_.size() < 2 * kMaxInFlight + 2) pool_.push_back(std::move(b));
}

void SparsePipeline::startSparse(std::vector<Request>& members, size_t n, size_t cap, size_t count, size_t k,
                                 const Status& local, int bad_member, std::vector<char>&& block,
                                 std::shared_ptr<std::vector<float>>&& acc) {
  // One allgather of fixed-size blocks [count | values[cap] | indices[cap] | seal]:
  // cap is the selector's bound (k, or the band's top), so padding costs at
  // most the band width and the count exchange round trip disappears. A rank
  // whose local part failed sends a failure code (failureCode) instead of a
  // count, so every rank fails the bucket together instead of waiting. The exchange runs while the
  // coordinator goes on (the next bucket's selection, negotiation); it is
  // finished in order by poll(), or when too many are in flight.
  const int P = comm_.size();
  if (block.empty()) block = takeBuffer(blockBytes(cap));
  const uint64_t header = local.ok() ? count : failureCode(bad_member);
  std::memcpy(block.data(), &header, sizeof header);
  const uint64_t seal = header ^ kSeal;
  const size_t bb = blockBytes(cap);
  std::memcpy(block.data() + bb - 8, &seal, sizeof seal);
  InFlight f;
  f.members = std::move(members);
  f.n = n;
  f.cap = cap;
  f.count = count;
  f.k = k;
  f.local = local;
  f.acc = std::move(acc);
  f.send = std::move(block);
  f.recv = takeBuffer(bb * P);
  // Pooled buffers hold old blocks: clear the seals (see kSeal).
  for (int r = 0; r < P; ++r) std::memset(f.recv.data() + (r + 1) * bb - 8, 0, 8);
  f.started = Clock::now();
  f.start = comm_.startAllgather(f.send.data(), bb, f.recv.data(), &f.op);
  inflight_.push_back(std::move(f));
  while (inflight_.size() > kMaxInFlight) finishOldest();
  poll();
}

void SparsePipeline::poll() {
  while (!inflight_.empty()) {
    InFlight& f = inflight_.front();
    if (f.start.ok() && f.op) {
      bool done = false;
      Status st = f.op->test(&done);
      if (st.ok() && !done) return;
    }
    finishOldest();
  }
}

void SparsePipeline::drain() {
  while (!inflight_.empty()) finishOldest();
}

void SparsePipeline::finishOldest() {
  InFlight f = std::move(inflight_.front());
  inflight_.pop_front();
  Status st = f.start;
  if (st.ok() && f.op) st = f.op->wait();
  f.op.reset();
  online_.exchanged(OnlineCost::kAllgather, double(blockBytes(f.cap)) * comm_.size(), f.started, Clock::now());
  if (timeline_)
    for (auto& m : f.members)
      timeline_->span(m.name, "ALLGATHER", f.started, Clock::now(), "{\"cap\":" + std::to_string(f.cap) + "}");
  if (st.ok()) st = finishSparse(f);
  if (st.ok() && !f.local.ok() && !f.skipped) st = f.local;
  // Before the handles complete: the next step may enqueue these names.
  // Commit exactly when every rank applied every rank's selection (the same
  // verdict everywhere), even if writing this rank's outputs failed.
  settleResidual(f.members, std::move(f.acc), f.delivered);
  publishStats();
  for (auto& m : f.members) complete_(m, st);
  giveBuffer(std::move(f.send));
  giveBuffer(std::move(f.recv));
}

Status SparsePipeline::exchangeDense(std::vector<Request>& members, size_t n, const Status& local, int bad_member,
                                     bool* sent) {
  // out_ = [acc (n) | one verdict slot per rank]: each rank writes its own
  // slot (0: fine, m + 1: non-finite values in member m, -1: another local
  // error) and zeros in the others, so the one allreduce that sums the
  // gradients also tells every rank every rank's verdict (small integers:
  // exact in float). A rank whose staging failed must still take part.
  const int P = comm_.size();
  float* verdict = out_.data() + n;
  std::fill(verdict, verdict + P, 0.0f);
  if (!local.ok()) verdict[comm_.rank()] = bad_member >= 0 ? static_cast<float>(bad_member + 1) : -1.0f;
  auto t0 = Clock::now();
  stats_.dense_bytes += 4 * n;
  MGS_RETURN_IF_ERROR(comm_.allreduce(out_.data(), n + P, MGS_FLOAT32, CommOp::kSum));
  online_.exchanged(OnlineCost::kAllreduce, 4.0 * (n + P), t0, Clock::now());
  if (timeline_)
    for (auto& m : members) timeline_->span(m.name, "ALLREDUCE_DENSE_BUCKET", t0, Clock::now());
  ++stats_.dense_buckets;
  stats_.bytes_sent += 4 * n;
  std::string failed;
  bool other_error = false;
  for (int r = 0; r < P; ++r) {
    const float v = verdict[r];
    if (v == 0.0f) continue;
    const size_t m = v > 0 ? static_cast<size_t>(v) - 1 : members.size();
    other_error |= m >= members.size();
    failed += std::string(failed.empty() ? "" : "; ") + "rank " + std::to_string(r) +
              (m < members.size() ? ": non-finite gradient in tensor '" + members[m].name + "'"
                                  : ": local error (see that rank's log)");
  }
  if (!failed.empty()) {
    if (!other_error && propagateNonFinite()) {
      MGS_LOG_DEBUG("dense bucket {}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", bucketName(members), failed);
      return writeNaNOutputs(members);
    }
    return failedVerdict("dense allreduce of " + bucketName(members), failed, other_error, local);
  }
  *sent = true;  // on every rank: even if writing this rank's outputs fails below
  t0 = Clock::now();
  size_t off = 0;
  Status st;
  for (auto& m : members) {
    const size_t cnt = m.input.numel();
    float* res = out_.data() + off;
    scaleHost(res, MGS_FLOAT32, cnt, outputFactor(m));
    Status ws = writeOutput(m, res, cnt);
    if (st.ok()) st = ws;
    off += cnt;
  }
  if (timeline_)
    for (auto& m : members) timeline_->span(m.name, "UNFUSE", t0, Clock::now());
  return st;
}

double SparsePipeline::outputFactor(const Request& m) const {
  return m.sig.postscale / (m.sig.reduce_op == MGS_REDUCE_AVERAGE ? comm_.size() : 1);
}

Status SparsePipeline::writeOutput(const Request& m, const float* src, size_t cnt) {
  if (m.output.onCuda()) {
    stage_.resize(m.output.bytes());
    fromFloat(src, m.output.dtype, cnt, stage_.data());
    return device::copyFromHost(m.output, stage_.data(), stage_.size());
  }
  if (static_cast<const void*>(src) != m.output.data) fromFloat(src, m.output.dtype, cnt, m.output.data);
  return Status::OK();
}

Status SparsePipeline::finishSparse(InFlight& f) {
  const int P = comm_.size();
  std::vector<Request>& members = f.members;
  const size_t n = f.n;
  const std::string name = bucketName(members);
  auto span = [&](const char* what, Clock::time_point t0, const std::string& args = "") {
    if (timeline_)
      for (auto& m : members) timeline_->span(m.name, what, t0, Clock::now(), args);
  };
  stats_.dense_bytes += 4 * n;
  const size_t bb = blockBytes(f.cap);
  counts_.resize(P);
  // Every rank holds the same received bytes, so every rank takes the same
  // verdict here: a malformed block fails the bucket on all ranks at once,
  // before anything is written (outputs, the touched_ bitmap).
  MGS_RETURN_IF_ERROR(validateBlocks(f.recv.data(), bb, P, f.cap, n, members.size(), name));
  for (int i = 0; i < P; ++i) std::memcpy(&counts_[i], f.recv.data() + i * bb, sizeof(uint64_t));
  bool other_error = false;  // a failure that is not a non-finite value
  const std::string failed = failedRanks(counts_.data(), f.cap, members, &other_error);
  if (!failed.empty()) {
    // Every rank holds the same headers, so every rank takes this verdict.
    if (!other_error && propagateNonFinite()) {
      // Loss scaling: all outputs NaN on every rank, so the framework's
      // overflow check fires everywhere and the step is skipped; nothing
      // commits, so the residuals stay as they were.
      MGS_LOG_DEBUG("sparse allreduce of {}: {}; outputs set to NaN (MGS_NONFINITE=propagate)", name, failed);
      f.skipped = true;
      return writeNaNOutputs(members);
    }
    return failedVerdict("sparse allreduce of " + name, failed, other_error, f.local);
  }

  // Scatter-add straight into the outputs (host float32) or a staging slice,
  // in rank order from +0, then scale every touched entry once: bitwise the
  // same on every rank, and the same as compress::scatterAdd.
  const auto t0 = Clock::now();
  const size_t M = members.size();
  dest_.resize(M);
  offsets_.resize(M + 1);
  offsets_[0] = 0;
  bool staged = false;
  for (size_t i = 0; i < M; ++i) offsets_[i + 1] = offsets_[i] + members[i].input.numel();
  for (size_t i = 0; i < M; ++i) {
    const Request& m = members[i];
    if (!m.output.onCuda() && m.output.dtype == MGS_FLOAT32) {
      dest_[i] = static_cast<float*>(m.output.data);
    } else {
      if (!staged) out_.resize(n);
      staged = true;
      dest_[i] = out_.data() + offsets_[i];
    }
    std::fill(dest_[i], dest_[i] + (offsets_[i + 1] - offsets_[i]), 0.0f);
  }
  f.delivered = true;  // past every verdict: the scatter below runs on every rank
  auto memberOf = [&](uint32_t idx) {
    return static_cast<size_t>(std::upper_bound(offsets_.begin() + 1, offsets_.end(), idx) - offsets_.begin() - 1);
  };
  touched_.resize((n + 63) / 64, 0);
  for (int r = 0; r < P; ++r) {
    const size_t c = counts_[r];
    const float* v = reinterpret_cast<const float*>(f.recv.data() + r * bb + 8);
    const uint32_t* idx = reinterpret_cast<const uint32_t*>(f.recv.data() + r * bb + 8 + 4 * f.cap);
    for (size_t j = 0; j < c; ++j) {
      const uint32_t i = idx[j];  // < n: validateBlocks
      const size_t b = memberOf(i);
      dest_[b][i - offsets_[b]] += v[j];
      touched_[i >> 6] |= uint64_t{1} << (i & 63);
    }
  }
  for (int r = 0; r < P; ++r) {
    const size_t c = counts_[r];
    const uint32_t* idx = reinterpret_cast<const uint32_t*>(f.recv.data() + r * bb + 8 + 4 * f.cap);
    for (size_t j = 0; j < c; ++j) {
      const uint32_t i = idx[j];
      const uint64_t bit = uint64_t{1} << (i & 63);
      if (!(touched_[i >> 6] & bit)) continue;  // already scaled (a duplicate)
      touched_[i >> 6] &= ~bit;                 // leaves the bitmap all zero
      const size_t b = memberOf(i);
      const float fac = static_cast<float>(outputFactor(members[b]));
      if (fac != 1.0f) dest_[b][i - offsets_[b]] *= fac;
    }
  }
  Status st;
  if (staged) {
    for (size_t i = 0; i < M; ++i) {
      if (dest_[i] == members[i].output.data) continue;
      Status ws = writeOutput(members[i], dest_[i], offsets_[i + 1] - offsets_[i]);
      if (st.ok()) st = ws;
    }
  }
  span("SCATTER_ADD", t0);
  ++stats_.buckets;
  stats_.selected += f.count;
  stats_.target += f.k;
  stats_.bytes_sent += 8 * f.count;
  return st;
}

}  // namespace mgs
