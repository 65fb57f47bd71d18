#include "core/controller.h"

#include <algorithm>
#include <climits>

#include "common/check.h"
#include "common/logging.h"
#include "core/handle_table.h"
#include "core/signature_wire.h"

namespace mgs {
namespace {

constexpr uint64_t kNoSlowPathBit = 1;
constexpr size_t kMaxReportBytes = size_t{64} << 20;
constexpr uint64_t kNoShutdownBit = 2;

// The request a joined rank runs for an allreduce it did not submit: zeros
// in a buffer of its own, in place, with a handle nobody waits for.
Request servedRequest(const std::string& name, const Signature& sig) {
  Request req;
  req.name = name;
  req.sig = sig;
  req.served = true;
  size_t numel = 0, bytes = 0;
  if (!checkedSize(sig.shape, sig.dtype, &numel, &bytes).ok()) bytes = 0;  // checked where it was enqueued
  auto buf = std::make_shared<std::vector<char>>(bytes, 0);
  req.input.data = buf->data();
  req.input.dtype = sig.dtype;
  req.input.shape = sig.shape;
  req.output = req.input;
  req.owner = buf;
  req.handle = std::make_shared<HandleState>();
  req.enqueued = Clock::now();
  return req;
}

}  // namespace

Controller::Controller(Communicator& comm, const Config& config, size_t cache_capacity)
    : comm_(comm),
      config_(config),
      stall_(config.stall_warning_s, config.stall_abort_s),
      // A cached request waiting this long falls back to the slow path so rank
      // 0 learns about it and the stall inspector can name the missing ranks.
      stale_cached_s_(std::min(1.0, config.stall_warning_s / 4)),
      cache_(cache_capacity) {}

ControllerStats Controller::stats() const {
  ControllerStats s = stats_;
  s.cached_names = cache_.size();
  s.cache_evictions = cache_.evictions();
  return s;
}

Status Controller::cycle(std::vector<Request> incoming, int32_t shutdown_word, CycleResult* out) {
  out->ready.clear();
  out->shutdown = false;
  out->shutdown_words.clear();
  ++tick_;
  for (auto& req : incoming) {
    Pending p;
    p.cache_bit = cache_.lookup(req.name, req.sig);
    std::string name = req.name;
    p.req = std::move(req);
    pending_.emplace(std::move(name), std::move(p));
  }

  const auto now = Clock::now();
  bool need_slow = comm_.rank() == 0 && tableNeedsSlowPath();
  std::vector<uint64_t> bits(1 + (cache_.bits() + 63) / 64, 0);
  for (const auto& [name, p] : pending_) {
    // A bit looked up before a slow cycle may have been freed since; such a
    // request was reported in that cycle (above), so this is only a guard.
    const bool cached = p.cache_bit >= 0 && static_cast<size_t>(p.cache_bit) < cache_.bits() &&
                        cache_.nameAt(static_cast<size_t>(p.cache_bit)) == name;
    // Reported in a slow cycle: rank 0 completes it by a later slow cycle,
    // or, if cached, the bit vector may (tableNeedsSlowPath).
    if (p.reported && !cached) continue;
    if (!cached || std::chrono::duration<double>(now - p.req.enqueued).count() > stale_cached_s_) {
      need_slow = true;  // stale: the slow path's stall inspection sees it
      continue;
    }
    bits[1 + p.cache_bit / 64] |= uint64_t{1} << (p.cache_bit % 64);
  }
  // Ops of process sets this rank is not in: its bit never holds them back.
  for (size_t id : cache_.foreignBits()) bits[1 + id / 64] |= uint64_t{1} << (id % 64);
  bits[0] = (need_slow ? 0 : kNoSlowPathBit) | (shutdown_word != 0 ? 0 : kNoShutdownBit);
  MGS_RETURN_IF_ERROR(comm_.allreduce(bits.data(), bits.size(), MGS_INT64, CommOp::kBitAnd));

  if (!(bits[0] & kNoShutdownBit)) {
    // Every rank takes this branch in the same cycle, so one more collective
    // is safe: it tells everyone which ranks stopped and why.
    out->shutdown = true;
    out->shutdown_words.assign(comm_.size(), 0);
    return comm_.allgather(&shutdown_word, sizeof shutdown_word, out->shutdown_words.data());
  }
  if (!(bits[0] & kNoSlowPathBit)) return slowPath(out);

  ++stats_.fast_cycles;
  for (size_t w = 1; w < bits.size(); ++w) {
    for (uint64_t word = bits[w]; word != 0; word &= word - 1) {
      const size_t id = (w - 1) * 64 + static_cast<size_t>(__builtin_ctzll(word));
      cache_.touch(id, tick_);  // on every rank, members or not: the caches stay alike
      if (comm_.rank() == 0) table_.erase(cache_.nameAt(id));  // reported by some ranks, decided by the bits
      if (cache_.foreign(id)) continue;
      auto it = pending_.find(cache_.nameAt(id));
      MGS_ENSURE(it != pending_.end(), kInternal,
                 "response cache bit " << id << " set on all ranks but not pending here");
      out->ready.push_back(ReadyOp{std::move(it->second.req), Status::OK()});
      pending_.erase(it);
    }
  }
  return Status::OK();
}

bool Controller::tableNeedsSlowPath() const {
  // Rank 0 holds ops some ranks reported in a slow cycle. One whose name is
  // cached can still be decided by the bit vector: every rank with it
  // pending sets its bit, reported or not, and a rank that submits it
  // uncached asks for a slow cycle itself. Join and the ops it serves, and
  // the errors rank 0 still owes the ranks of a set, need the slow path.
  if (!poisoned_.empty() || std::any_of(joined_.begin(), joined_.end(), [](bool b) { return b; })) return true;
  for (const auto& [name, n] : table_)
    if (n.stall.type == OpType::kJoin || !cache_.contains(name)) return true;
  return false;
}

Status Controller::slowPath(CycleResult* out) {
  ++stats_.slow_cycles;
  // Each report is capped so that the gather's total fits MPI's int counts;
  // what does not fit stays unreported and forces the next slow cycle.
  const size_t cap = std::min<size_t>(kMaxReportBytes, INT_MAX / static_cast<size_t>(comm_.size()));
  WireWriter w;
  for (auto& [name, p] : pending_) {
    if (p.reported) continue;
    if (w.str().size() + name.size() + kSignatureBytes + 4 * p.req.sig.ranks.size() > cap && !w.str().empty()) break;
    p.reported = true;
    writeSignature(w, name, p.req.sig);
  }
  std::vector<std::string> reports;
  MGS_RETURN_IF_ERROR(comm_.gatherStrings(w.str(), 0, &reports));
  std::string responses;
  if (comm_.rank() == 0) responses = buildResponses(reports);
  MGS_RETURN_IF_ERROR(comm_.broadcastString(&responses, 0));

  WireReader r(responses);
  uint32_t n = 0;
  MGS_ENSURE(r.get(&n), kInternal, "corrupt response list from rank 0");
  for (uint32_t i = 0; i < n; ++i) {
    std::string name, message, served_name;
    int32_t code, process_set;
    uint8_t flags;
    int64_t value;
    Signature served;
    MGS_ENSURE(r.getString(&name) && r.get(&code) && r.getString(&message) && r.get(&process_set) &&
                   r.get(&flags) && r.get(&value) &&
                   (!(flags & kResponseServed) || readSignature(r, &served_name, &served)),
               kInternal, "corrupt response list from rank 0");
    auto it = pending_.find(name);
    if (code == static_cast<int32_t>(Code::kOk)) {
      if (it == pending_.end()) {
        // Not submitted here: an allreduce this (joined) rank serves, or an
        // op of a process set this rank is not in.
        if (flags & kResponseServed) {
          out->ready.push_back(ReadyOp{servedRequest(name, served), Status::OK()});
          continue;
        }
        MGS_ENSURE(process_set != 0, kInternal, "rank 0 declared '" << name << "' ready but it is not pending here");
        if (flags & kResponseCacheable) {
          // Cached here too (as foreign), so every rank's bits mean the same.
          Signature placeholder;
          placeholder.process_set = process_set;
          cache_.put(name, placeholder, tick_, /*foreign=*/true);
        }
        continue;
      }
      if (flags & kResponseCacheable) cache_.put(name, it->second.req.sig, tick_);
      if (it->second.req.handle) it->second.req.handle->value = value;
    } else {
      cache_.erase(name);
      if (it == pending_.end()) continue;  // e.g. a stall abort for a name this rank never sent
    }
    out->ready.push_back(ReadyOp{std::move(it->second.req), Status(static_cast<Code>(code), message)});
    pending_.erase(it);
  }
  return Status::OK();
}

std::string Controller::pendingInSet(int32_t id) const {
  for (const auto& [name, p] : pending_)
    if (p.req.sig.process_set == id) return name;
  return "";
}

std::vector<Request> Controller::takePending() {
  std::vector<Request> out;
  for (auto& [name, p] : pending_) out.push_back(std::move(p.req));
  pending_.clear();
  return out;
}

}  // namespace mgs
