#include "core/controller.h"

#include <algorithm>
#include <climits>

#include "common/check.h"
#include "common/logging.h"
#include "core/wire.h"

namespace mgs {
namespace {

constexpr uint64_t kNoSlowPathBit = 1;
// Bytes of one report entry besides its name (and an upper bound on the
// shape: at most MGS_MAX_DIMS dimensions).
constexpr size_t kSignatureBytes = 64 + 8 * MGS_MAX_DIMS;
constexpr size_t kMaxReportBytes = size_t{64} << 20;
constexpr uint64_t kNoShutdownBit = 2;

void writeSignature(WireWriter& w, const std::string& name, const Signature& s) {
  w.putString(name);
  w.put(static_cast<uint8_t>(s.type));
  w.put(static_cast<int32_t>(s.dtype));
  w.putShape(s.shape);
  w.put(static_cast<uint8_t>(s.on_cuda));
  w.put(s.reduce_op);
  w.put(s.prescale);
  w.put(s.postscale);
  w.put(s.flags);
  w.put(s.root);
}

bool readSignature(WireReader& r, std::string* name, Signature* s) {
  uint8_t type, cuda;
  int32_t dtype;
  if (!r.getString(name) || !r.get(&type) || !r.get(&dtype) || !r.getShape(&s->shape) || !r.get(&cuda) ||
      !r.get(&s->reduce_op) || !r.get(&s->prescale) || !r.get(&s->postscale) || !r.get(&s->flags) || !r.get(&s->root))
    return false;
  s->type = static_cast<OpType>(type);
  s->dtype = static_cast<DataType>(dtype);
  s->on_cuda = cuda != 0;
  return true;
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
  bool need_slow = comm_.rank() == 0 && !table_.empty();
  std::vector<uint64_t> bits(1 + (cache_.bits() + 63) / 64, 0);
  for (const auto& [name, p] : pending_) {
    if (p.reported) continue;
    // A bit looked up before a slow cycle may have been freed since; such a
    // request was reported in that cycle (above), so this is only a guard.
    const bool cached = p.cache_bit >= 0 && static_cast<size_t>(p.cache_bit) < cache_.bits() &&
                        cache_.nameAt(static_cast<size_t>(p.cache_bit)) == name;
    if (!cached || std::chrono::duration<double>(now - p.req.enqueued).count() > stale_cached_s_) {
      need_slow = true;
      continue;
    }
    bits[1 + p.cache_bit / 64] |= uint64_t{1} << (p.cache_bit % 64);
  }
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
      auto it = pending_.find(cache_.nameAt(id));
      MGS_ENSURE(it != pending_.end(), kInternal,
                 "response cache bit " << id << " set on all ranks but not pending here");
      cache_.touch(id, tick_);
      out->ready.push_back(ReadyOp{std::move(it->second.req), Status::OK()});
      pending_.erase(it);
    }
  }
  return Status::OK();
}

Status Controller::slowPath(CycleResult* out) {
  ++stats_.slow_cycles;
  // Each report is capped so that the gather's total fits MPI's int counts;
  // what does not fit stays unreported and forces the next slow cycle.
  const size_t cap = std::min<size_t>(kMaxReportBytes, INT_MAX / static_cast<size_t>(comm_.size()));
  WireWriter w;
  for (auto& [name, p] : pending_) {
    if (p.reported) continue;
    if (w.str().size() + name.size() + kSignatureBytes > cap && !w.str().empty()) break;
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
    std::string name, message;
    int32_t code;
    MGS_ENSURE(r.getString(&name) && r.get(&code) && r.getString(&message), kInternal,
               "corrupt response list from rank 0");
    auto it = pending_.find(name);
    if (code == static_cast<int32_t>(Code::kOk)) {
      MGS_ENSURE(it != pending_.end(), kInternal, "rank 0 declared '" << name << "' ready but it is not pending here");
      cache_.put(name, it->second.req.sig, tick_);
    } else {
      cache_.erase(name);
      if (it == pending_.end()) continue;  // e.g. a stall abort for a name this rank never sent
    }
    out->ready.push_back(ReadyOp{std::move(it->second.req), Status(static_cast<Code>(code), message)});
    pending_.erase(it);
  }
  return Status::OK();
}

std::string Controller::validate(const std::string& name, const std::vector<Signature>& sigs) const {
  for (size_t r = 1; r < sigs.size(); ++r) {
    std::string m = sigs[0].mismatch(sigs[r], 0, static_cast<int>(r));
    if (!m.empty()) return "tensor '" + name + "': " + m;
  }
  return "";
}

std::string Controller::buildResponses(const std::vector<std::string>& reports) {
  const int size = comm_.size();
  const auto now = Clock::now();
  WireWriter out;
  uint32_t count = 0;
  WireWriter body;
  auto respond = [&](const std::string& name, Code code, const std::string& msg) {
    body.putString(name);
    body.put(static_cast<int32_t>(code));
    body.putString(msg);
    ++count;
  };

  std::vector<std::string> completed;
  for (int rank = 0; rank < size; ++rank) {
    WireReader r(reports[rank]);
    while (!r.atEnd()) {
      std::string name;
      Signature sig;
      if (!readSignature(r, &name, &sig)) {
        MGS_LOG_ERROR("corrupt negotiation message from rank {}", rank);
        break;
      }
      auto [it, fresh] = table_.try_emplace(name);
      Negotiation& n = it->second;
      if (fresh) {
        n.sigs.resize(size);
        n.stall = StallEntry{name, sig.type, std::vector<bool>(size, false), now, {}};
      }
      if (n.stall.submitted[rank]) continue;  // cannot happen: names are unique in flight
      n.stall.submitted[rank] = true;
      n.sigs[rank] = sig;
      if (++n.count == size) completed.push_back(name);
    }
  }
  for (const auto& name : completed) {
    const std::string err = validate(name, table_[name].sigs);
    respond(name, err.empty() ? Code::kOk : Code::kMismatch, err);
    if (!err.empty()) MGS_LOG_ERROR("{}", err);
    table_.erase(name);
  }

  std::vector<StallEntry*> waiting;
  for (auto& [name, n] : table_) waiting.push_back(&n.stall);
  StallVerdict v = stall_.inspect(waiting, now);
  for (const auto& msg : v.warnings) MGS_LOG_WARN("{}", msg);
  for (const auto& [name, msg] : v.aborts) {
    MGS_LOG_ERROR("stall: {}", msg);
    respond(name, Code::kTimeout, msg);
    table_.erase(name);
  }
  out.put(count);
  out.str() += body.str();
  return std::move(out.str());
}

std::vector<Request> Controller::takePending() {
  std::vector<Request> out;
  for (auto& [name, p] : pending_) out.push_back(std::move(p.req));
  pending_.clear();
  return out;
}

}  // namespace mgs
