#include "core/block_exchange.h"

#include <cmath>
#include <cstring>

#include "common/check.h"

namespace mgs {

unsigned allowedExchanges(const Config& config, int P) {
  // 'auto' chooses between the exchanges that apply what MGS_DENSITY says:
  // the allgather (every rank's k entries, their union applied) and, where
  // MGS_DENSE_FALLBACK allows, dense. The agreed exchange applies k entries
  // in all and the hierarchical one k per node: at the same density they
  // compress up to P (or ranks-per-node) times more; on digits the agreed
  // one ended 0.8 points further from dense than the allgather at density
  // 0.01 (eight seeds) and 2.5-3.3 at 0.001 (docs/convergence.md). A job gets them by name only, so a
  // choice made by timing never changes what training converges to.
  unsigned allowed = config.exchange == "agreed"         ? plan::kExchangeAgreed
                     : config.exchange == "hierarchical" ? plan::kExchangeHierarchical
                                                         : plan::kExchangeAllgather;
  if (P == 1) allowed = plan::kExchangeAllgather;  // one rank: nothing to agree on
  if (config.dense_fallback) allowed |= plan::kExchangeDense;
  return allowed;
}

std::vector<char> BlockExchange::takeBuffer(size_t bytes) {
  std::vector<char> b;
  if (!pool_.empty()) {
    b = std::move(pool_.back());
    pool_.pop_back();
  }
  if (b.size() < bytes) b.resize(bytes, 0);  // zero-filled: padding is sent but never read
  return b;
}

void BlockExchange::giveBuffer(std::vector<char>&& b) {
  if (!b.empty() && pool_.size() < 2 * kMaxInFlight + 2) pool_.push_back(std::move(b));
}

void BlockExchange::start(Allgather& a) {
  const int P = comm_.size();
  const size_t bb = a.blockBytes();
  a.recv = takeBuffer(bb * P);
  // Pooled buffers hold old blocks: clear the seals (sparse_block.h).
  for (int r = 0; r < P; ++r) block::AllgatherBlock(a.recv.data() + r * bb, a.cap).clearSeal();
  a.started = Clock::now();
  a.start = comm_.startAllgather(a.send.data(), bb, a.recv.data(), &a.op);
}

bool BlockExchange::ready(Allgather& a) {
  if (a.start.ok() && a.op) {
    bool done = false;
    Status st = a.op->test(&done);
    if (st.ok() && !done) return false;
  }
  return true;
}

Status BlockExchange::finish(Allgather& a) {
  Status st = a.start;
  if (st.ok() && a.op) st = a.op->wait();
  a.op.reset();
  return st;
}

Status BlockExchange::validate(const Allgather& a, size_t n, size_t members, const std::string& name) const {
  std::string bad;
  const int blocks = a.blocks > 0 ? a.blocks : comm_.size();
  for (int r = 0; r < blocks && bad.empty(); ++r) {
    const block::ConstAllgatherBlock b = a.received(r);
    const std::string who = (a.blocks > 0 ? "the leader of node " : "rank ") + std::to_string(r) + " sent ";
    if (!b.sealed()) {
      bad = who + "a short or torn block (its end marker is missing; expected " + std::to_string(b.bytes()) + " bytes)";
      break;
    }
    const uint64_t header = b.header();
    const block::Header h = block::decodeHeader(header, a.cap, members);
    if (h.kind == block::Header::kInvalid)
      bad = who + "a count of " + std::to_string(header) + " above the block's capacity " + std::to_string(a.cap);
    if (h.kind != block::Header::kCount) continue;
    const float* v = b.values();
    const char* idx = reinterpret_cast<const char*>(b.indices());
    for (uint64_t j = 0; j < h.count; ++j) {
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

void BlockExchange::release(Allgather& a) {
  giveBuffer(std::move(a.send));
  giveBuffer(std::move(a.recv));
}

void BlockExchange::abandon(Allgather& a) {
  (void)a.op.release();
  (void)new std::vector<char>(std::move(a.recv));
  (void)new std::vector<char>(std::move(a.send));
}

Status BlockExchange::startIndexBroadcast(std::vector<char>& buf, size_t cap, int leader,
                                          std::unique_ptr<PendingCollective>* op) {
  return comm_.startBroadcast(buf.data(), block::indexBytes(cap), leader, op);
}

Status BlockExchange::checkIndex(const std::vector<char>& buf, size_t cap, int leader, size_t n, size_t members,
                                 const std::string& name) {
  const block::ConstIndexBlock b(buf.data(), cap);
  const uint64_t header = b.header();
  const block::Header h = block::decodeHeader(header, cap, members);
  std::string bad;
  if (!b.sealed()) {
    bad = "a short or torn index block (its end marker is missing; expected " + std::to_string(b.bytes()) + " bytes)";
  } else if (h.kind == block::Header::kInvalid) {
    bad = "a count of " + std::to_string(header) + " above the block's capacity " + std::to_string(cap);
  } else if (h.kind == block::Header::kCount) {
    // No index twice: a duplicate would contribute an entry twice and break
    // conservation. seen_ is n bits, left zeroed.
    seen_.resize((n + 63) / 64, 0);
    const char* idx = reinterpret_cast<const char*>(b.indices());
    size_t j = 0;
    for (; j < h.count && bad.empty(); ++j) {
      uint32_t i;
      std::memcpy(&i, idx + 4 * j, 4);
      if (i >= n) {
        bad = "index " + std::to_string(i) + " at position " + std::to_string(j) + " (the bucket has " +
              std::to_string(n) + " elements)";
      } else if (seen_[i >> 6] & (uint64_t{1} << (i & 63))) {
        bad = "index " + std::to_string(i) + " twice (again at position " + std::to_string(j) + ")";
      } else {
        seen_[i >> 6] |= uint64_t{1} << (i & 63);
      }
    }
    for (size_t q = 0; q < j; ++q) {  // leave the bitmap zeroed (the indices read so far are < n)
      uint32_t i;
      std::memcpy(&i, idx + 4 * q, 4);
      if (i < n) seen_[i >> 6] &= ~(uint64_t{1} << (i & 63));
    }
  }
  if (bad.empty()) return Status::OK();
  return Status(Code::kCommunication, "sparse allreduce of " + name + " (agreed exchange): leader rank " +
                                          std::to_string(leader) + " sent a malformed index block: " + bad);
}

int BlockExchange::agreedLeader(const std::string& name) const {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: the same on every rank and build (std::hash need not be)
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  const uint64_t turns = progress_->agreedTurns(name);
  return static_cast<int>((h + turns) % static_cast<uint64_t>(comm_.size()));
}

void BlockExchange::agreedApplied(const std::string& name) { progress_->agreedApplied(name); }

}  // namespace mgs
