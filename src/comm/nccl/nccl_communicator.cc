#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "comm/nccl/nccl_wait.h"
#include "common/check.h"
#include "common/cuda_check.h"

// Every NCCL call goes through here: on failure a Status naming the call, the
// NCCL error and NCCL's last error text (ncclInProgress is the non-blocking
// communicator's "accepted, not finished": settle() waits it out).
#define MGS_NCCL_CHECK(expr)                                                                            \
  do {                                                                                                  \
    const ncclResult_t _mgs_nr = (expr);                                                                \
    MGS_ENSURE(_mgs_nr == ncclSuccess || _mgs_nr == ncclInProgress, kCommunication,                     \
               #expr << ": " << ncclGetErrorString(_mgs_nr) << " (" << ncclGetLastError(nullptr) << ")" \
                     << ::mgs::detail::where(__FILE__, __LINE__));                                      \
  } while (0)

namespace mgs {
namespace {

ncclComm_t asComm(void* c) { return static_cast<ncclComm_t>(c); }
cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

Status ncclTypeOf(DataType dtype, ncclDataType_t* t) {
  switch (dtype) {
    case MGS_FLOAT32:
      *t = ncclFloat32;
      return Status::OK();
    case MGS_FLOAT64:
      *t = ncclFloat64;
      return Status::OK();
    case MGS_FLOAT16:
      *t = ncclFloat16;
      return Status::OK();
    case MGS_BFLOAT16:
      *t = ncclBfloat16;
      return Status::OK();
    case MGS_INT32:
      *t = ncclInt32;
      return Status::OK();
    case MGS_INT64:
      *t = ncclInt64;
      return Status::OK();
    case MGS_UINT8:
      *t = ncclUint8;
      return Status::OK();
  }
  return Status(Code::kInvalidArgument, std::string("NCCL: unsupported dtype ") + dtypeName(dtype));
}

Status ncclOpOf(CommOp op, ncclRedOp_t* o) {
  switch (op) {
    case CommOp::kSum:
      *o = ncclSum;
      return Status::OK();
    case CommOp::kMax:
      *o = ncclMax;
      return Status::OK();
    case CommOp::kMin:
      *o = ncclMin;
      return Status::OK();
    case CommOp::kBitAnd:
      break;  // NCCL has no bitwise reduction
  }
  return Status(Code::kUnsupported,
                "NCCL has no bitwise-and reduction (negotiation bit-vectors stay on the bootstrap communicator)");
}

// The id travels with rank 0's verdict so that a failure there ends every rank.
struct IdMessage {
  int32_t ok;
  ncclUniqueId id;
};

class NcclPending final : public PendingCollective {
 public:
  NcclPending(NcclCommunicator* comm, cudaEvent_t ev, const char* what = "allgather (started)")
      : comm_(comm), ev_(ev), what_(what), started_(std::chrono::steady_clock::now()) {}
  ~NcclPending() override { cudaEventDestroy(ev_); }
  // Polled (device buckets): the deadline counts from the start, so a dead
  // peer ends a collective nobody waits for too.
  Status test(bool* done) override { return comm_->pollEvent(ev_, what_, false, done, &started_); }
  Status wait() override {
    bool done = false;
    return comm_->pollEvent(ev_, what_, true, &done);
  }

 private:
  NcclCommunicator* comm_;
  cudaEvent_t ev_;
  const char* what_;  // a literal
  std::chrono::steady_clock::time_point started_;
};

}  // namespace

Status NcclCommunicator::create(Communicator* bootstrap, const NcclOptions& options,
                                std::unique_ptr<NcclCommunicator>* out) {
  MGS_ENSURE(bootstrap != nullptr, kInvalidArgument, "NCCL communicator: no bootstrap communicator");
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->bootstrap_ = bootstrap;
  c->options_ = options;
  c->rank_ = bootstrap->rank();
  c->size_ = bootstrap->size();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();
    devices = 0;
  }
  // Every rank takes part in the id broadcast even when it has no device, so
  // that all ranks fail together instead of waiting for each other.
  int32_t localOk = devices > 0 ? 1 : 0;
  c->device_ = options.device >= 0 ? options.device : (devices > 0 ? bootstrap->localRank() % devices : 0);
  IdMessage msg;
  std::memset(&msg, 0, sizeof(msg));
  if (c->rank_ == 0) msg.ok = localOk && ncclGetUniqueId(&msg.id) == ncclSuccess;
  MGS_RETURN_IF_ERROR(bootstrap->broadcast(&msg, sizeof(msg), 0));
  MGS_ENSURE(msg.ok, kCommunication,
             "NCCL communicator (rank " << c->rank_ << "): rank 0 could not create the NCCL id "
                                        << "(no CUDA device there, or ncclGetUniqueId failed)");
  Status init = Status::OK();
  if (!localOk) {
    init = Status(Code::kCuda, "no CUDA device visible");
  } else if (cudaSetDevice(c->device_) != cudaSuccess) {
    init = Status(Code::kCuda, std::string("cudaSetDevice: ") + cudaGetErrorString(cudaGetLastError()));
  } else {
    init = [&]() -> Status {
      cudaStream_t s;
      MGS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      c->stream_ = s;
      cudaEvent_t e;
      MGS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      c->event_ = e;
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;  // so that init, too, can be abandoned on a deadline
      ncclComm_t comm = nullptr;
      const ncclResult_t r = ncclCommInitRankConfig(&comm, c->size_, msg.id, c->rank_, &cfg);
      c->comm_ = comm;
      if (r != ncclSuccess && r != ncclInProgress) {
        const std::string why =
            std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) + ")";
        c->abort(why);  // frees what init left behind; the destructor then skips it
        return Status(Code::kCommunication, why);
      }
      return c->settle("ncclCommInitRankConfig");
    }();
  }
  // Agree: a rank whose init failed must not leave the others using a half-built clique.
  int32_t ok = init.ok() ? 1 : 0;
  MGS_RETURN_IF_ERROR(bootstrap->allreduce(&ok, 1, MGS_INT32, CommOp::kMin));
  if (!init.ok())
    return Status(init.code(), "NCCL communicator (rank " + std::to_string(c->rank_) + ", device " +
                                   std::to_string(c->device_) + "): " + init.message());
  MGS_ENSURE(ok == 1, kCommunication,
             "NCCL communicator (rank " << c->rank_ << "): another rank failed to initialise NCCL");
  *out = std::move(c);
  return Status::OK();
}

NcclCommunicator::~NcclCommunicator() {
  // Errors here have nowhere to go; an aborted communicator is already freed.
  if (comm_ && !aborted_) {
    if (drain("shutdown").ok() && ncclCommFinalize(asComm(comm_)) != ncclSuccess) {
      // Finalize may report ncclInProgress on the non-blocking communicator.
      (void)settle("ncclCommFinalize");
    }
    if (!aborted_) ncclCommDestroy(asComm(comm_));
  }
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (stream_ && ownsStream_) cudaStreamDestroy(asStream(stream_));
}

Status NcclCommunicator::split(int color, int key, std::unique_ptr<Communicator>* out) {
  out->reset();
  MGS_RETURN_IF_ERROR(usable("split"));
  std::unique_ptr<Communicator> boot;
  MGS_RETURN_IF_ERROR(bootstrap_->split(color, key, &boot));
  MGS_CUDA_CHECK(cudaSetDevice(device_));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // as the parent: a deadline can abandon it
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommSplit(asComm(comm_), color >= 0 ? color : NCCL_SPLIT_NOCOLOR, key, &comm, &cfg);
  if (r != ncclSuccess && r != ncclInProgress)
    return Status(Code::kCommunication, std::string("ncclCommSplit on rank ") + std::to_string(rank_) + ": " +
                                            ncclGetErrorString(r) + " (" + ncclGetLastError(asComm(comm_)) + ")");
  MGS_RETURN_IF_ERROR(settle("ncclCommSplit"));  // the parent's part
  if (color < 0 || comm == nullptr) return Status::OK();
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->ownBootstrap_ = std::move(boot);
  c->bootstrap_ = c->ownBootstrap_.get();
  c->options_ = options_;
  c->rank_ = c->bootstrap_->rank();
  c->size_ = c->bootstrap_->size();
  c->device_ = device_;
  c->stream_ = stream_;
  c->ownsStream_ = false;
  c->comm_ = comm;
  cudaEvent_t e;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  c->event_ = e;
  MGS_RETURN_IF_ERROR(c->settle("ncclCommSplit"));
  *out = std::move(c);
  return Status::OK();
}

std::string NcclCommunicator::asyncError() {
  ncclResult_t e = ncclSuccess;
  if (ncclCommGetAsyncError(asComm(comm_), &e) != ncclSuccess) return "ncclCommGetAsyncError failed";
  if (e == ncclSuccess || e == ncclInProgress) return "";
  return std::string(ncclGetErrorString(e)) + ": " + ncclGetLastError(asComm(comm_));
}

void NcclCommunicator::abort(const std::string& why) {
  if (aborted_) return;
  aborted_ = true;
  abortReason_ = why;
  if (comm_) ncclCommAbort(asComm(comm_));
}

Status NcclCommunicator::usable(const char* what) const {
  MGS_ENSURE(!aborted_, kCommunication,
             "NCCL " << what << " on rank " << rank_ << ": communicator was aborted earlier: " << abortReason_);
  return Status::OK();
}

Status NcclCommunicator::checkDevice(const void* p, const char* what) const {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  }
  MGS_ENSURE(a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged, kInvalidArgument,
             "NCCL " << what << " on rank " << rank_ << ": buffer " << p
                     << " is not CUDA device memory (the NCCL backend takes device buffers)");
  return Status::OK();
}

Status NcclCommunicator::settle(const char* what) {
  nccl::WaitHooks h;
  h.ready = [this](std::string* why) {
    ncclResult_t e = ncclSuccess;
    if (ncclCommGetAsyncError(asComm(comm_), &e) != ncclSuccess) {
      *why = "ncclCommGetAsyncError failed";
      return -1;
    }
    if (e == ncclInProgress) return 0;
    if (e != ncclSuccess) {
      *why = std::string(ncclGetErrorString(e)) + ": " + ncclGetLastError(asComm(comm_));
      return -1;
    }
    return 1;
  };
  h.asyncError = [] { return std::string(); };  // ready() reports it
  h.abort = [this, what] { abort(std::string(what) + " failed"); };
  const Status st =
      nccl::waitOrAbort(h, std::string("NCCL ") + what + " on rank " + std::to_string(rank_), options_.timeoutSeconds);
  if (!st.ok()) abortReason_ = st.message();
  return st;
}

Status NcclCommunicator::enqueued(int result, const char* what) {
  const auto r = static_cast<ncclResult_t>(result);
  if (r == ncclInProgress) return settle(what);
  if (r != ncclSuccess) {
    const std::string why = std::string("NCCL ") + what + " on rank " + std::to_string(rank_) + ": " +
                            ncclGetErrorString(r) + " (" + ncclGetLastError(asComm(comm_)) + ")";
    abort(why);
    return Status(Code::kCommunication, why + " (communicator aborted)");
  }
  return Status::OK();
}

Status NcclCommunicator::pollEvent(void* event, const char* what, bool block, bool* done,
                                   const std::chrono::steady_clock::time_point* started) {
  MGS_RETURN_IF_ERROR(usable(what));
  const auto ev = static_cast<cudaEvent_t>(event);
  nccl::WaitHooks h;
  h.ready = [ev](std::string* why) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) return 0;
    *why = std::string("cudaEventQuery: ") + cudaGetErrorString(e);
    return -1;
  };
  h.asyncError = [this] { return asyncError(); };
  h.abort = [this, what] { abort(std::string(what) + " failed"); };
  const std::string label = std::string("NCCL ") + what + " on rank " + std::to_string(rank_);
  if (!block && started) {
    const Status st = nccl::pollOnce(h, label, options_.timeoutSeconds, *started, done);
    if (!st.ok()) abortReason_ = st.message();
    return st;
  }
  if (!block) {
    std::string why;
    const int r = h.ready(&why);
    *done = r > 0;
    if (r > 0) return Status::OK();
    const std::string err = r < 0 ? why : h.asyncError();
    if (err.empty()) return Status::OK();
    abort(label + ": " + err);
    return Status(Code::kCommunication, label + ": " + err + " (communicator aborted)");
  }
  const Status st = nccl::waitOrAbort(h, label, options_.timeoutSeconds);
  if (!st.ok()) abortReason_ = st.message();
  *done = st.ok();
  return st;
}

Status NcclCommunicator::drain(const char* what) {
  MGS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), asStream(stream_)));
  bool done = false;
  return pollEvent(event_, what, true, &done);
}

Status NcclCommunicator::allreduce(void* buf, size_t count, DataType dtype, CommOp op) {
  MGS_RETURN_IF_ERROR(usable("allreduce"));
  ncclDataType_t t = ncclFloat32;
  ncclRedOp_t o = ncclSum;
  MGS_RETURN_IF_ERROR(ncclTypeOf(dtype, &t));
  MGS_RETURN_IF_ERROR(ncclOpOf(op, &o));
  if (count == 0) return Status::OK();
  MGS_RETURN_IF_ERROR(checkDevice(buf, "allreduce"));
  MGS_RETURN_IF_ERROR(enqueued(ncclAllReduce(buf, buf, count, t, o, asComm(comm_), asStream(stream_)), "allreduce"));
  return drain("allreduce");
}

Status NcclCommunicator::allgather(const void* send, size_t bytes, void* recv) {
  MGS_RETURN_IF_ERROR(usable("allgather"));
  if (bytes == 0) return Status::OK();
  MGS_RETURN_IF_ERROR(checkDevice(send, "allgather (send)"));
  MGS_RETURN_IF_ERROR(checkDevice(recv, "allgather (recv)"));
  MGS_RETURN_IF_ERROR(
      enqueued(ncclAllGather(send, recv, bytes, ncclUint8, asComm(comm_), asStream(stream_)), "allgather"));
  return drain("allgather");
}

Status NcclCommunicator::startAllgather(const void* send, size_t bytes, void* recv,
                                        std::unique_ptr<PendingCollective>* op) {
  MGS_RETURN_IF_ERROR(usable("allgather"));
  cudaEvent_t ev;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  auto pending = std::make_unique<NcclPending>(this, ev);  // owns ev from here on
  if (bytes > 0) {
    MGS_RETURN_IF_ERROR(checkDevice(send, "allgather (send)"));
    MGS_RETURN_IF_ERROR(checkDevice(recv, "allgather (recv)"));
    MGS_RETURN_IF_ERROR(
        enqueued(ncclAllGather(send, recv, bytes, ncclUint8, asComm(comm_), asStream(stream_)), "allgather"));
  }
  MGS_CUDA_CHECK(cudaEventRecord(ev, asStream(stream_)));
  *op = std::move(pending);
  return Status::OK();
}

// Enqueue only, as startAllgather (the agreed device bucket's broadcast and
// values' allreduce). Written 2026-12-01 without a GPU: never run.
Status NcclCommunicator::startAllreduce(void* buf, size_t count, DataType dtype, CommOp op,
                                        std::unique_ptr<PendingCollective>* pending) {
  MGS_RETURN_IF_ERROR(usable("allreduce"));
  ncclDataType_t t = ncclFloat32;
  ncclRedOp_t o = ncclSum;
  MGS_RETURN_IF_ERROR(ncclTypeOf(dtype, &t));
  MGS_RETURN_IF_ERROR(ncclOpOf(op, &o));
  cudaEvent_t ev;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  auto p = std::make_unique<NcclPending>(this, ev, "allreduce (started)");  // owns ev from here on
  if (count > 0) {
    MGS_RETURN_IF_ERROR(checkDevice(buf, "allreduce"));
    MGS_RETURN_IF_ERROR(enqueued(ncclAllReduce(buf, buf, count, t, o, asComm(comm_), asStream(stream_)), "allreduce"));
  }
  MGS_CUDA_CHECK(cudaEventRecord(ev, asStream(stream_)));
  *pending = std::move(p);
  return Status::OK();
}

Status NcclCommunicator::startBroadcast(void* buf, size_t bytes, int root, std::unique_ptr<PendingCollective>* pending) {
  MGS_RETURN_IF_ERROR(usable("broadcast"));
  MGS_ENSURE(root >= 0 && root < size_, kInvalidArgument,
             "NCCL broadcast on rank " << rank_ << ": root " << root << " outside [0, " << size_ << ")");
  cudaEvent_t ev;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  auto p = std::make_unique<NcclPending>(this, ev, "broadcast (started)");
  if (bytes > 0) {
    MGS_RETURN_IF_ERROR(checkDevice(buf, "broadcast"));
    MGS_RETURN_IF_ERROR(
        enqueued(ncclBroadcast(buf, buf, bytes, ncclUint8, root, asComm(comm_), asStream(stream_)), "broadcast"));
  }
  MGS_CUDA_CHECK(cudaEventRecord(ev, asStream(stream_)));
  *pending = std::move(p);
  return Status::OK();
}

Status NcclCommunicator::allgatherv(const void* send, size_t send_bytes, void* recv,
                                    const std::vector<size_t>& recv_bytes) {
  MGS_RETURN_IF_ERROR(usable("allgatherv"));
  MGS_ENSURE(recv_bytes.size() == static_cast<size_t>(size_), kInvalidArgument,
             "NCCL allgatherv on rank " << rank_ << ": " << recv_bytes.size() << " sizes for " << size_ << " ranks");
  MGS_ENSURE_EQ(send_bytes, recv_bytes[rank_], kInvalidArgument,
                "NCCL allgatherv on rank " << rank_ << ": own contribution");
  size_t total = 0;
  for (size_t b : recv_bytes) total += b;
  if (total == 0) return Status::OK();
  if (send_bytes) MGS_RETURN_IF_ERROR(checkDevice(send, "allgatherv (send)"));
  MGS_RETURN_IF_ERROR(checkDevice(recv, "allgatherv (recv)"));
  // One broadcast per root in a group: NCCL has no allgatherv.
  MGS_NCCL_CHECK(ncclGroupStart());
  size_t off = 0;
  for (int r = 0; r < size_; ++r) {
    char* dst = static_cast<char*>(recv) + off;
    if (recv_bytes[r] > 0)
      MGS_NCCL_CHECK(
          ncclBroadcast(r == rank_ ? send : dst, dst, recv_bytes[r], ncclUint8, r, asComm(comm_), asStream(stream_)));
    off += recv_bytes[r];
  }
  MGS_RETURN_IF_ERROR(enqueued(ncclGroupEnd(), "allgatherv"));
  return drain("allgatherv");
}

Status NcclCommunicator::broadcast(void* buf, size_t bytes, int root) {
  MGS_RETURN_IF_ERROR(usable("broadcast"));
  MGS_ENSURE(root >= 0 && root < size_, kInvalidArgument,
             "NCCL broadcast on rank " << rank_ << ": root " << root << " outside [0, " << size_ << ")");
  if (bytes == 0) return Status::OK();
  MGS_RETURN_IF_ERROR(checkDevice(buf, "broadcast"));
  MGS_RETURN_IF_ERROR(
      enqueued(ncclBroadcast(buf, buf, bytes, ncclUint8, root, asComm(comm_), asStream(stream_)), "broadcast"));
  return drain("broadcast");
}

Status NcclCommunicator::gatherStrings(const std::string& send, int root, std::vector<std::string>* out) {
  return bootstrap_->gatherStrings(send, root, out);
}

Status NcclCommunicator::barrier() {
  MGS_RETURN_IF_ERROR(usable("barrier"));
  MGS_RETURN_IF_ERROR(drain("barrier"));
  return bootstrap_->barrier();
}

}  // namespace mgs
