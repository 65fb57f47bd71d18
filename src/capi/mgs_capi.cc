// The C ABI: the only extern "C" definitions. Every entry point catches
// everything, maps Status to mgs_status_t and keeps the message thread-local.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "capi/capi_internal.h"
#include "comm/world.h"
#include "common/logging.h"
#include "common/params.h"
#include "core/device.h"
#include "core/runtime.h"
#include "mgs/mgs.h"

namespace {

using mgs::Code;
using mgs::Status;

thread_local std::string t_last_error;

// The process's runtime. Guarded by g_mu for init/shutdown; other calls take a
// shared_ptr copy under the lock so a concurrent shutdown cannot free it
// underneath them.
std::mutex g_mu;
std::shared_ptr<mgs::Runtime> g_runtime;
bool g_atexit_registered = false;
// The first exit hazard of any runtime this process ran (a runtime is
// replaced by a later mgs_init): decides how MPI is finalised at exit.
std::string g_exit_hazard;

// Call with g_mu held, before dropping a runtime.
void keepHazard(const mgs::Runtime& rt) {
  if (g_exit_hazard.empty()) g_exit_hazard = rt.exitHazard();
}

mgs_status_t finish(const Status& st) {
  if (st.ok()) {
    t_last_error.clear();
  } else {
    t_last_error = st.toString();
  }
  return static_cast<mgs_status_t>(st.code());
}

template <typename F>
mgs_status_t guarded(F&& f) {
  try {
    return finish(f());
  } catch (const std::exception& e) {
    return finish(Status(Code::kInternal, std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return finish(Status(Code::kInternal, "unexpected non-standard exception"));
  }
}

// The runtime, for calls that need it. After mgs_shutdown on this rank every
// call fails as before init. A coordinator stopped by another rank (or by a
// fatal error) still answers what it knows -- rank, size, results of finished
// operations -- when `stopped_ok`; calls that need a running coordinator get
// kShutdown with the reason, which names the rank that stopped the job.
Status runtime(std::shared_ptr<mgs::Runtime>* out, bool stopped_ok = false) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_runtime) return Status(Code::kNotInitialized, "mgs is not initialized: call mgs_init() first");
  if (!g_runtime->running()) {
    if (g_runtime->stoppedLocally())
      return Status(Code::kNotInitialized,
                    "mgs was shut down on this rank (mgs_shutdown); call mgs_init() to start it again");
    if (!stopped_ok) return g_runtime->stoppedStatus();
  }
  *out = g_runtime;
  return Status::OK();
}

// `what` names the tensor in messages, e.g. "tensor 'fc.weight' input".
Status toDesc(const mgs_tensor_t* t, const std::string& what, mgs::TensorDesc* out) {
  if (t == nullptr) return Status(Code::kInvalidArgument, what + ": the tensor pointer is NULL");
  if (t->ndim < 0 || t->ndim > MGS_MAX_DIMS)
    return Status(Code::kInvalidArgument,
                  what + " has ndim " + std::to_string(t->ndim) + "; allowed 0.." + std::to_string(MGS_MAX_DIMS));
  if (t->ndim > 0 && t->shape == nullptr)
    return Status(Code::kInvalidArgument, what + " has ndim > 0 but shape is NULL");
  if (t->device < MGS_DEVICE_CPU)
    return Status(Code::kInvalidArgument, what + " has invalid device " + std::to_string(t->device));
  // Read the dtype as an integer: a caller (ctypes) may pass any value, and
  // loading an out-of-range value as the enum type is undefined behaviour.
  int32_t dtype = 0;
  static_assert(sizeof(t->dtype) == sizeof(dtype), "mgs_dtype_t is 32-bit");
  std::memcpy(&dtype, &t->dtype, sizeof dtype);
  if (!mgs::dtypeValid(dtype))
    return Status(Code::kInvalidArgument,
                  what + " has invalid dtype " + std::to_string(dtype) + " (expected an mgs_dtype_t value)");
  out->data = t->data;
  out->dtype = static_cast<mgs_dtype_t>(dtype);
  out->shape.assign(t->shape, t->shape + t->ndim);
  out->device = t->device;
  out->stream = t->stream;
  out->ready_event = t->ready_event;
  return Status::OK();
}

// An enum argument as the integer the caller passed. ctypes and other
// foreign callers can pass any int; loading a value outside the enumerators
// as the enum type is undefined behaviour, so the bytes are read instead.
template <typename E>
int32_t enumValue(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t), "mgs enums are 32-bit");
  int32_t v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

Status checkName(const char* name) {
  if (name == nullptr || name[0] == '\0') return Status(Code::kInvalidArgument, "the tensor name is NULL or empty");
  return Status::OK();
}

// The common prologue of the enqueue functions: a running runtime, a name,
// and the tensor converted to a TensorDesc.
Status prepare(const char* name, const mgs_tensor_t* t, const char* what, std::shared_ptr<mgs::Runtime>* rt,
               mgs::TensorDesc* desc) {
  Status st = runtime(rt);
  if (st.ok()) st = checkName(name);
  if (st.ok()) st = toDesc(t, "tensor '" + std::string(name) + "' " + what, desc);
  return st;
}

void atExit() {
  std::shared_ptr<mgs::Runtime> rt;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    rt = std::move(g_runtime);
  }
  if (rt) rt->shutdown(mgs::Runtime::StopReason::kProcessExit);
  std::string hazard;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (rt) keepHazard(*rt);
    hazard = g_exit_hazard;
  }
  rt.reset();
  mgs::world::finalizeIfOwned(hazard);
}

Status handleState(mgs_handle_t h, std::shared_ptr<mgs::HandleState>* out) {
  std::shared_ptr<mgs::Runtime> rt;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    rt = g_runtime;
  }
  if (!rt) return Status(Code::kNotInitialized, "mgs is not initialized: call mgs_init() first");
  *out = rt->handles().get(h);
  if (!*out) return Status(Code::kInvalidArgument, "unknown or released handle " + std::to_string(h));
  return Status::OK();
}

// The handle of a successfully completed allgather.
Status allgatherResult(mgs_handle_t handle, std::shared_ptr<mgs::HandleState>* out) {
  Status st = handleState(handle, out);
  return st.ok() ? (*out)->completedAllgather() : st;
}

}  // namespace

// For the other translation units of the C ABI (capi_internal.h).
namespace mgs::capi {
mgs_status_t finishCall(const Status& st) { return finish(st); }
Status runningRuntime(std::shared_ptr<Runtime>* out, bool stopped_ok) { return runtime(out, stopped_ok); }
Status tensorDesc(const mgs_tensor_t* t, const std::string& what, TensorDesc* out) { return toDesc(t, what, out); }
Status prepareEnqueue(const char* name, const mgs_tensor_t* t, const char* what, std::shared_ptr<Runtime>* rt,
                      TensorDesc* desc) {
  return prepare(name, t, what, rt, desc);
}
}  // namespace mgs::capi

extern "C" {

const char* mgs_status_string(mgs_status_t status) { return mgs::codeName(static_cast<Code>(enumValue(status))); }

const char* mgs_last_error(void) { return t_last_error.c_str(); }

size_t mgs_dtype_size(mgs_dtype_t dtype) {
  const int32_t v = enumValue(dtype);
  return mgs::dtypeValid(v) ? mgs::dtypeSize(static_cast<mgs_dtype_t>(v)) : 0;
}

mgs_status_t mgs_init(void) {
  return guarded([]() -> Status {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_runtime && g_runtime->running()) return Status(Code::kAlreadyInitialized, "mgs is already initialized");
    mgs::Config config;
    Status st = mgs::parseConfig(mgs::mgsEnvironment(), &config);
    if (!st.ok()) return st;
    (void)mgs::logger();  // construct before atexit so it outlives the handler
    if (!g_atexit_registered) {
      std::atexit(atExit);
      g_atexit_registered = true;
    }
    if (g_runtime) keepHazard(*g_runtime);
    g_runtime.reset();  // a previous, stopped runtime
    std::unique_ptr<mgs::Runtime> rt;
    st = mgs::Runtime::start(config, mgs::world::create, &rt);
    if (!st.ok()) return st;
    g_runtime = std::move(rt);
    return Status::OK();
  });
}

mgs_status_t mgs_shutdown(void) {
  return guarded([]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      rt = g_runtime;
    }
    if (rt) rt->shutdown();
    return Status::OK();
  });
}

int mgs_is_initialized(void) {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_runtime && g_runtime->running() ? 1 : 0;
}

#define MGS_TOPOLOGY(fn, getter)                                                                 \
  mgs_status_t fn(int* out) {                                                                    \
    return guarded([&]() -> Status {                                                             \
      if (out == nullptr) return Status(Code::kInvalidArgument, #fn ": output pointer is NULL"); \
      std::shared_ptr<mgs::Runtime> rt;                                                          \
      Status st = runtime(&rt, /*stopped_ok=*/true);                                             \
      if (!st.ok()) return st;                                                                   \
      *out = rt->getter();                                                                       \
      return Status::OK();                                                                       \
    });                                                                                          \
  }
MGS_TOPOLOGY(mgs_rank, rank)
MGS_TOPOLOGY(mgs_size, size)
MGS_TOPOLOGY(mgs_local_rank, localRank)
MGS_TOPOLOGY(mgs_local_size, localSize)
#undef MGS_TOPOLOGY

mgs_status_t mgs_allreduce_async(const char* name, const mgs_tensor_t* input, const mgs_tensor_t* output,
                                 mgs_reduce_op_t op, double prescale_factor, double postscale_factor, uint32_t flags,
                                 mgs_handle_t* handle) {
  const int32_t op_value = enumValue(op);
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    mgs::TensorDesc in, out;
    Status st = prepare(name, input, "input", &rt, &in);
    if (st.ok()) st = toDesc(output, "tensor '" + std::string(name) + "' output", &out);
    if (!st.ok()) return st;
    return rt->enqueueAllreduce(name, in, out, op_value, prescale_factor, postscale_factor, flags, handle);
  });
}

mgs_status_t mgs_allgather_async(const char* name, const mgs_tensor_t* input, mgs_handle_t* handle) {
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    mgs::TensorDesc in;
    Status st = prepare(name, input, "input", &rt, &in);
    if (!st.ok()) return st;
    return rt->enqueueAllgather(name, in, handle);
  });
}

mgs_status_t mgs_broadcast_async(const char* name, const mgs_tensor_t* tensor, int root_rank, mgs_handle_t* handle) {
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    mgs::TensorDesc t;
    Status st = prepare(name, tensor, "tensor", &rt, &t);
    if (!st.ok()) return st;
    return rt->enqueueBroadcast(name, t, root_rank, handle);
  });
}

mgs_status_t mgs_barrier(void) {
  return guarded([]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    Status st = runtime(&rt);
    if (!st.ok()) return st;
    return rt->barrier();
  });
}

mgs_status_t mgs_poll(mgs_handle_t handle, int* done) {
  return guarded([&]() -> Status {
    if (done == nullptr) return Status(Code::kInvalidArgument, "mgs_poll: done pointer is NULL");
    std::shared_ptr<mgs::HandleState> h;
    Status st = handleState(handle, &h);
    if (!st.ok()) return st;
    *done = h->done() ? 1 : 0;
    return Status::OK();
  });
}

mgs_status_t mgs_wait(mgs_handle_t handle) {
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::HandleState> h;
    Status st = handleState(handle, &h);
    if (!st.ok()) return st;
    return h->wait();
  });
}

const char* mgs_handle_error(mgs_handle_t handle) {
  std::shared_ptr<mgs::HandleState> h;
  if (!handleState(handle, &h).ok() || !h->done()) return "";
  return h->errorMessage();
}

mgs_status_t mgs_release(mgs_handle_t handle) {
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      rt = g_runtime;
    }
    if (!rt) return Status(Code::kNotInitialized, "mgs is not initialized: call mgs_init() first");
    if (!rt->handles().release(handle))
      return Status(Code::kInvalidArgument, "unknown or already released handle " + std::to_string(handle));
    return Status::OK();
  });
}

mgs_status_t mgs_allgather_output_shape(mgs_handle_t handle, int32_t* ndim, int64_t* shape) {
  return guarded([&]() -> Status {
    if (ndim == nullptr || shape == nullptr)
      return Status(Code::kInvalidArgument, "mgs_allgather_output_shape: NULL output pointer");
    std::shared_ptr<mgs::HandleState> h;
    Status st = allgatherResult(handle, &h);
    if (!st.ok()) return st;
    *ndim = static_cast<int32_t>(h->allgather.shape.size());
    for (size_t i = 0; i < h->allgather.shape.size(); ++i) shape[i] = h->allgather.shape[i];
    return Status::OK();
  });
}

mgs_status_t mgs_allgather_rank_sizes(mgs_handle_t handle, int64_t* sizes) {
  return guarded([&]() -> Status {
    if (sizes == nullptr) return Status(Code::kInvalidArgument, "mgs_allgather_rank_sizes: sizes is NULL");
    std::shared_ptr<mgs::HandleState> h;
    Status st = allgatherResult(handle, &h);
    if (!st.ok()) return st;
    std::memcpy(sizes, h->allgather.rank_sizes.data(), h->allgather.rank_sizes.size() * sizeof(int64_t));
    return Status::OK();
  });
}

mgs_status_t mgs_allgather_copy_output(mgs_handle_t handle, const mgs_tensor_t* output) {
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::HandleState> h;
    mgs::TensorDesc out;
    Status st = allgatherResult(handle, &h);
    if (st.ok()) st = toDesc(output, "allgather output", &out);
    if (!st.ok()) return st;
    const auto& res = h->allgather;
    size_t numel = 0, bytes = 0;
    if (out.shape != res.shape || !mgs::checkedSize(out.shape, out.dtype, &numel, &bytes).ok() ||
        bytes != res.data.size())
      return Status(Code::kInvalidArgument, "allgather output has shape " + mgs::shapeString(out.shape) + " (" +
                                                mgs::dtypeName(out.dtype) + ") but the result is " +
                                                mgs::shapeString(res.shape));
    if (out.data == nullptr && !res.data.empty())
      return Status(Code::kInvalidArgument, "allgather output data is NULL");
    if (out.onCuda()) return mgs::device::copyFromHost(out, res.data.data(), res.data.size());
    if (!res.data.empty()) std::memcpy(out.data, res.data.data(), res.data.size());
    return Status::OK();
  });
}

mgs_status_t mgs_get_stats(mgs_stats_t* stats, size_t size) {
  return guarded([&]() -> Status {
    if (stats == nullptr) return Status(Code::kInvalidArgument, "mgs_get_stats: stats is NULL");
    std::shared_ptr<mgs::Runtime> rt;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      rt = g_runtime;
    }
    if (!rt) return Status(Code::kNotInitialized, "mgs is not initialized: call mgs_init() first");
    const mgs::NegotiationStats n = rt->negotiationStats();
    mgs_stats_t s{};
    s.negotiation_cycles = n.cycles;
    s.negotiation_fast_cycles = n.fast_cycles;
    s.negotiation_slow_cycles = n.slow_cycles;
    s.negotiation_seconds = n.seconds;
    s.ops_completed = n.ops_completed;
    s.bytes_reduced = n.bytes_reduced;
    s.name_cache_entries = n.cached_names;
    s.idle_cycles = n.idle_cycles;
    const mgs::SparseStats sp = rt->sparseStats();
    s.sparse_steps = sp.steps;
    s.sparse_buckets = sp.buckets;
    s.sparse_dense_buckets = sp.dense_buckets;
    s.sparse_selected = sp.selected;
    s.sparse_target = sp.target;
    s.sparse_bytes_sent = sp.bytes_sent;
    s.sparse_dense_bytes = sp.dense_bytes;
    s.plan_buckets = sp.plan_buckets;
    s.plans = sp.plans;
    s.sparse_agreed_buckets = sp.agreed_buckets;
    s.sparse_in_flight_max = sp.in_flight_max;
    s.plan_trials = sp.plan_trials;
    s.path_host_buckets = sp.path_buckets[static_cast<int>(mgs::BucketPath::kHost)];
    s.path_staged_buckets = sp.path_buckets[static_cast<int>(mgs::BucketPath::kStaged)];
    s.path_resident_buckets = sp.path_buckets[static_cast<int>(mgs::BucketPath::kResident)];
    s.path_device_buckets = sp.path_buckets[static_cast<int>(mgs::BucketPath::kDevice)];
    s.path_host_bytes = sp.path_bytes[static_cast<int>(mgs::BucketPath::kHost)];
    s.path_staged_bytes = sp.path_bytes[static_cast<int>(mgs::BucketPath::kStaged)];
    s.path_resident_bytes = sp.path_bytes[static_cast<int>(mgs::BucketPath::kResident)];
    s.path_device_bytes = sp.path_bytes[static_cast<int>(mgs::BucketPath::kDevice)];
    s.cuda_nccl_ops = n.cuda_nccl_ops;
    s.set_sparse_buckets = n.set_sparse_buckets;
    s.set_sparse_bytes_sent = n.set_sparse_bytes_sent;
    s.sparse_warmup_steps = sp.warmup_steps;
    s.cuda_staged_ops = n.cuda_staged_ops;
    s.device_host_syncs = n.device_host_syncs;
    s.plan_span_checks = sp.span_checks;
    s.plan_span_predicted_us = sp.span_predicted_us;
    s.plan_span_measured_us = sp.span_measured_us;
    s.plan_span_plan_checks = sp.span_plan_checks;
    s.plan_span_predicted_sum_us = sp.span_predicted_sum_us;
    s.plan_span_measured_sum_us = sp.span_measured_sum_us;
    s.allreduce_ring_ops = n.allreduce_ring_ops;
    s.allreduce_library_ops = n.allreduce_library_ops;
    s.allreduce_ring_min_bytes = n.allreduce_ring_min_bytes;
    s.sparse_hierarchical_buckets = sp.hierarchical_buckets;
    s.plan_replans_rejected = sp.replans_rejected;
    s.plan_round_us = sp.plan_round_us;
    s.plan_rounds_timed = sp.plan_rounds_timed;
    s.plan_trial_running = sp.plan_trial_running;
    s.plan_span_predicted_total_us = sp.span_predicted_total_us;
    s.plan_span_measured_total_us = sp.span_measured_total_us;
    s.fusion_threshold_bytes = n.fusion_threshold_bytes;
    s.fusion_trials = n.fusion_trials;
    s.fusion_max_tensor_bytes = n.fusion_max_tensor_bytes;
    std::memcpy(stats, &s, std::min(size, sizeof s));
    return Status::OK();
  });
}

mgs_status_t mgs_get_plan_buckets(mgs_plan_bucket_t* buckets, size_t capacity, size_t entry_size, size_t* count) {
  return guarded([&]() -> Status {
    if (count == nullptr) return Status(Code::kInvalidArgument, "mgs_get_plan_buckets: count is NULL");
    if (buckets == nullptr && capacity > 0)
      return Status(Code::kInvalidArgument, "mgs_get_plan_buckets: buckets is NULL with capacity > 0");
    if (capacity > 0 && entry_size == 0) return Status(Code::kInvalidArgument, "mgs_get_plan_buckets: entry_size is 0");
    std::shared_ptr<mgs::Runtime> rt;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      rt = g_runtime;
    }
    if (!rt) return Status(Code::kNotInitialized, "mgs is not initialized: call mgs_init() first");
    const mgs::SparseStats sp = rt->sparseStats();
    *count = sp.plan_bucket.size();
    for (size_t i = 0; i < std::min(capacity, sp.plan_bucket.size()); ++i) {
      const mgs::PlanBucketStat& b = sp.plan_bucket[i];
      mgs_plan_bucket_t e{};
      e.tensors = b.tensors;
      e.elements = b.elements;
      e.predicted_end_us = b.predicted_end_us;
      e.measured_end_us = b.measured_end_us;
      e.measured_end_sum_us = b.measured_end_sum_us;
      e.checks = b.checks;
      e.predicted_ready_us = b.predicted_ready_us;
      e.measured_ready_us = b.measured_ready_us;
      e.measured_ready_sum_us = b.measured_ready_sum_us;
      std::memcpy(reinterpret_cast<char*>(buckets) + i * entry_size, &e, std::min(entry_size, sizeof e));
    }
    return Status::OK();
  });
}

mgs_status_t mgs_residual_copy(const char* name, float* out, size_t n) {
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    Status st = runtime(&rt, /*stopped_ok=*/true);
    if (st.ok()) st = checkName(name);
    if (st.ok() && out == nullptr && n > 0) st = Status(Code::kInvalidArgument, "mgs_residual_copy: out is NULL");
    if (!st.ok()) return st;
    return rt->residuals().copyOut(name, out, n);
  });
}

mgs_status_t mgs_residual_restore(const char* name, const float* values, size_t n) {
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    Status st = runtime(&rt);
    if (st.ok()) st = checkName(name);
    if (st.ok() && values == nullptr && n > 0)
      st = Status(Code::kInvalidArgument, "mgs_residual_restore: values is NULL");
    if (!st.ok()) return st;
    return rt->residuals().copyIn(name, values, n);
  });
}

mgs_status_t mgs_sparse_state_copy(void* out, size_t capacity, size_t* size) {
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    Status st = runtime(&rt, /*stopped_ok=*/true);
    if (st.ok() && size == nullptr) st = Status(Code::kInvalidArgument, "mgs_sparse_state_copy: size is NULL");
    if (!st.ok()) return st;
    const std::string bytes = rt->sparseProgress().save(rt->size());
    *size = bytes.size();
    if (out == nullptr && capacity == 0) return Status::OK();  // asking the size
    if (out == nullptr) return Status(Code::kInvalidArgument, "mgs_sparse_state_copy: out is NULL");
    if (capacity < bytes.size())
      return Status(Code::kInvalidArgument, "mgs_sparse_state_copy: the state takes " + std::to_string(bytes.size()) +
                                                " bytes; the buffer holds " + std::to_string(capacity));
    std::memcpy(out, bytes.data(), bytes.size());
    return Status::OK();
  });
}

mgs_status_t mgs_sparse_state_restore(const void* data, size_t size) {
  return guarded([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    Status st = runtime(&rt);
    if (st.ok() && data == nullptr && size > 0)
      st = Status(Code::kInvalidArgument, "mgs_sparse_state_restore: data is NULL");
    if (!st.ok()) return st;
    const std::string bytes = size ? std::string(static_cast<const char*>(data), size) : std::string();
    st = rt->sparseProgress().restore(bytes, rt->size());
    if (!st.ok())
      return Status(st.code(), "rank " + std::to_string(rt->rank()) + ": mgs_sparse_state_restore: " + st.message());
    return Status::OK();
  });
}

const char* mgs_version(void) { return MGS_VERSION_STRING; }
int mgs_built_with_cuda(void) { return mgs::device::builtWithCuda() ? 1 : 0; }
int mgs_built_with_nccl(void) { return mgs::device::builtWithNccl() ? 1 : 0; }
int mgs_nccl_version(void) { return mgs::device::ncclVersion(); }

}  // extern "C"
