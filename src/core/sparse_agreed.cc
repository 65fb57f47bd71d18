// The agreed-index exchange of the sparse pipeline (ScaleCom's CLT-k idea,
// docs/architecture.md "Exchanges"), and the per-bucket choice between it,
// the fixed-block allgather (sparse_exchange.cc) and a dense allreduce.
//
// Per bucket, one leader rank ((hash of the bucket's name + the times that
// bucket was applied) mod P: the same on every rank whatever order buckets
// are negotiated in, and a skipped step does not move it) selects from
// its accumulator with the configured selector. It broadcasts a fixed-size
// index block [header | indices[cap] | seal]; every rank gathers its own
// accumulator's values at those indices and zeroes exactly those entries,
// and the cap values (zero padded) plus two flag slots are summed by one
// allreduce. Per-rank traffic is about 4*cap (broadcast) + 2*4*cap (ring
// allreduce) bytes whatever P is, against 8*cap*P for the allgather; and
// only the leader runs the selector.
//
// The accumulator is the local stage's scratch slab, shared with the
// allgather (runBucket, sparse_commit.cc): the residual changes only when the
// flags say every rank contributed. A NaN/Inf on any rank raises a flag, so
// every rank reads the same verdict in the same allreduce: under
// MGS_NONFINITE=propagate all outputs NaN and every residual as it was; under
// 'error' MGS_ERR_NUMERIC naming each bad rank and tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "common/check.h"
#include "common/logging.h"
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

int SparsePipeline::agreedLeader(const std::string& name) const {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: the same on every rank and build (std::hash need not be)
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  const auto it = agreed_turns_.find(name);
  const uint64_t turns = it == agreed_turns_.end() ? 0 : it->second;
  return static_cast<int>((h + turns) % static_cast<uint64_t>(comm_.size()));
}

unsigned SparsePipeline::allowedExchanges() const {
  unsigned allowed = config_.exchange == "allgather" ? plan::kExchangeAllgather
                     : config_.exchange == "agreed"  ? plan::kExchangeAgreed
                                                     : plan::kExchangeAllgather | plan::kExchangeAgreed;
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

void SparsePipeline::runAgreed(std::vector<Request>& members, size_t n, size_t cap, int leader, size_t count, size_t k,
                               const Status& local, int bad_member, std::vector<char>&& block,
                               std::shared_ptr<std::vector<float>>&& acc) {
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
  // `acc` is this rank's scratch slab (gradient + residual; on the leader
  // with its selection already zeroed): the residual itself is untouched
  // until every rank holds the same verdict. `commit` then makes acc the
  // residual (sparse_commit.cc), exactly when every rank's values went into
  // the sum; any other end drops it, so the residual is bitwise as before.
  bool flagged = false;  // some rank's flag was raised: the bucket's leader does not rotate
  auto finish = [&](const Status& st, bool commit) {
    if (!flagged) {
      // Bounded (a job may make up new names forever): every rank inserts the
      // same names in the same order, so every rank clears at the same time.
      if (agreed_turns_.size() >= kMaxAgreedTurns && !agreed_turns_.count(name)) agreed_turns_.clear();
      ++agreed_turns_[name];
    }
    online_.exchangeEnded(Clock::now());  // online re-planning: the step's span
    settleResidual(members, std::move(acc), commit);  // before the handles complete: the next step may start
    publishStats();
    for (auto& m : members) complete_(m, st);
    giveBuffer(std::move(block));
  };
  const uint32_t* idx = reinterpret_cast<const uint32_t*>(block.data() + 8);
  float* vals = agreed_vals_.data();  // [cap values | kAgreedFlags slots]

  auto t0 = Clock::now();
  Status st = comm_.broadcast(block.data(), bb, leader);
  span("AGREED_BROADCAST", t0, "{\"cap\":" + std::to_string(cap) + ",\"leader\":" + std::to_string(leader) + "}");
  if (st.ok()) st = validateIndexBlock(block.data(), cap, n, members.size(), leader, touched_, name);
  if (!st.ok()) return finish(st, false);
  uint64_t header;
  std::memcpy(&header, block.data(), 8);
  // A failure code: the leader's local part failed and selected nothing. The
  // allreduce still runs (with no values), because only its flags tell every
  // rank which others failed too.
  count = header <= cap ? header : 0;

  // Gather: the other ranks move their acc's values at the agreed indices
  // into the allreduce (their acc keeps the rest: the new residual). A rank
  // whose local part failed contributes zeros and raises its flag; a
  // non-finite value never enters the sum, so the flags alone decide.
  float* a = acc->data();
  if (!lead && local.ok()) {
    for (size_t j = 0; j < count; ++j) {
      vals[j] = a[idx[j]];
      a[idx[j]] = 0.0f;
    }
  }
  if (!local.ok()) std::fill(vals, vals + count, 0.0f);
  std::fill(vals + count, vals + cap, 0.0f);  // padding
  // Flags: ranks that failed, and of those, failures that are not a
  // non-finite value (staging). Small integers: exact in float whatever the
  // summation order, so every rank reads the same verdict.
  vals[cap] = local.ok() ? 0.0f : 1.0f;
  vals[cap + 1] = local.ok() || bad_member >= 0 ? 0.0f : 1.0f;

  t0 = Clock::now();
  st = comm_.allreduce(vals, cap + kAgreedFlags, MGS_FLOAT32, CommOp::kSum);
  span("AGREED_ALLREDUCE", t0, "{\"cap\":" + std::to_string(cap) + "}");
  stats_.dense_bytes += 4 * n;
  if (!st.ok()) return finish(st, false);
  if (vals[cap] != 0.0f) {
    flagged = true;
    const bool other_error = vals[cap + 1] != 0.0f;
    if (!other_error && propagateNonFinite()) {
      // Loss scaling, as the allgather's finishSparse: every output NaN on
      // every rank, nothing commits.
      MGS_LOG_DEBUG(
          "sparse allreduce of {} (agreed exchange): non-finite gradients on {} rank(s){}; outputs set "
          "to NaN (MGS_NONFINITE=propagate)",
          name, static_cast<int>(vals[cap]), local.ok() ? "" : ", here: " + local.message());
      return finish(writeNaNOutputs(members), false);
    }
    return finish(agreedFailure(members, local, bad_member), false);
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
  finish(st, true);  // every rank's values are in the sum, whatever writing this rank's outputs did
}

Status SparsePipeline::agreedFailure(const std::vector<Request>& members, const Status& local, int bad_member) {
  // The flags said how many ranks failed, not which: one allgather of each
  // rank's failure code names them all, the same text on every rank (as the
  // allgather's blocks do). It runs only on this failure path, on every rank
  // alike (all read the same flags); the steady state pays nothing for it.
  const int P = comm_.size();
  const uint64_t mine = local.ok() ? 0 : failureCode(bad_member);
  counts_.resize(P);
  const std::string what = "sparse allreduce of " + bucketName(members) + " (agreed exchange)";
  Status st = comm_.allgather(&mine, sizeof mine, counts_.data());
  if (!st.ok()) return Status(st.code(), what + " failed and naming the failed ranks failed: " + st.message());
  bool other_error = false;
  const std::string failed = failedRanks(counts_.data(), 0, members, &other_error);
  return failedVerdict(what, failed, other_error, local);
}

}  // namespace mgs
