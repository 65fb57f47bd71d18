#include <pthread.h>
#include "core/runtime.h"

#include <algorithm>
#include <cmath>
#include <future>

#include "common/check.h"
#include "common/logging.h"
#include "core/controller.h"
#include "core/device.h"
#include "core/device_backend.h"
#include "core/executor.h"
#include "core/process_set_runner.h"
#include "core/timeline.h"

namespace mgs {
namespace {

// Every rank must run the same math: the parameter table says which settings
// must agree (params.h); name the variable and the ranks that differ.
Status checkConfigAgrees(Communicator& comm, const Config& c) {
  return checkAgreement(c, comm.size(),
                        [&](const void* in, size_t n, void* out) { return comm.allgather(in, n, out); });
}

}  // namespace

Status checkTensor(const std::string& name, const char* role, const TensorDesc& t) {
  MGS_ENSURE(dtypeValid(t.dtype), kInvalidArgument,
             "tensor '" << name << "': " << role << " has invalid dtype " << static_cast<int>(t.dtype));
  for (int64_t d : t.shape)
    MGS_ENSURE(d >= 0, kInvalidArgument,
               "tensor '" << name << "': " << role << " has a negative dimension in shape " << shapeString(t.shape));
  // Every later size computation (fusion, MPI counts, staging) relies on this.
  size_t numel = 0, bytes = 0;
  if (Status st = checkedSize(t.shape, t.dtype, &numel, &bytes); !st.ok())
    return Status(st.code(), "tensor '" + name + "': " + role + " " + st.message());
  MGS_ENSURE(t.data != nullptr || numel == 0, kInvalidArgument,
             "tensor '" << name << "': " << role << " data is NULL but the shape " << shapeString(t.shape) << " has "
                        << t.numel() << " elements");
  Status st = device::checkUsable(t);
  if (!st.ok()) return Status(st.code(), "tensor '" + name + "': " + st.message());
  return Status::OK();
}

Signature signatureOf(OpType type, const TensorDesc& t) {
  Signature s;
  s.type = type;
  s.dtype = t.dtype;
  s.shape = t.shape;
  s.on_cuda = t.onCuda();
  return s;
}

Status Runtime::start(const Config& config, CommFactory factory, std::unique_ptr<Runtime>* out,
                      device::DeviceCommFactory device) {
  std::unique_ptr<Runtime> rt(new Runtime(config));
  std::promise<Status> ready;
  auto ready_future = ready.get_future();
  Runtime* self = rt.get();
  self->device_factory_ = std::move(device);
  rt->thread_ = std::thread([self, factory = std::move(factory), &ready] {
    // A name `top -H` and /proc/<pid>/task/*/comm show, so a user (and
    // bench/train) can see what the coordinator costs next to training.
    pthread_setname_np(pthread_self(), "mgs-coord");
    std::unique_ptr<Communicator> comm;
    std::unique_ptr<SparsePipeline> sparse;
    std::unique_ptr<DeviceBackend> backend;  // declared after comm: destroyed before it
    Status st;
    try {
      st = factory(&comm);
      // The rank and MGS_LOG_LEVEL from here: what init logs (calibration,
      // the cost model) is logged as the rest is.
      if (st.ok()) configureLogging(comm->rank(), self->config_.log_level);
      if (st.ok()) st = checkConfigAgrees(*comm, self->config_);
      // MGS_BACKEND: the same verdict on every rank (core/device_backend.h).
      if (st.ok()) st = DeviceBackend::init(*comm, self->config_, &backend, self->device_factory_);
      // The dense allreduce's algorithm by size, measured (calibration.h),
      // before the sparse pipeline duplicates the communicator and calibrates
      // on it. Not with presets, nor with a saved plan: a replayed run sums
      // as the run that saved it did, whatever the timings say.
      if (st.ok() && self->config_.calibration != "off" && self->config_.plan_file.empty())
        st = chooseAllreduceAlgorithm(*comm, &self->ring_choice_);
      if (st.ok()) self->ring_min_bytes_ = comm->ringMinBytes();
      // The sparse pipeline builds its selector and calibrates here, so a
      // bad setting fails at init, not at the first gradient.
      if (st.ok())
        st = SparsePipeline::create(*comm, self->config_, self->residuals_,
                                    [self](Request& req, Status s) { self->completeRequest(req, std::move(s)); },
                                    &sparse, &self->progress_);
    } catch (const std::exception& e) {
      st = Status(Code::kInternal, std::string("starting the coordinator failed: ") + e.what());
    } catch (...) {
      st = Status(Code::kInternal, "starting the coordinator failed with a non-standard exception");
    }
    if (st.ok()) {
      self->rank_ = comm->rank();
      self->size_ = comm->size();
      self->local_rank_ = comm->localRank();
      self->local_size_ = comm->localSize();
      self->sets_.reset(self->size_);
      configureLogging(self->rank_, self->config_.log_level);
      const RingChoice& rc = self->ring_choice_;
      if (self->rank_ == 0 && rc.measured) {
        std::string times;
        for (size_t i = 0; i < rc.ring_s.size(); ++i)
          times += fmt::format("{}{} KiB {:.2f}/{:.2f} ms", i ? ", " : "", ringChoiceSizes()[i] >> 10,
                               rc.ring_s[i] * 1e3, rc.library_s[i] * 1e3);
        MGS_LOG_INFO(
            "dense allreduce: mgs's ring from {} KiB, Open MPI's below (ring/library at {}); fusing host tensors "
            "below {} KiB (a copy of {} KiB: {:.2f} ms)",
            rc.ring_min_bytes >> 10, times, rc.fusion_max_tensor_bytes >> 10, kFusionCopyBytes >> 10, rc.copy_s * 1e3);
      }
      // What the pipeline resolved at init (MGS_WARMUP_STEPS 'auto') is in
      // the statistics when mgs_init returns, not after the first cycle.
      if (sparse) {
        std::lock_guard<std::mutex> lk(self->stats_mu_);
        self->sparse_stats_ = sparse->stats();
      }
      self->running_ = true;
    }
    ready.set_value(st);
    if (!st.ok()) return;
    try {
      self->loop(std::move(comm), std::move(sparse), std::move(backend));
    } catch (...) {
      // loop() catches per cycle; this is the last line of defence, for a
      // failure while setting up or tearing down (e.g. out of memory).
      self->addHazard("rank " + std::to_string(self->rank_) + ": the coordinator thread failed");
      self->queue_.close("rank " + std::to_string(self->rank_) + ": the coordinator thread failed unexpectedly");
      self->running_ = false;
      self->handles_.completeAll(Status(Code::kInternal, "the coordinator thread failed unexpectedly"));
    }
  });
  Status st = ready_future.get();
  if (!st.ok()) {
    rt->thread_.join();
    return st;
  }
  MGS_LOG_DEBUG("mgs started: rank {}/{} (local {}/{}), {}", rt->rank_, rt->size_, rt->local_rank_, rt->local_size_,
                describeConfig(config));
  // A planner set for a dense job would otherwise be ignored without a word:
  // dense gradients are fused per negotiation cycle (MGS_FUSION_THRESHOLD_BYTES),
  // never planned.
  if (rt->rank_ == 0 && config.compressor == "none" && config.planner != "auto" && config.planner != "fusion")
    MGS_LOG_WARN(
        "MGS_PLANNER={} has no effect without a compressor (MGS_COMPRESSOR=none): dense gradients are fused as they "
        "become ready, up to a threshold per buffer (MGS_FUSION_THRESHOLD_BYTES, tried against others by "
        "MGS_FUSION_TRIALS); the merge planner plans sparse buckets only",
        config.planner);
  *out = std::move(rt);
  return Status::OK();
}

Runtime::~Runtime() { shutdown(); }

void Runtime::shutdown(StopReason reason) {
  int32_t none = 0;
  stop_reason_.compare_exchange_strong(none, static_cast<int32_t>(reason));
  shutdown_requested_ = true;
  queue_.wake();  // the coordinator may be in a long idle wait
  if (thread_.joinable()) thread_.join();
}

namespace {
// The shutdown word a rank sends: its StopReason in the low bits, plus what
// went wrong there before it stopped.
constexpr int32_t kStopAfterStall = 0x10, kStopAfterError = 0x20;

std::string stopText(int32_t word) {
  if (word & kStopAfterStall)
    return "shut down after a stall abort there (one of its operations waited longer than MGS_STALL_ABORT_S "
           "for other ranks)";
  std::string how = (word & 0xF) == static_cast<int32_t>(Runtime::StopReason::kProcessExit) ? "its process exited"
                                                                                            : "it called mgs_shutdown";
  if (word & kStopAfterError) return "shut down after an operation failed there (" + how + ")";
  return "finished normally (" + how + ")";
}

// "rank 2 finished normally (it called mgs_shutdown); ranks 0, 3 ..."
std::string describeStop(const std::vector<int32_t>& words) {
  std::vector<std::pair<std::string, std::string>> groups;  // (text, ranks)
  for (size_t r = 0; r < words.size(); ++r) {
    if (words[r] == 0) continue;
    const std::string text = stopText(words[r]);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == text; });
    if (it == groups.end()) it = groups.insert(groups.end(), {text, ""});
    it->second += (it->second.empty() ? "" : ", ") + std::to_string(r);
  }
  std::string out;
  for (const auto& [text, ranks] : groups)
    out += (out.empty() ? "" : "; ") + std::string(ranks.find(',') == std::string::npos ? "rank " : "ranks ") + ranks +
           " " + text;
  return out;
}
}  // namespace

int32_t Runtime::stopWord() const {
  int32_t w = stop_reason_.load();
  if (w == 0) w = static_cast<int32_t>(StopReason::kShutdownCalled);
  if (saw_stall_) w |= kStopAfterStall;
  if (saw_error_) w |= kStopAfterError;
  return w;
}

void Runtime::addHazard(const std::string& why) {
  std::lock_guard<std::mutex> lk(hazard_mu_);
  if (exit_hazard_.empty()) exit_hazard_ = why;
}

std::string Runtime::exitHazard() const {
  std::lock_guard<std::mutex> lk(hazard_mu_);
  return exit_hazard_;
}

Status Runtime::stoppedStatus() {
  const std::string why = queue_.closedReason();
  return Status(Code::kShutdown,
                "rank " + std::to_string(rank_) + ": " + (why.empty() ? std::string("mgs is not running") : why));
}

void Runtime::completeRequest(Request& req, Status st) {
  if (req.served) {  // run for others while this rank has joined: nobody waits for it here
    req.handle->complete(std::move(st));
    return;
  }
  ops_completed_ += 1;
  if (st.ok() && req.sig.type == OpType::kAllreduce) bytes_reduced_ += req.input.bytes();
  if (st.code() == Code::kTimeout) {
    saw_stall_ = true;
    addHazard("rank " + std::to_string(rank_) + " had an operation aborted as stalled (" + st.message() + ")");
  } else if (!st.ok() && st.code() != Code::kShutdown) {
    saw_error_ = true;
  }
  // Free the name before waking the waiter, so it may reuse the name at once.
  queue_.finish(req.name);
  req.handle->complete(std::move(st));
}

void Runtime::loop(std::unique_ptr<Communicator> comm, std::unique_ptr<SparsePipeline> sparse_owner,
                   std::unique_ptr<DeviceBackend> backend_param) {
  // A local, so that the NCCL communicator goes before its bootstrap `comm`.
  const std::unique_ptr<DeviceBackend> backend = std::move(backend_param);
  std::unique_ptr<Timeline> timeline;
  if (rank_ == 0 && !config_.timeline.empty()) {
    Status st = Timeline::open(config_.timeline, &timeline);
    if (!st.ok()) MGS_LOG_ERROR("{}", st.message());
  }
  Controller controller(*comm, config_);
  controller.setProcessSets(&sets_);
  auto complete = [this](Request& req, Status st) { completeRequest(req, std::move(st)); };
  SparsePipeline& sparse = *sparse_owner;
  sparse.setTimeline(timeline.get());
  sparse.setStatsSink([this](const SparseStats& s) {
    std::lock_guard<std::mutex> lk(stats_mu_);
    sparse_stats_ = s;
  });
  // CUDA sparse buckets use the device communicator where there is one
  // (device buckets, exchange_device.cc); forCuda() creates it under auto.
  sparse.setDeviceComm([b = backend.get()]() -> device::DeviceComm* { return b ? b->forCuda() : nullptr; });
  Executor executor(*comm, config_, timeline.get(), &sparse, complete, backend.get());
  executor.countCudaPaths(&cuda_nccl_ops_, &cuda_staged_ops_);
  executor.tuneFusion(&fusion_threshold_, &fusion_trials_);
  // Tensors fused up to the bound init measured (calibration.h), else 64 KiB.
  executor.setFusionMaxTensorBytes(ring_choice_.fusion_max_tensor_bytes);
  fusion_max_tensor_bytes_ = ring_choice_.fusion_max_tensor_bytes;
  // The algorithm counters from here on: init's calibration is not the job's.
  const Communicator::AllreduceCounts counts0 = comm->allreduceCounts();
  ProcessSetRunner set_runner(*comm, config_, timeline.get(), complete, sets_, controller, residuals_, set_totals_);
  // Requests of a process set removed after they were enqueued fail here,
  // on this rank alone (every rank has removed it by now).
  auto drainKnown = [&] {
    std::vector<Request> out;
    ProcessSetInfo info;
    for (auto& r : queue_.drain()) {
      if (r.sig.process_set != 0 && !sets_.get(r.sig.process_set, &info))
        completeRequest(r, Status(Code::kInvalidArgument, "tensor '" + r.name + "': process set " +
                                                              std::to_string(r.sig.process_set) +
                                                              " was removed before it could run"));
      else
        out.push_back(std::move(r));
    }
    return out;
  };
  const auto cycle =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(config_.cycle_time_ms));
  const std::string me = "rank " + std::to_string(rank_);
  // Every blocking wait of this rank moves the agreed and hierarchical
  // exchanges' phases on (exchange_agreed.cc: a rank blocked in a collective
  // must not hold back a phase another rank waits for). While negotiating -- the coordinator's
  // usual wait, between the cycle's own steps -- it also completes what has
  // finished, so a finished exchange is not held for a negotiation round.
  bool negotiating = false;
  comm->setWaitHook([&] {  // shared by the sets' communicators (split from comm)
    sparse.pumpInFlight();
    set_runner.pumpInFlight();
    if (negotiating) {
      executor.poll();
      set_runner.poll();
      sparse.poll();
    }
  });

  Status fatal;
  std::string why = "mgs has shut down";
  while (true) {
    const auto t0 = Clock::now();
    CycleResult result;
    // No exception may leave this loop: one escaping would end the process.
    // After one, this rank's collectives may be out of step with the others',
    // so the coordinator stops (a fatal status on every op here), and the
    // exit hazard keeps MPI_Finalize from waiting on ranks that never come.
    try {
      const ControllerStats before = controller.stats();
      negotiating = true;
      Status st = controller.cycle(drainKnown(), shutdown_requested_ ? stopWord() : 0, &result);
      negotiating = false;
      const ControllerStats after = controller.stats();
      cached_names_ = after.cached_names;
      if (!result.ready.empty() || controller.pendingCount() > 0) {
        cycles_ += 1;
        fast_cycles_ += after.fast_cycles - before.fast_cycles;
        slow_cycles_ += after.slow_cycles - before.slow_cycles;
        const double round_s = std::chrono::duration<double>(Clock::now() - t0).count();
        negotiation_s_ = negotiation_s_ + round_s;
        sparse.roundTimed(round_s);
      }
      if (!st.ok()) {
        std::string hint;
        if (st.code() == Code::kCommunication)
          hint = " (a rank has probably died: killed, crashed or exited without mgs_shutdown)";
        fatal = Status(st.code(), me + ": negotiation failed: " + st.message() + hint);
        MGS_LOG_ERROR("{}", fatal.message());
        break;
      }
      set_runner.run(result.ready, executor);
      sparse.poll();
      {
        std::lock_guard<std::mutex> lk(stats_mu_);
        sparse_stats_ = sparse.stats();
      }
      const Communicator::AllreduceCounts counts = comm->allreduceCounts();
      ring_ops_ = counts.ring - counts0.ring;
      library_ops_ = counts.library - counts0.library;
      if (timeline) timeline->flush();
    } catch (const std::exception& e) {
      negotiating = false;
      fatal = Status(Code::kInternal, me + ": the coordinator failed: " + e.what());
    } catch (...) {
      negotiating = false;
      fatal = Status(Code::kInternal, me + ": the coordinator failed with a non-standard exception");
    }
    if (!fatal.ok()) {
      MGS_LOG_ERROR("{}", fatal.message());
      // This cycle's ops may be half done or moved away: complete every one
      // still open (a handle completes once; finished ones keep their status).
      for (auto& op : result.ready)
        if (op.req.handle) op.req.handle->complete(fatal);
      break;
    }
    if (result.shutdown) {
      if (!shutdown_requested_)
        why = "mgs has stopped because " + describeStop(result.shutdown_words) + "; no collective can run after that";
      break;
    }
    // Sleep out the cycle, but start the next one as soon as a request arrives:
    // a rank that negotiates early just waits inside the collective for the
    // others, and the cycle time no longer adds latency to every operation.
    // Cycles with nothing pending on this rank are counted (idle_cycles). An
    // idle job negotiating every millisecond costs each rank 9-13% of a core;
    // backing off while idle (doubling the wait to 20 ms) cut that to 2-3%,
    // but made real dense training slower (ResNet-50, 4 emulated 1 Gbit/s
    // hosts: 2.80-2.98 s per step against 2.17-2.55 s without), for reasons
    // not found yet, so the cycle stays fixed (bench/NOTES.md).
    const bool idle =
        result.ready.empty() && controller.idle() && sparse.idle() && executor.idle() && set_runner.idle();
    if (idle) idle_cycles_ += 1;
    queue_.waitUntil(t0 + cycle);
  }

  // Close first: an enqueue that finds running_ false then reads the reason.
  queue_.close(fatal.ok() ? why : fatal.message());
  running_ = false;
  if (!fatal.ok()) addHazard(fatal.message());
  const Status final_status = fatal.ok() ? Status(Code::kShutdown, why) : fatal;
  auto fail = [&](Request& r) {
    queue_.finish(r.name);
    r.handle->complete(Status(final_status.code(), "tensor '" + r.name + "' did not run: " + final_status.message()));
  };
  try {
    if (fatal.ok()) {  // shutdown was negotiated: every rank finishes the same exchanges
      executor.drain();
      set_runner.drain();
      sparse.drain();
    }
    executor.failInFlight(Status(final_status.code(), "in flight: " + final_status.message()));
    set_runner.failInFlight(Status(final_status.code(), "in flight: " + final_status.message()));
    sparse.failHeld(Status(final_status.code(), "held in a sparse bucket: " + final_status.message()));
    for (auto& r : controller.takePending()) fail(r);
    for (auto& r : queue_.drain()) fail(r);
  } catch (...) {
    addHazard(me + ": tearing down the coordinator failed");
  }
  // Whatever is still open (an op lost in a failed cycle) must not leave a
  // waiter blocked forever.
  handles_.completeAll(final_status);
  const auto s = controller.stats();
  MGS_LOG_DEBUG("coordinator stopped after {} fast and {} slow negotiation cycles", s.fast_cycles, s.slow_cycles);
  comm->setWaitHook({});  // it refers to this function's locals
  sparse_owner.reset();   // before the communicator it uses
}

NegotiationStats Runtime::negotiationStats() const {
  NegotiationStats s;
  s.cycles = cycles_;
  s.fast_cycles = fast_cycles_;
  s.idle_cycles = idle_cycles_;
  s.slow_cycles = slow_cycles_;
  s.seconds = negotiation_s_;
  s.ops_completed = ops_completed_;
  s.bytes_reduced = bytes_reduced_;
  s.cached_names = cached_names_;
  s.cuda_nccl_ops = cuda_nccl_ops_;
  s.set_sparse_buckets = set_totals_.buckets.load(std::memory_order_relaxed);
  s.set_sparse_bytes_sent = set_totals_.bytes_sent.load(std::memory_order_relaxed);
  s.cuda_staged_ops = cuda_staged_ops_;
  s.device_host_syncs = device::hostSyncs();
  s.allreduce_ring_ops = ring_ops_;
  s.allreduce_library_ops = library_ops_;
  s.allreduce_ring_min_bytes = ring_min_bytes_;
  s.fusion_threshold_bytes = fusion_threshold_;
  s.fusion_trials = fusion_trials_;
  s.fusion_max_tensor_bytes = fusion_max_tensor_bytes_;
  return s;
}

SparseStats Runtime::sparseStats() const {
  std::lock_guard<std::mutex> lk(stats_mu_);
  return sparse_stats_;
}

Status Runtime::enqueue(Request req, uint64_t* handle) {
  MGS_ENSURE(handle != nullptr, kInvalidArgument, "handle output pointer is NULL");
  // Names travel in every slow negotiation cycle; a bound keeps each rank's
  // report (and MPI's int counts) small.
  MGS_ENSURE(req.name.size() <= MGS_MAX_NAME_BYTES, kInvalidArgument,
             "tensor name of " << req.name.size() << " bytes (starting '" << req.name.substr(0, 40)
                               << "') is longer than MGS_MAX_NAME_BYTES = " << MGS_MAX_NAME_BYTES);
  if (!running_) return stoppedStatus();
  if (req.sig.process_set != 0) {
    ProcessSetInfo info;
    MGS_ENSURE(sets_.get(req.sig.process_set, &info), kInvalidArgument,
               opTypeName(req.sig.type) << " of tensor '" << req.name << "': process set " << req.sig.process_set
                                        << " does not exist (never added, or removed)");
    // A rank outside the set is let through: negotiation fails the op on
    // every rank that submitted it, naming this rank (controller.h).
    req.name = qualifiedName(req.name, req.sig.process_set);
  }
  req.handle = std::make_shared<HandleState>();
  req.enqueued = Clock::now();
  auto state = req.handle;
  const uint64_t id = handles_.add(state);
  Status st = queue_.push(std::move(req));
  if (!st.ok()) {
    handles_.release(id);
    return st.code() == Code::kShutdown ? stoppedStatus() : st;
  }
  *handle = id;
  return Status::OK();
}

Status Runtime::enqueueAllreduce(const std::string& name, const TensorDesc& in, const TensorDesc& out, int reduce_op,
                                 double prescale, double postscale, uint32_t flags, uint64_t* handle,
                                 int32_t process_set) {
  MGS_ENSURE(!name.empty(), kInvalidArgument, "allreduce: the tensor name is empty");
  MGS_RETURN_IF_ERROR(checkTensor(name, "input", in));
  MGS_RETURN_IF_ERROR(checkTensor(name, "output", out));
  MGS_ENSURE(in.dtype == out.dtype && in.shape == out.shape && in.device == out.device, kInvalidArgument,
             "allreduce of tensor '" << name << "': input (" << dtypeName(in.dtype) << " " << shapeString(in.shape)
                                     << " device " << in.device << ") and output (" << dtypeName(out.dtype) << " "
                                     << shapeString(out.shape) << " device " << out.device << ") differ");
  MGS_ENSURE(reduce_op == MGS_REDUCE_SUM || reduce_op == MGS_REDUCE_AVERAGE, kInvalidArgument,
             "allreduce of tensor '" << name << "': unknown reduce op " << reduce_op);
  MGS_ENSURE(std::isfinite(prescale) && std::isfinite(postscale), kInvalidArgument,
             "allreduce of tensor '" << name << "': scale factors must be finite");
  MGS_ENSURE((flags & ~MGS_FLAG_SPARSE_OK) == 0, kInvalidArgument,
             "allreduce of tensor '" << name << "': unknown flags 0x" << std::hex << flags);
  Request req;
  req.name = name;
  req.sig = signatureOf(OpType::kAllreduce, in);
  req.sig.reduce_op = reduce_op;
  req.sig.prescale = prescale;
  req.sig.postscale = postscale;
  req.sig.flags = flags;
  req.sig.process_set = process_set;
  req.input = in;
  req.output = out;
  return enqueue(std::move(req), handle);
}

Status Runtime::enqueueAllgather(const std::string& name, const TensorDesc& in, uint64_t* handle,
                                 int32_t process_set) {
  MGS_ENSURE(!name.empty(), kInvalidArgument, "allgather: the tensor name is empty");
  MGS_RETURN_IF_ERROR(checkTensor(name, "input", in));
  MGS_ENSURE(!in.shape.empty(), kInvalidArgument,
             "allgather of tensor '" << name << "': needs at least one dimension (got a scalar)");
  Request req;
  req.name = name;
  req.sig = signatureOf(OpType::kAllgather, in);
  req.sig.process_set = process_set;
  req.input = in;
  return enqueue(std::move(req), handle);
}

Status Runtime::enqueueBroadcast(const std::string& name, const TensorDesc& t, int root, uint64_t* handle,
                                 int32_t process_set) {
  MGS_ENSURE(!name.empty(), kInvalidArgument, "broadcast: the tensor name is empty");
  MGS_RETURN_IF_ERROR(checkTensor(name, "tensor", t));
  MGS_ENSURE(root >= 0 && root < size_, kInvalidArgument,
             "broadcast of tensor '" << name << "': root rank " << root << " is not in [0, " << size_ << ")");
  Request req;
  req.name = name;
  req.sig = signatureOf(OpType::kBroadcast, t);
  req.sig.root = root;
  req.sig.process_set = process_set;
  if (process_set != 0) {
    // The set's communicator numbers its ranks from 0: the root as one of them.
    ProcessSetInfo info;
    if (sets_.get(process_set, &info)) {
      MGS_ENSURE(info.contains(root), kInvalidArgument,
                 "broadcast of tensor '" << name << "': root rank " << root << " is not in "
                                         << ProcessSetTable::describe(info));
      req.sig.root = info.indexOf(root);
    }
  }
  req.input = t;
  return enqueue(std::move(req), handle);
}

Status Runtime::barrier(int32_t process_set) {
  Request req;
  // Every rank numbers its barriers the same way, so the names match (a
  // set's name is qualified with it, so each set counts apart).
  {
    std::lock_guard<std::mutex> lk(count_mu_);
    req.name = "mgs.barrier." + std::to_string(barrier_counts_[process_set]++);
  }
  req.sig.type = OpType::kBarrier;
  req.sig.process_set = process_set;
  return runBlocking(std::move(req));
}

Status Runtime::runBlocking(Request req, int64_t* value) {
  uint64_t id = 0;
  MGS_RETURN_IF_ERROR(enqueue(std::move(req), &id));
  auto state = handles_.get(id);
  Status st = state->wait();
  if (value != nullptr) *value = state->value;
  handles_.release(id);
  return st;
}

}  // namespace mgs
