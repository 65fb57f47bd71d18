// The agreed-index exchange of the sparse pipeline (ScaleCom's CLT-k idea,
// docs/architecture.md "Exchanges"), and the per-bucket choice between it,
// the fixed-block allgather (sparse_exchange.cc) and a dense allreduce.
//
// Per bucket, one leader rank (rotating with the bucket sequence number, the
// same on every rank because buckets run in negotiated order) selects from
// its accumulator with the configured selector. It broadcasts a fixed-size
// index block [header | indices[cap] | seal]; every rank gathers its own
// accumulator's values at those indices, zeroes exactly those entries of its
// residual, and the cap values (zero padded) plus two flag slots are summed
// by one allreduce. Per-rank traffic is about 4*cap (broadcast) + 2*4*cap
// (ring allreduce) bytes whatever P is, against 8*cap*P for the allgather;
// and only the leader runs the selector.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "common/check.h"
#include "core/sparse_pipeline.h"

namespace mgs {
namespace {

constexpr uint64_t kIndexSeal = 0x6d67732d69647821ull;  // "mgs-idx!"

// Checks the received index block before anything is gathered: the seal, the
// header (a count <= cap or a failure code), every index < n and no index
// twice (a duplicate would contribute an entry twice and break conservation).
// Every rank holds the same bytes, so every rank takes the same verdict.
// `seen` is a zeroed bitmap of n bits, left zeroed.
Status validateIndexBlock(const char* block, size_t cap, size_t n, size_t members, int leader,
                          std::vector<uint64_t>& seen, const std::string& name) {
  const size_t bytes = 16 + 4 * cap;
  uint64_t header, seal;
  std::memcpy(&header, block, 8);
  std::memcpy(&seal, block + bytes - 8, 8);
  std::string bad;
  if (seal != (header ^ kIndexSeal)) {
    bad = "a short or torn index block (its end marker is missing; expected " + std::to_string(bytes) + " bytes)";
  } else if (header > cap && header != UINT64_MAX && UINT64_MAX - 1 - header >= members) {
    bad = "a count of " + std::to_string(header) + " above the block's capacity " + std::to_string(cap);
  } else if (header <= cap) {
    seen.resize((n + 63) / 64, 0);
    const char* idx = block + 8;
    size_t j = 0;
    for (; j < header && bad.empty(); ++j) {
      uint32_t i;
      std::memcpy(&i, idx + 4 * j, 4);
      if (i >= n) {
        bad = "index " + std::to_string(i) + " at position " + std::to_string(j) + " (the bucket has " +
              std::to_string(n) + " elements)";
      } else if (seen[i >> 6] & (uint64_t{1} << (i & 63))) {
        bad = "index " + std::to_string(i) + " twice (again at position " + std::to_string(j) + ")";
      } else {
        seen[i >> 6] |= uint64_t{1} << (i & 63);
      }
    }
    for (size_t q = 0; q < j; ++q) {  // leave the bitmap zeroed (the indices read so far are < n)
      uint32_t i;
      std::memcpy(&i, idx + 4 * q, 4);
      if (i < n) seen[i >> 6] &= ~(uint64_t{1} << (i & 63));
    }
  }
  if (bad.empty()) return Status::OK();
  return Status(Code::kCommunication, "sparse allreduce of " + name + " (agreed exchange): leader rank " +
                                          std::to_string(leader) + " sent a malformed index block: " + bad);
}

}  // namespace

size_t SparsePipeline::indexBlockBytes(size_t cap) { return 16 + 4 * cap; }

unsigned SparsePipeline::allowedExchanges() const {
  // 'auto' leaves the agreed exchange out under MGS_NONFINITE=propagate (the
  // default): its local stage still fuses into the residual in place, so it
  // cannot yet leave a skipped step's residual as it was, and a loss-scaling
  // job must not fail on an overflow step. Asked for by name, it runs (with
  // strict non-finite errors; docs/c-api.md).
  const bool agreed_ok = config_.nonfinite != "propagate";
  unsigned allowed = config_.exchange == "allgather" ? plan::kExchangeAllgather
                     : config_.exchange == "agreed"  ? plan::kExchangeAgreed
                     : agreed_ok                     ? plan::kExchangeAllgather | plan::kExchangeAgreed
                                                     : plan::kExchangeAllgather;
  if (comm_.size() == 1) allowed = plan::kExchangeAllgather;  // one rank: nothing to agree on
  if (config_.dense_fallback) allowed |= plan::kExchangeDense;
  return allowed;
}

plan::Exchange SparsePipeline::pickExchange(size_t n, double density) const {
  const int P = comm_.size();
  const unsigned allowed = allowedExchanges();
  if (!have_cost_) {
    // Before the cost model is resolved (profiling steps): the 1/P rule for
    // dense, and for 'auto' the allgather only where it moves fewer bytes
    // than the agreed exchange's two collectives (8*cap*P against ~12*cap).
    if ((allowed & plan::kExchangeDense) && density * P >= 1.0) return plan::Exchange::kDense;
    if ((allowed & plan::kExchangeAllgather) && (!(allowed & plan::kExchangeAgreed) || P <= 2))
      return plan::Exchange::kAllgather;
    return plan::Exchange::kAgreed;
  }
  // The same arithmetic on the same model on every rank (the model is
  // max-reduced or broadcast before use): the same choice everywhere. A copy
  // (a few segments) because density changes during warm-up.
  plan::CostModel m = cost_;
  m.exchanges = allowed;
  m.density = density;
  return m.chooseExchange(static_cast<int64_t>(n));
}

Status SparsePipeline::checkFinite(const std::vector<Request>& members, float* acc, size_t n,
                                   int* bad_member) const {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(acc[i])) acc[i] = 0.0f, ++bad;
  if (bad == 0) return Status::OK();
  *bad_member = firstNonFinite(members);
  const std::string name = bucketName(members);
  const std::string what = *bad_member >= 0 ? "tensor '" + members[*bad_member].name + "'" : name;
  return Status(Code::kNumeric, "rank " + std::to_string(comm_.rank()) + ": non-finite gradient in " + what +
                                    (members.size() > 1 ? " (bucket " + name + ")" : "") + ": " + std::to_string(bad) +
                                    " of " + std::to_string(n) + " values are NaN or Inf (dropped from the residual)");
}

void SparsePipeline::runAgreed(std::vector<Request>& members, size_t n, size_t cap, int leader, size_t count,
                               size_t k, const Status& local, int bad_member, std::vector<char>&& block) {
  const int me = comm_.rank();
  const bool lead = me == leader;
  const std::string name = bucketName(members);
  const size_t bb = indexBlockBytes(cap);
  auto span = [&](const char* what, Clock::time_point t0, const std::string& args = "") {
    if (timeline_)
      for (auto& m : members) timeline_->span(m.name, what, t0, Clock::now(), args);
  };
  if (block.size() < bb) block.resize(bb);
  if (lead) {
    const uint64_t header = local.ok() ? count : failureCode(bad_member);
    const uint64_t seal = header ^ kIndexSeal;
    std::memcpy(block.data(), &header, 8);
    std::memcpy(block.data() + bb - 8, &seal, 8);
  } else {
    std::memset(block.data() + bb - 8, 0, 8);  // a pooled buffer may hold an old seal (see kIndexSeal)
  }
  // The residual slab of this bucket (as the local stage left it: the
  // accumulator on non-leaders, the accumulator minus the selected entries
  // on the leader). The lock is taken only around reads and writes of it.
  auto withSlab = [&](auto&& fn) {
    std::unique_lock<std::mutex> lk;
    float* r = res_.data();
    if (config_.error_feedback) {
      lk = residuals_.lock();
      std::vector<ResidualStore::Member> ms;
      for (const auto& m : members) ms.push_back({&m.name, m.input.numel()});
      r = residuals_.contiguous(ms);
    }
    fn(r);
  };
  const uint32_t* idx = reinterpret_cast<const uint32_t*>(block.data() + 8);
  float* vals = agreed_vals_.data();  // [cap values | kAgreedFlags slots]
  // What this rank took out of its residual, kept apart from `vals` (which
  // the allreduce overwrites with sums), so that a failed bucket puts
  // exactly that back: residual + contributed == acc again.
  // The indices are kept too: the leader's must not be read back from the
  // broadcast buffer, which a broken transport may have overwritten.
  size_t taken = 0;
  agreed_sent_.resize(cap);
  agreed_sent_idx_.resize(cap);
  auto keep = [&](size_t c) {
    taken = c;
    std::copy(vals, vals + c, agreed_sent_.begin());
    std::copy(idx, idx + c, agreed_sent_idx_.begin());
  };
  auto restore = [&] {
    if (taken == 0) return;
    withSlab([&](float* r) {
      for (size_t j = 0; j < taken; ++j) r[agreed_sent_idx_[j]] += agreed_sent_[j];
    });
    taken = 0;
  };
  auto finish = [&](const Status& st) {
    online_.exchangeEnded(Clock::now());  // online re-planning: the step's span
    publishStats();
    for (auto& m : members) complete_(m, st);
    giveBuffer(std::move(block));
  };
  if (lead && local.ok()) keep(count);  // the selector zeroed them

  auto t0 = Clock::now();
  Status st = comm_.broadcast(block.data(), bb, leader);
  span("AGREED_BROADCAST", t0, "{\"cap\":" + std::to_string(cap) + ",\"leader\":" + std::to_string(leader) + "}");
  if (st.ok()) st = validateIndexBlock(block.data(), cap, n, members.size(), leader, touched_, name);
  if (!st.ok()) {
    restore();
    return finish(st);
  }
  uint64_t header;
  std::memcpy(&header, block.data(), 8);
  if (header > cap) {
    // The leader's local part failed: nothing was taken anywhere else.
    if (lead) return finish(local);
    const uint64_t m = UINT64_MAX - 1 - header;  // wraps to huge for UINT64_MAX
    return finish(Status(Code::kNumeric, "sparse allreduce of " + name + " failed: leader rank " +
                                             std::to_string(leader) +
                                             (header != UINT64_MAX && m < members.size()
                                                  ? ": non-finite gradient in tensor '" + members[m].name + "'"
                                                  : ": local error (see that rank's log)")));
  }
  count = header;

  // Gather: non-leaders take their accumulator's values at the agreed
  // indices out of the residual (checked finite in the local part). A rank
  // whose local part failed takes nothing, contributes zeros and raises its
  // flag.
  const Status& mine = local;
  if (!lead && mine.ok()) {
    withSlab([&](float* r) {
      for (size_t j = 0; j < count; ++j) {
        vals[j] = r[idx[j]];
        r[idx[j]] = 0.0f;
      }
    });
    keep(count);
  }
  if (!mine.ok()) std::fill(vals, vals + count, 0.0f);
  std::fill(vals + count, vals + cap, 0.0f);  // padding
  vals[cap] = mine.ok() ? 0.0f : 1.0f;
  vals[cap + 1] = mine.ok() ? 0.0f : static_cast<float>(me + 1);
  vals[cap + 2] = mine.ok() || bad_member < 0 ? 0.0f : static_cast<float>(bad_member + 1);

  t0 = Clock::now();
  st = comm_.allreduce(vals, cap + kAgreedFlags, MGS_FLOAT32, CommOp::kSum);
  span("AGREED_ALLREDUCE", t0, "{\"cap\":" + std::to_string(cap) + "}");
  stats_.dense_bytes += 4 * n;
  if (st.ok() && vals[cap] != 0.0f) {
    // Some rank could not contribute: the bucket fails on every rank (they
    // all read the same sums), each putting back what it took.
    if (!mine.ok()) {
      st = mine;
    } else {
      // Small integers: exact in float whatever the summation order.
      const int failed = static_cast<int>(vals[cap]);
      const int member = static_cast<int>(vals[cap + 2]) - 1;
      std::string who = std::to_string(failed) + " ranks reported a local error (non-finite gradient or staging; "
                        "see their logs)";
      if (failed == 1)
        who = "rank " + std::to_string(static_cast<int>(vals[cap + 1]) - 1) +
              (member >= 0 && member < static_cast<int>(members.size())
                   ? ": non-finite gradient in tensor '" + members[member].name + "'"
                   : ": local error (see that rank's log)");
      st = Status(Code::kNumeric, "sparse allreduce of " + name + " failed: " + who);
    }
  }
  if (!st.ok()) {
    restore();
    return finish(st);
  }

  // Outputs: zero, then the summed value at each agreed index, scaled
  // (average, postscale). Indices are distinct (validated), so no entry is
  // written twice; every rank holds the same sums, so the same outputs.
  t0 = Clock::now();
  const size_t M = members.size();
  offsets_.resize(M + 1);
  dest_.resize(M);
  offsets_[0] = 0;
  for (size_t i = 0; i < M; ++i) offsets_[i + 1] = offsets_[i] + members[i].input.numel();
  bool staged = false;
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
  for (size_t j = 0; j < count; ++j) {
    const uint32_t i = idx[j];
    const size_t b =
        static_cast<size_t>(std::upper_bound(offsets_.begin() + 1, offsets_.end(), i) - offsets_.begin() - 1);
    const float fac = static_cast<float>(outputFactor(members[b]));
    dest_[b][i - offsets_[b]] = fac != 1.0f ? vals[j] * fac : vals[j];
  }
  if (staged)
    for (size_t i = 0; i < M && st.ok(); ++i)
      if (dest_[i] != members[i].output.data) st = writeOutput(members[i], dest_[i], offsets_[i + 1] - offsets_[i]);
  span("SCATTER", t0);
  ++stats_.buckets;
  ++stats_.agreed_buckets;
  stats_.selected += count;
  stats_.target += k;
  // Payload this rank puts on the wire: its values, and the indices if it leads.
  stats_.bytes_sent += 4 * count + (lead ? 4 * count : 0);
  finish(st);
}

}  // namespace mgs
