#include "core/process_set_runner.h"

#include <algorithm>

#include "common/check.h"
#include "common/logging.h"

namespace mgs {

ProcessSetRunner::ProcessSetRunner(Communicator& world, const Config& config, Timeline* timeline,
                                   Executor::Complete complete, ProcessSetTable& table, Controller& controller,
                                   ResidualStore& residuals, SetTotals& totals)
    : world_(world),
      config_(config),
      timeline_(timeline),
      complete_(std::move(complete)),
      table_(table),
      controller_(controller),
      residuals_(residuals),
      totals_(totals),
      set_config_(config) {
  set_config_.plan_file.clear();
  // A calibration file holds the global set's model (its world size); each
  // set measures its own communicator instead.
  if (set_config_.calibration != "off") set_config_.calibration = "auto";
  // MGS_NODE_SIZE and a forced hierarchical exchange describe the global
  // set's ranks; a set groups its ranks by host and lets the cost model
  // choose (hierarchical where the set spans 2+ hosts of 2+ ranks).
  set_config_.node_size = 0;
  if (set_config_.exchange == "hierarchical") set_config_.exchange = "auto";
}

void ProcessSetRunner::run(std::vector<ReadyOp>& ready, Executor& global) {
  std::vector<ReadyOp> world_ops, changes;
  std::map<int32_t, std::vector<ReadyOp>> by_set;
  for (auto& op : ready) {
    const OpType t = op.req.sig.type;
    if (t == OpType::kProcessSetAdd || t == OpType::kProcessSetRemove)
      changes.push_back(std::move(op));
    else if (op.req.sig.process_set == 0)
      world_ops.push_back(std::move(op));
    else
      by_set[op.req.sig.process_set].push_back(std::move(op));
  }
  global.run(world_ops);
  for (auto& [id, ops] : by_set) {
    auto it = sets_.find(id);
    if (it == sets_.end()) {
      for (auto& op : ops)
        complete_(op.req, op.status.ok() ? Status(Code::kInternal, "tensor '" + op.req.name +
                                                                       "': its process set is not known on rank " +
                                                                       std::to_string(world_.rank()))
                                         : op.status);
      continue;
    }
    it->second.exec->run(ops);
  }
  // A sparse set's executor runs every cycle, with or without ops: its
  // schedule counts idle cycles to flush partial buckets (identically on
  // every member: the ready list is negotiated).
  for (auto& [id, set] : sets_) {
    if (!set.sparse || by_set.count(id)) continue;
    std::vector<ReadyOp> none;
    set.exec->run(none);
  }
  poll();
  for (auto& op : changes) {
    Status st = op.status;
    if (st.ok()) st = op.req.sig.type == OpType::kProcessSetAdd ? add(op.req) : remove(op.req);
    complete_(op.req, st);
  }
}

void ProcessSetRunner::poll() {
  for (auto& [id, set] : sets_) {
    set.exec->poll();
    if (set.sparse) set.sparse->poll();
  }
}

void ProcessSetRunner::pumpInFlight() {
  for (auto& [id, set] : sets_)
    if (set.sparse) set.sparse->pumpInFlight();
}

void ProcessSetRunner::drain() {
  for (auto& [id, set] : sets_) {
    set.exec->drain();
    if (set.sparse) set.sparse->drain();
  }
}

void ProcessSetRunner::failInFlight(const Status& st) {
  for (auto& [id, set] : sets_) {
    set.exec->failInFlight(st);
    if (set.sparse) set.sparse->failHeld(Status(st.code(), "held in a sparse bucket: " + st.message()));
  }
}

bool ProcessSetRunner::idle() const {
  return std::all_of(sets_.begin(), sets_.end(), [](const auto& s) {
    return s.second.exec->idle() && (!s.second.sparse || s.second.sparse->idle());
  });
}

Status ProcessSetRunner::createSparse(int32_t id, Set& set) {
  if (config_.compressor == "none") return Status::OK();
  // Collective over the set (cost model): every member adds the set here.
  Status st = SparsePipeline::create(*set.comm, set_config_, residuals_, complete_, &set.sparse, nullptr);
  if (!st.ok()) return Status(st.code(), "the process set's sparse pipeline: " + st.message());
  set.sparse->setTimeline(timeline_);
  // CUDA buckets of a set stage through the host over the set's MPI
  // communicator (the device communicator spans the world).
  set.sparse->setDeviceComm([]() -> device::DeviceComm* { return nullptr; });
  auto last = std::make_shared<SparseStats>();
  SetTotals* totals = &totals_;
  set.sparse->setStatsSink([last, totals](const SparseStats& s) {
    totals->buckets.fetch_add(s.buckets - last->buckets, std::memory_order_relaxed);
    totals->bytes_sent.fetch_add(s.bytes_sent - last->bytes_sent, std::memory_order_relaxed);
    *last = s;
  });
  MGS_LOG_DEBUG("process set {}: sparse pipeline over {} ranks", id, set.comm->size());
  return Status::OK();
}

Status ProcessSetRunner::add(Request& req) {
  const std::vector<int32_t>& ranks = req.sig.ranks;
  // The table is the same on every rank here, so is this verdict.
  const int32_t existing = table_.find(ranks);
  if (existing >= 0) {
    ProcessSetInfo info;
    table_.get(existing, &info);
    return Status(Code::kInvalidArgument, ProcessSetTable::describe(info) + " has these ranks already");
  }
  const bool member = std::binary_search(ranks.begin(), ranks.end(), world_.rank());
  std::unique_ptr<Communicator> sub;
  Status st = world_.split(member ? 0 : -1, world_.rank(), &sub);
  if (!st.ok()) return Status(st.code(), "creating the process set's communicator: " + st.message());
  const int32_t id = table_.add(ranks);
  if (member) {
    Set set;
    set.comm = std::move(sub);
    // A failure here is the set's communicator failing (the settings were
    // checked at init): the set stays known, dense, and the add reports it.
    st = createSparse(id, set);
    if (!st.ok()) set.sparse.reset();
    set.exec = std::make_unique<Executor>(*set.comm, config_, timeline_, set.sparse.get(), complete_, nullptr);
    sets_.emplace(id, std::move(set));
  }
  req.handle->value = id;
  MGS_LOG_DEBUG("added process set {}", id);
  return st;
}

Status ProcessSetRunner::remove(Request& req) {
  const int32_t id = req.sig.root;
  ProcessSetInfo info;
  if (id == 0) return Status(Code::kInvalidArgument, "the global process set (0) cannot be removed");
  if (!table_.get(id, &info))
    return Status(Code::kInvalidArgument, "process set " + std::to_string(id) + " does not exist (never added, or removed)");
  // Ops of the set that have not run yet on some rank: removing the set would
  // leave them waiting forever, so the removal fails on every rank instead.
  const std::string mine = controller_.pendingInSet(id);
  auto held = sets_.find(id);
  // Negotiated, but held in a sparse bucket for the rest of its members (or in flight).
  const bool bucket_busy = held != sets_.end() && held->second.sparse && !held->second.sparse->idle();
  int32_t flag = mine.empty() && !bucket_busy ? 0 : 1;
  std::vector<int32_t> flags(static_cast<size_t>(world_.size()));
  MGS_RETURN_IF_ERROR(world_.allgather(&flag, sizeof flag, flags.data()));
  std::string busy;
  int nbusy = 0;
  for (size_t r = 0; r < flags.size(); ++r)
    if (flags[r]) {
      busy += (busy.empty() ? "" : ", ") + std::to_string(r);
      ++nbusy;
    }
  if (!busy.empty())
    return Status(Code::kInvalidArgument,
                  ProcessSetTable::describe(info) + " cannot be removed: " +
                      (nbusy == 1 ? "rank " + busy + " has" : "ranks " + busy + " have") +
                      " operations in it that have not run yet" +
                      (!mine.empty() ? " (here: tensor '" + mine + "')"
                       : bucket_busy ? std::string(" (here: a sparse bucket)")
                                     : std::string()) +
                      "; synchronize them before removing the set");
  auto it = sets_.find(id);
  if (it != sets_.end()) {
    it->second.exec->drain();
    if (it->second.sparse) it->second.sparse->drain();
    sets_.erase(it);
  }
  table_.remove(id);
  controller_.forgetSet(id);
  MGS_LOG_DEBUG("removed process set {}", id);
  return Status::OK();
}

}  // namespace mgs
