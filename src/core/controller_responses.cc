// Rank 0's half of the slow path: which reported names are ready on every
// rank that must take part, checked for agreement, plus stalls, process set
// membership and join (see controller.h).
#include "core/controller.h"

#include <algorithm>

#include "common/logging.h"
#include "core/signature_wire.h"

namespace mgs {
namespace {

// Names kept after a rank outside their process set submitted them, waiting
// for the set's other ranks to submit them too (and fail); the oldest go first.
constexpr size_t kMaxPoisoned = 1024;

// Messages about several ranks: "rank 2" or "ranks 0, 3".
std::string ranksText(const std::vector<bool>& mask) {
  std::string list;
  int n = 0;
  for (size_t r = 0; r < mask.size(); ++r)
    if (mask[r]) {
      list += (list.empty() ? "" : ", ") + std::to_string(r);
      ++n;
    }
  return (n == 1 ? "rank " : "ranks ") + list;
}

}  // namespace

bool Controller::membersOf(int32_t id, std::vector<bool>* mask, ProcessSetInfo* info) const {
  const int size = comm_.size();
  ProcessSetInfo set;
  if (id == 0) {
    for (int r = 0; r < size; ++r) set.ranks.push_back(r);
  } else if (sets_ == nullptr || !sets_->get(id, &set)) {
    return false;
  }
  mask->assign(static_cast<size_t>(size), false);
  for (int32_t r : set.ranks)
    if (r >= 0 && r < size) (*mask)[static_cast<size_t>(r)] = true;
  if (info != nullptr) *info = std::move(set);
  return true;
}

void Controller::forgetSet(int32_t id) {
  for (auto it = poisoned_.begin(); it != poisoned_.end();)
    it = it->second.process_set == id ? poisoned_.erase(it) : std::next(it);
  for (auto it = table_.begin(); it != table_.end();)
    it = it->second.process_set == id ? table_.erase(it) : std::next(it);
  cache_.eraseSet(id);
}

std::string Controller::buildResponses(const std::vector<std::string>& reports) {
  const int size = comm_.size();
  const auto now = Clock::now();
  if (joined_.size() != static_cast<size_t>(size)) joined_.assign(static_cast<size_t>(size), false);
  WireWriter body;
  uint32_t count = 0;
  auto respond = [&](const std::string& name, Code code, const std::string& msg, int32_t set, uint8_t flags = 0,
                     int64_t value = 0, const Signature* served = nullptr) {
    body.putString(name);
    body.put(static_cast<int32_t>(code));
    body.putString(msg);
    body.put(set);
    body.put(flags);
    body.put(value);
    if (flags & kResponseServed) writeSignature(body, name, *served);
    ++count;
    if (code == Code::kTimeout)
      MGS_LOG_ERROR("stall: {}", msg);
    else if (code != Code::kOk)
      MGS_LOG_ERROR("{}", msg);
  };
  // The signatures of the ranks that submitted `n` agree (empty) or not.
  auto validate = [&](const std::string& name, const Negotiation& n, const Signature** first) -> std::string {
    int a = -1;
    for (int r = 0; r < size; ++r) {
      if (!n.stall.submitted[static_cast<size_t>(r)]) continue;
      if (a < 0) {
        a = r;
        continue;
      }
      std::string m = n.sigs[static_cast<size_t>(a)].mismatch(n.sigs[static_cast<size_t>(r)], a, r);
      if (!m.empty()) return "tensor '" + name + "': " + m;
    }
    *first = a >= 0 ? &n.sigs[static_cast<size_t>(a)] : nullptr;
    return "";
  };

  std::vector<std::string> completed;
  for (int rank = 0; rank < size; ++rank) {
    WireReader r(reports[static_cast<size_t>(rank)]);
    while (!r.atEnd()) {
      std::string name;
      Signature sig;
      if (!readSignature(r, &name, &sig)) {
        MGS_LOG_ERROR("corrupt negotiation message from rank {}", rank);
        break;
      }
      // A name a rank outside its set submitted: each member that submits it learns why.
      if (auto pz = poisoned_.find(name); pz != poisoned_.end()) {
        respond(name, Code::kInvalidArgument, pz->second.message, pz->second.process_set);
        pz->second.untold[static_cast<size_t>(rank)] = false;
        if (std::none_of(pz->second.untold.begin(), pz->second.untold.end(), [](bool b) { return b; }))
          poisoned_.erase(pz);
        continue;
      }
      auto [it, fresh] = table_.try_emplace(name);
      Negotiation& n = it->second;
      // The global set (most ops) needs no look-up: every rank is in it.
      ProcessSetInfo info;
      std::vector<bool> members;
      if (sig.process_set != 0 && !membersOf(sig.process_set, &members, &info)) {
        table_.erase(it);
        respond(name, Code::kInvalidArgument,
                "tensor '" + name + "' (rank " + std::to_string(rank) + "): process set " +
                    std::to_string(sig.process_set) + " does not exist (never added, or removed)",
                sig.process_set);
        continue;
      }
      if (fresh) {
        n.sigs.resize(static_cast<size_t>(size));
        n.process_set = sig.process_set;
        n.expected = sig.process_set != 0 ? static_cast<int>(info.ranks.size()) : size;
        n.stall = StallEntry{name, sig.type, std::vector<bool>(static_cast<size_t>(size), false), now, {}, members};
      }
      if (sig.process_set != 0 && !members[static_cast<size_t>(rank)]) {
        const std::string msg = "tensor '" + name + "': rank " + std::to_string(rank) + " submitted it to " +
                                ProcessSetTable::describe(info) +
                                ", which it is not in; the op fails on every rank of the set";
        Poisoned pz{msg, sig.process_set, members};
        for (int q = 0; q < size; ++q)
          if (n.stall.submitted[static_cast<size_t>(q)]) pz.untold[static_cast<size_t>(q)] = false;
        respond(name, Code::kInvalidArgument, msg, sig.process_set);
        table_.erase(it);
        if (std::any_of(pz.untold.begin(), pz.untold.end(), [](bool b) { return b; })) {
          if (poisoned_.size() >= kMaxPoisoned) poisoned_.erase(poisoned_.begin());  // bounded
          poisoned_[name] = pz;
        }
        continue;
      }
      if (n.stall.submitted[static_cast<size_t>(rank)]) continue;  // cannot happen: names are unique in flight
      n.stall.submitted[static_cast<size_t>(rank)] = true;
      n.sigs[static_cast<size_t>(rank)] = sig;
      if (sig.type == OpType::kJoin) {
        joined_[static_cast<size_t>(rank)] = true;
        last_joined_ = rank;
      }
      if (++n.count == n.expected) completed.push_back(name);
    }
  }

  // While some rank has joined, ops of the global set: an allreduce of host
  // tensors runs once every rank that has not joined submitted it; any other
  // op fails at once, on the ranks that submitted it so far (as in Horovod:
  // the others, whose unnamed ops may be numbered differently by now, fail
  // when theirs arrive).
  if (std::any_of(joined_.begin(), joined_.end(), [](bool b) { return b; })) {
    std::vector<std::string> done;
    for (auto& [name, n] : table_) {
      if (n.process_set != 0 || n.stall.type == OpType::kJoin || n.count == n.expected) continue;
      bool ready = true;
      std::vector<bool> serving(static_cast<size_t>(size), false);
      for (int r = 0; r < size; ++r) {
        const bool sub = n.stall.submitted[static_cast<size_t>(r)];
        if (!sub && !joined_[static_cast<size_t>(r)]) ready = false;
        serving[static_cast<size_t>(r)] = !sub && joined_[static_cast<size_t>(r)];
      }
      const Signature* sig = nullptr;
      std::string err = validate(name, n, &sig);
      const std::string joined = "tensor '" + name + "': " + ranksText(joined_) +
                                 " joined (join()); a rank that joined takes part only in allreduces";
      if (err.empty() && sig->type != OpType::kAllreduce)
        err = joined + ", not in " + opTypeName(sig->type) + ", so it fails on every rank that submitted it";
      if (!err.empty())
        respond(name, Code::kUnsupported, err, 0);
      else if (ready)
        respond(name, Code::kOk, "", 0, kResponseServed, 0, sig);
      else
        continue;
      done.push_back(name);
    }
    for (const auto& name : done) table_.erase(name);
  }

  for (const auto& name : completed) {
    const Negotiation& n = table_[name];
    const Signature* first = nullptr;
    const std::string err = validate(name, n, &first);
    int64_t value = 0;
    if (err.empty() && n.stall.type == OpType::kJoin) {
      value = last_joined_;
      joined_.assign(static_cast<size_t>(size), false);
      last_joined_ = -1;
    }
    if (err.empty())
      respond(name, Code::kOk, "", n.process_set, kResponseCacheable, value);
    else
      respond(name, Code::kMismatch, err, n.process_set);
    table_.erase(name);
  }

  // A rank may stay joined for long (it ran out of data early): not a stall.
  std::vector<StallEntry*> waiting;
  for (auto& [name, n] : table_)
    if (n.stall.type != OpType::kJoin) waiting.push_back(&n.stall);
  StallVerdict v = stall_.inspect(waiting, now);
  for (const auto& msg : v.warnings) MGS_LOG_WARN("{}", msg);
  for (const auto& [name, msg] : v.aborts) {
    respond(name, Code::kTimeout, msg, table_[name].process_set);
    table_.erase(name);
  }
  WireWriter out;
  out.put(count);
  out.str() += body.str();
  return std::move(out.str());
}

}  // namespace mgs
