#include "core/executor.h"

#include <cstring>

#include <unistd.h>

#include "common/check.h"
#include "common/logging.h"
#include "core/device.h"
#include "core/fusion.h"
#include "core/handle_table.h"
#include "core/nonfinite.h"

namespace mgs {

double Executor::finalFactor(const Signature& sig) const {
  double f = sig.postscale;
  if (sig.reduce_op == MGS_REDUCE_AVERAGE) f /= comm_.size();
  return f;
}

void Executor::span(const std::vector<Request*>& group, const char* activity, Clock::time_point start,
                    const std::string& args) {
  if (!timeline_) return;
  const auto end = Clock::now();
  for (Request* r : group) timeline_->span(r->name, activity, start, end, args);
}

std::string Executor::allreduceArgs(size_t tensors, size_t bytes) const {
  if (!timeline_) return {};
  return "{\"tensors\":" + std::to_string(tensors) + ",\"bytes\":" + std::to_string(bytes) +
         ",\"fusion_threshold\":" + std::to_string(cycle_threshold_) +
         ",\"fusion_trial\":" + (cycle_trying_ ? "true" : "false") + "}";
}

void Executor::run(std::vector<ReadyOp>& ops) {
  const auto now = Clock::now();
  std::vector<Request*> ok;
  std::vector<const Signature*> sigs;
  std::vector<size_t> bytes;
  std::vector<Request> sparse;
  for (auto& op : ops) {
    if (timeline_) timeline_->span(op.req.name, "NEGOTIATE", op.req.enqueued, now);
    if (!op.status.ok()) {
      complete_(op.req, op.status);
      continue;
    }
    if (sparse_ && sparse_->eligible(op.req.sig)) {
      sparse.push_back(std::move(op.req));
      continue;
    }
    if (sparse_ && op.req.sig.type == OpType::kAllreduce && (op.req.sig.flags & MGS_FLAG_SPARSE_OK))
      sparse_->noteDense(op.req);
    ok.push_back(&op.req);
    sigs.push_back(&op.req.sig);
    bytes.push_back(op.req.input.bytes());
  }
  cycle_threshold_ = fusionThreshold(ok, bytes);
  cycle_trying_ = fusion_trials_ && fusion_trials_->trying();
  for (const auto& idx : fusionGroups(sigs, bytes, cycle_threshold_, fusion_max_tensor_bytes_)) {
    std::vector<Request*> group;
    for (size_t i : idx) group.push_back(ok[i]);
    Request& first = *group[0];
    Status st;
    bool nccl = false;  // a CUDA tensor's collective ran on the device communicator
    switch (first.sig.type) {
      case OpType::kAllreduce:
        if (!first.sig.on_cuda) {
          if (startInFlight(group, &st)) continue;  // completed by poll()
          st = allreduceGroup(group);
        } else if (device::DeviceComm* dc = ncclFor(first)) {
          nccl = true;
          st = group.size() > 1 ? allreduceNcclGroup(group, *dc) : allreduceNccl(first, *dc);
        } else {
          st = group.size() > 1 ? allreduceCudaGroup(group) : allreduceCuda(first);
        }
        break;
      case OpType::kAllgather:
        st = allgather(first);
        break;
      case OpType::kBroadcast:
        if (device::DeviceComm* dc = first.sig.on_cuda ? ncclFor(first) : nullptr) {
          nccl = true;
          st = broadcastNccl(first, *dc);
        } else
          st = broadcast(first);
        break;
      case OpType::kAlltoall:
        st = alltoall(first);
        break;
      case OpType::kReducescatter:
        st = reducescatter(first);
        break;
      case OpType::kBarrier:
      case OpType::kJoin:
        break;  // negotiation already synchronised every rank
      case OpType::kProcessSetAdd:
      case OpType::kProcessSetRemove:
        st = Status(Code::kInternal, "process set changes run in ProcessSetRunner, not on an executor");
        break;
    }
    if (cuda_nccl_ && first.sig.on_cuda && first.sig.type != OpType::kBarrier && first.sig.type != OpType::kJoin)
      (nccl ? cuda_nccl_ : cuda_staged_)->fetch_add(group.size(), std::memory_order_relaxed);
    if (!st.ok())
      st = Status(st.code(), "rank " + std::to_string(comm_.rank()) + ", " + opTypeName(first.sig.type) +
                                 " of tensor '" + first.name + "': " + st.message());
    for (Request* r : group) complete_(*r, st);
  }
  if (sparse_) {
    if (!sparse.empty()) sparse_->submit(std::move(sparse), now);
    sparse_->endCycle(ops.empty());
  }
  poll();
}

int64_t Executor::fusionThreshold(const std::vector<Request*>& ok, const std::vector<size_t>& bytes) {
  if (!fusion_trials_) return config_.fusion_threshold_bytes;
  // Off, or the trials are over: the threshold stands, nothing to look at.
  if (fusion_trials_->done()) return fusion_trials_->threshold();
  std::vector<const std::string*> names;
  std::vector<size_t> sizes;
  std::vector<char> fusable;
  for (size_t i = 0; i < ok.size(); ++i) {
    if (ok[i]->sig.type != OpType::kAllreduce) continue;
    names.push_back(&ok[i]->name);
    sizes.push_back(bytes[i]);
    fusable.push_back(bytes[i] < fusion_max_tensor_bytes_);
  }
  const int64_t t = fusion_trials_->onCycle(names, sizes, fusable);
  fusion_threshold_out_->store(static_cast<uint64_t>(t), std::memory_order_relaxed);
  fusion_trials_out_->store(fusion_trials_->trials(), std::memory_order_relaxed);
  return t;
}

bool Executor::startInFlight(std::vector<Request*>& group, Status* st) {
  const Signature& sig = group[0]->sig;
  if (!comm_.asyncCollectives()) return false;
  size_t total = 0;
  // The same answer on every rank (negotiated signatures and sizes), so
  // every rank starts the same collective here, at the same place.
  auto fail = [&](Status s) {
    *st = Status(s.code(), "rank " + std::to_string(comm_.rank()) + ", allreduce of tensor '" + group[0]->name +
                               "': " + s.message());
    for (Request* r : group) complete_(*r, *st);
    return true;
  };
  {
    std::vector<const void*> inputs;
    for (Request* r : group) inputs.push_back(r->input.data);
    Status s = agreeFinite(group, inputs);
    if (!s.ok()) return fail(s);
  }
  InFlight f;
  f.factor = finalFactor(sig);
  f.started = Clock::now();
  if (group.size() > 1 && !wire_pool_.empty()) {
    f.wire = std::move(wire_pool_.back());
    wire_pool_.pop_back();
  }
  void* buf = packGroup(group, &f.wire, &f.counts, &total);
  f.args = allreduceArgs(group.size(), total * dtypeSize(sig.dtype));
  Status s = comm_.startAllreduce(buf, total, sig.dtype, CommOp::kSum, &f.op);
  if (!s.ok()) return fail(s);
  for (Request* r : group) f.reqs.push_back(std::move(*r));
  inflight_.push_back(std::move(f));
  return true;
}

void Executor::finish(InFlight& f, Status st) {
  const Signature& sig = f.reqs[0].sig;
  if (st.ok()) {
    if (timeline_)
      for (auto& r : f.reqs) timeline_->span(r.name, "ALLREDUCE", f.started, Clock::now(), f.args);
    std::vector<void*> outputs;
    for (auto& r : f.reqs) outputs.push_back(r.output.data);
    unpackGroup(outputs, sig.dtype, f.factor, f.wire, f.counts);
  } else {
    st = Status(st.code(), "rank " + std::to_string(comm_.rank()) + ", allreduce of tensor '" + f.reqs[0].name +
                               "': " + st.message());
  }
  for (auto& r : f.reqs) complete_(r, st);
  if (f.wire.capacity()) wire_pool_.push_back(std::move(f.wire));
}

void Executor::poll() {
  if (in_poll_) return;
  in_poll_ = true;
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    bool done = false;
    Status st = it->op->test(&done);
    if (!st.ok() || done) {
      InFlight f = std::move(*it);
      it = inflight_.erase(it);
      finish(f, st);
    } else {
      ++it;
    }
  }
  in_poll_ = false;
}

void Executor::drain() {
  while (!inflight_.empty()) {
    InFlight f = std::move(inflight_.front());
    inflight_.pop_front();
    finish(f, f.op->wait());
  }
}

void Executor::failInFlight(const Status& st) {
  for (auto& f : inflight_) {
    for (auto& r : f.reqs) complete_(r, st);
    (void)f.op.release();
    new std::vector<char>(std::move(f.wire));  // MPI may still write into it
  }
  inflight_.clear();
}

Status Executor::agreeFinite(const std::vector<Request*>& group, const std::vector<const void*>& inputs) {
  // Under 'propagate' NaN/Inf simply flow through the sum. The check runs or
  // not on every rank alike (a kSame setting, the negotiated dtype).
  const DataType dtype = group[0]->sig.dtype;
  if (config_.nonfinite != "error" || !dtypeIsFloat(dtype)) return Status::OK();
  // Each rank's first member with NaN/Inf (-1: none), gathered so every rank
  // can name every bad rank and tensor: one small collective per group.
  int64_t mine = -1;
  size_t bad = 0;
  for (size_t i = 0; i < group.size() && mine < 0; ++i) {
    bad = countNonFinite(inputs[i], dtype, group[i]->input.numel());
    if (bad) mine = static_cast<int64_t>(i);
  }
  std::vector<int64_t> all(static_cast<size_t>(comm_.size()));
  MGS_RETURN_IF_ERROR(comm_.allgather(&mine, sizeof mine, all.data()));
  std::string failed;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] < 0) continue;
    MGS_ENSURE(all[r] < static_cast<int64_t>(group.size()), kCommunication,
               "rank " << r << " reported member " << all[r] << " of a group of " << group.size());
    const Request& m = *group[static_cast<size_t>(all[r])];
    failed += std::string(failed.empty() ? "" : "; ") + "rank " + std::to_string(r) + " has NaN or Inf in tensor '" +
              m.name + "'" +
              (static_cast<int>(r) == comm_.rank()
                   ? " (" + std::to_string(bad) + " of " + std::to_string(m.input.numel()) + " values)"
                   : "");
  }
  if (failed.empty()) return Status::OK();
  return Status(Code::kNumeric, "non-finite input: " + failed + "; nothing was reduced (MGS_NONFINITE=error)");
}

void* Executor::packGroup(const std::vector<Request*>& group, std::vector<char>* wire, std::vector<size_t>* counts,
                          size_t* total) {
  const Signature& sig = group[0]->sig;
  counts->clear();
  *total = 0;
  for (Request* r : group) {
    counts->push_back(r->input.numel());
    *total += counts->back();
  }
  if (group.size() == 1) {
    // Unfused: reduced in place in the output, no extra copy.
    Request& r = *group[0];
    if (r.output.data != r.input.data && *total) std::memcpy(r.output.data, r.input.data, r.input.bytes());
    scaleHost(r.output.data, sig.dtype, *total, sig.prescale);
    return r.output.data;
  }
  const auto t0 = Clock::now();
  std::vector<const void*> inputs;
  for (Request* r : group) inputs.push_back(r->input.data);
  packFusion(inputs, *counts, sig.dtype, sig.prescale, wire);
  span(group, "MEMCPY_IN_FUSION_BUFFER", t0);
  return wire->data();
}

void Executor::unpackGroup(const std::vector<void*>& outputs, DataType dtype, double factor, std::vector<char>& wire,
                           const std::vector<size_t>& counts) {
  if (outputs.size() == 1)
    scaleHost(outputs[0], dtype, counts[0], factor);
  else
    unpackFusion(wire, dtype, factor, outputs, counts);
}

Status Executor::allreduceGroup(std::vector<Request*>& group) {
  const Signature& sig = group[0]->sig;
  {
    std::vector<const void*> inputs;
    for (Request* r : group) inputs.push_back(r->input.data);
    MGS_RETURN_IF_ERROR(agreeFinite(group, inputs));
  }
  std::vector<size_t> counts;
  size_t total = 0;
  void* buf = packGroup(group, &wire_, &counts, &total);
  auto t0 = Clock::now();
  MGS_RETURN_IF_ERROR(comm_.allreduce(buf, total, sig.dtype, CommOp::kSum));
  span(group, "ALLREDUCE", t0, allreduceArgs(group.size(), total * dtypeSize(sig.dtype)));
  t0 = Clock::now();
  std::vector<void*> outputs;
  for (Request* r : group) outputs.push_back(r->output.data);
  unpackGroup(outputs, sig.dtype, finalFactor(sig), wire_, counts);
  if (group.size() > 1) span(group, "MEMCPY_OUT_FUSION_BUFFER", t0);
  return Status::OK();
}

namespace {
// Physical memory of this host: an allgather result larger than this cannot
// be held, and with memory overcommit the allocation itself would succeed and
// the OOM killer strike only when the collective writes it.
size_t physicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return SIZE_MAX;
  return static_cast<size_t>(pages) * static_cast<size_t>(page);
}

bool tryResize(std::vector<char>* v, size_t n) {
  try {
    v->resize(n);
    return true;
  } catch (const std::exception&) {  // bad_alloc, length_error
    return false;
  }
}
}  // namespace

Status Executor::agreeAllocation(const Request& r, size_t bytes, HostBuffer* out, const char* what,
                                 const std::string& failed_before) {
  const int size = comm_.size();
  int64_t failed = size;  // lowest rank that cannot hold the result, or size
  std::string why = failed_before;
  if (!why.empty()) {
  } else if (bytes > physicalMemory()) {
    why = "the " + std::string(what) + " (" + std::to_string(bytes) + " bytes) exceeds this host's " +
          std::to_string(physicalMemory()) + " bytes of memory";
  } else if (!out->allocate(bytes)) {
    why = "could not allocate " + std::to_string(bytes) + " bytes for the " + what;
  }
  if (!why.empty()) {
    failed = comm_.rank();
    MGS_LOG_ERROR("rank {}, {} of tensor '{}': {}", comm_.rank(), opTypeName(r.sig.type), r.name, why);
  }
  MGS_RETURN_IF_ERROR(comm_.allreduce(&failed, 1, MGS_INT64, CommOp::kMin));
  if (failed == size) return Status::OK();
  out->allocate(0);
  if (failed == comm_.rank()) return Status(Code::kUnsupported, why);
  return Status(Code::kUnsupported, "rank " + std::to_string(failed) + " cannot take part (its log says why)");
}

Status Executor::allgather(Request& r) {
  const int size = comm_.size();
  auto t0 = Clock::now();
  int64_t dim0 = r.input.shape[0];
  std::vector<int64_t> dims(size);
  MGS_RETURN_IF_ERROR(comm_.allgather(&dim0, sizeof dim0, dims.data()));
  // Every rank holds the same dims now: a layout error fails on every rank.
  AllgatherLayout layout;
  MGS_RETURN_IF_ERROR(allgatherLayout(r.input.shape, r.input.dtype, dims, &layout));
  // Allocation can fail on one rank only (hosts differ): agree on it before
  // the collective, so no rank enters the allgather alone. The agreement is
  // one 8-byte allreduce per allgather, which is not a hot path.
  AllgatherResult& out = r.handle->allgather;
  int64_t failed = size;  // lowest rank that cannot hold the result, or size
  std::string why;
  if (layout.total_bytes > physicalMemory()) {
    why = "the result (" + std::to_string(layout.total_bytes) + " bytes) exceeds this host's " +
          std::to_string(physicalMemory()) + " bytes of memory";
  } else if (!out.data.allocate(layout.total_bytes)) {
    why = "could not allocate " + std::to_string(layout.total_bytes) + " bytes for the result";
  } else if (r.input.onCuda() && !tryResize(&stage_, r.input.bytes())) {
    why = "could not allocate " + std::to_string(r.input.bytes()) + " bytes of host staging";
  }
  if (!why.empty()) {
    failed = comm_.rank();
    MGS_LOG_ERROR("rank {}, allgather of tensor '{}': {}", comm_.rank(), r.name, why);
  }
  MGS_RETURN_IF_ERROR(comm_.allreduce(&failed, 1, MGS_INT64, CommOp::kMin));
  if (failed != size) {
    out.data.allocate(0);
    if (failed == comm_.rank()) return Status(Code::kUnsupported, why);
    return Status(Code::kUnsupported, "rank " + std::to_string(failed) + " cannot hold the result of " +
                                          std::to_string(layout.total_bytes) + " bytes (its log says why)");
  }
  const void* send = r.input.data;
  if (r.input.onCuda()) {
    MGS_RETURN_IF_ERROR(device::waitReady(r.input));
    MGS_RETURN_IF_ERROR(device::copyToHost(stage_.data(), r.input, r.input.bytes()));
    send = stage_.data();
  }
  MGS_RETURN_IF_ERROR(comm_.allgatherv(send, layout.rank_bytes[comm_.rank()], out.data.data(), layout.rank_bytes));
  out.rank_sizes = dims;
  out.shape = r.input.shape;
  out.shape[0] = layout.rows;
  span({&r}, "ALLGATHER", t0);
  return Status::OK();
}

Status Executor::broadcast(Request& r) {
  auto t0 = Clock::now();
  const size_t bytes = r.input.bytes();
  const bool root = comm_.rank() == r.sig.root;
  if (!r.input.onCuda()) {
    MGS_RETURN_IF_ERROR(comm_.broadcast(r.input.data, bytes, r.sig.root));
  } else {
    stage_.resize(bytes);
    // Every rank waits: non-roots overwrite the buffer the framework produced.
    MGS_RETURN_IF_ERROR(device::waitReady(r.input));
    if (root) MGS_RETURN_IF_ERROR(device::copyToHost(stage_.data(), r.input, bytes));
    MGS_RETURN_IF_ERROR(comm_.broadcast(stage_.data(), bytes, r.sig.root));
    if (!root) MGS_RETURN_IF_ERROR(device::copyFromHost(r.input, stage_.data(), bytes));
  }
  span({&r}, "BROADCAST", t0);
  return Status::OK();
}

}  // namespace mgs
