// The C ABI of process sets, alltoall, reducescatter and join (mgs.h); the
// conventions of every entry point are mgs_capi.cc's (capi_internal.h).
#include <algorithm>
#include <vector>

#include "capi/capi_internal.h"

namespace {

using mgs::Code;
using mgs::Status;
using namespace mgs::capi;

// The set `id` of a runtime that may have stopped since (its sets stay readable).
Status processSetOf(int32_t id, std::shared_ptr<mgs::Runtime>* rt, mgs::ProcessSetInfo* set) {
  Status st = runningRuntime(rt, /*stopped_ok=*/true);
  return st.ok() ? (*rt)->processSet(id, set) : st;
}

}  // namespace

extern "C" {

mgs_status_t mgs_allreduce_ps_async(const char* name, const mgs_tensor_t* input, const mgs_tensor_t* output,
                                    mgs_reduce_op_t op, double prescale_factor, double postscale_factor,
                                    uint32_t flags, int32_t process_set, mgs_handle_t* handle) {
  const int32_t op_value = enumInt(op);
  return guardedCall([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    mgs::TensorDesc in, out;
    Status st = prepareEnqueue(name, input, "input", &rt, &in);
    if (st.ok()) st = tensorDesc(output, "tensor '" + std::string(name) + "' output", &out);
    if (!st.ok()) return st;
    return rt->enqueueAllreduce(name, in, out, op_value, prescale_factor, postscale_factor, flags, handle,
                                process_set);
  });
}

mgs_status_t mgs_allgather_ps_async(const char* name, const mgs_tensor_t* input, int32_t process_set,
                                    mgs_handle_t* handle) {
  return guardedCall([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    mgs::TensorDesc in;
    Status st = prepareEnqueue(name, input, "input", &rt, &in);
    if (!st.ok()) return st;
    return rt->enqueueAllgather(name, in, handle, process_set);
  });
}

mgs_status_t mgs_broadcast_ps_async(const char* name, const mgs_tensor_t* tensor, int root_rank, int32_t process_set,
                                    mgs_handle_t* handle) {
  return guardedCall([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    mgs::TensorDesc t;
    Status st = prepareEnqueue(name, tensor, "tensor", &rt, &t);
    if (!st.ok()) return st;
    return rt->enqueueBroadcast(name, t, root_rank, handle, process_set);
  });
}

mgs_status_t mgs_barrier_ps(int32_t process_set) {
  return guardedCall([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    Status st = runningRuntime(&rt);
    if (!st.ok()) return st;
    return rt->barrier(process_set);
  });
}

mgs_status_t mgs_alltoall_async(const char* name, const mgs_tensor_t* input, const int64_t* splits,
                                int32_t process_set, mgs_handle_t* handle) {
  return guardedCall([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    mgs::TensorDesc in;
    mgs::ProcessSetInfo set;
    Status st = prepareEnqueue(name, input, "input", &rt, &in);
    if (st.ok()) st = rt->processSet(process_set, &set);
    if (!st.ok()) return st;
    std::vector<int64_t> parts;
    if (splits != nullptr) parts.assign(splits, splits + set.ranks.size());
    return rt->enqueueAlltoall(name, in, std::move(parts), process_set, handle);
  });
}

mgs_status_t mgs_reducescatter_async(const char* name, const mgs_tensor_t* input, const mgs_tensor_t* output,
                                     mgs_reduce_op_t op, double prescale_factor, double postscale_factor,
                                     int32_t process_set, mgs_handle_t* handle) {
  const int32_t op_value = enumInt(op);
  return guardedCall([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    mgs::TensorDesc in, out;
    Status st = prepareEnqueue(name, input, "input", &rt, &in);
    if (st.ok()) st = tensorDesc(output, "tensor '" + std::string(name) + "' output", &out);
    if (!st.ok()) return st;
    return rt->enqueueReducescatter(name, in, out, op_value, prescale_factor, postscale_factor, process_set, handle);
  });
}

mgs_status_t mgs_process_set_add(const int32_t* ranks, int32_t n, int32_t* id) {
  return guardedCall([&]() -> Status {
    if (ranks == nullptr && n > 0) return Status(Code::kInvalidArgument, "mgs_process_set_add: ranks is NULL");
    if (n < 0) return Status(Code::kInvalidArgument, "mgs_process_set_add: negative rank count");
    std::shared_ptr<mgs::Runtime> rt;
    Status st = runningRuntime(&rt);
    if (!st.ok()) return st;
    return rt->addProcessSet(std::vector<int32_t>(ranks, ranks + n), id);
  });
}

mgs_status_t mgs_process_set_remove(int32_t id) {
  return guardedCall([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    Status st = runningRuntime(&rt);
    if (!st.ok()) return st;
    return rt->removeProcessSet(id);
  });
}

mgs_status_t mgs_process_set_size(int32_t id, int32_t* size) {
  return guardedCall([&]() -> Status {
    if (size == nullptr) return Status(Code::kInvalidArgument, "mgs_process_set_size: size is NULL");
    std::shared_ptr<mgs::Runtime> rt;
    mgs::ProcessSetInfo set;
    Status st = processSetOf(id, &rt, &set);
    if (st.ok()) *size = static_cast<int32_t>(set.ranks.size());
    return st;
  });
}

mgs_status_t mgs_process_set_rank(int32_t id, int32_t* rank) {
  return guardedCall([&]() -> Status {
    if (rank == nullptr) return Status(Code::kInvalidArgument, "mgs_process_set_rank: rank is NULL");
    std::shared_ptr<mgs::Runtime> rt;
    mgs::ProcessSetInfo set;
    Status st = processSetOf(id, &rt, &set);
    if (st.ok()) *rank = set.indexOf(rt->rank());
    return st;
  });
}

mgs_status_t mgs_process_set_ranks(int32_t id, int32_t* ranks) {
  return guardedCall([&]() -> Status {
    if (ranks == nullptr) return Status(Code::kInvalidArgument, "mgs_process_set_ranks: ranks is NULL");
    std::shared_ptr<mgs::Runtime> rt;
    mgs::ProcessSetInfo set;
    Status st = processSetOf(id, &rt, &set);
    if (st.ok()) std::copy(set.ranks.begin(), set.ranks.end(), ranks);
    return st;
  });
}

mgs_status_t mgs_join(int32_t* last_rank) {
  return guardedCall([&]() -> Status {
    std::shared_ptr<mgs::Runtime> rt;
    Status st = runningRuntime(&rt);
    if (!st.ok()) return st;
    return rt->join(last_rank);
  });
}

}  // extern "C"
