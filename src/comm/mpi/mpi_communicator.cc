#include "comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "comm/mpi/ring_allreduce.h"
#include "comm/reduce.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/threads.h"

namespace mgs {
namespace {

std::atomic<bool> g_mpi_owned{false};

Status mpiType(DataType dtype, MPI_Datatype* out) {
  switch (dtype) {
    case MGS_FLOAT32: *out = MPI_FLOAT; return Status::OK();
    case MGS_FLOAT64: *out = MPI_DOUBLE; return Status::OK();
    case MGS_INT32: *out = MPI_INT32_T; return Status::OK();
    case MGS_INT64: *out = MPI_INT64_T; return Status::OK();
    case MGS_UINT8: *out = MPI_UINT8_T; return Status::OK();
    default:
      return Status(Code::kInternal, "MPI has no reduction type for " + dtypeName(dtype) +
                                         " (16-bit floats take the ring)");
  }
}

MPI_Op mpiOp(CommOp op) {
  switch (op) {
    case CommOp::kSum: return MPI_SUM;
    case CommOp::kMax: return MPI_MAX;
    case CommOp::kMin: return MPI_MIN;
    case CommOp::kBitAnd: return MPI_BAND;
  }
  return MPI_SUM;
}

// MPI counts are ints; larger transfers go in chunks of this many elements.
constexpr size_t kMaxChunk = size_t{1} << 30;
// Float sums of at least this many bytes take the ring (ring_allreduce.h).
constexpr size_t kRingMinBytes = size_t{64} << 10;
constexpr int kRingTag = 7100;

}  // namespace

Status MpiCommunicator::create(std::unique_ptr<Communicator>* out) {
  int initialized = 0, finalized = 0;
  MGS_MPI_CHECK(MPI_Initialized(&initialized));
  MGS_MPI_CHECK(MPI_Finalized(&finalized));
  MGS_ENSURE(!finalized, kUnsupported,
             "MPI has already been finalized in this process; mgs cannot start again");
  int provided = 0;
  if (!initialized) {
    // Open MPI's TCP transport moves a large message only while some thread
    // is inside MPI. The coordinator sleeps between tests (mpi_util.h) and,
    // on a host busy with training, wakes late: a 9.4 MB ring allreduce took
    // 950 ms instead of ~120 ms inside a ResNet-50 step on 4 emulated 1 Gbit/s
    // hosts. The TCP component's own event thread (blocked in epoll, woken
    // by the sockets; Open MPI then locks internally) keeps the bytes moving:
    // 4.56 s against 6.23 s per step there. A user's setting wins (overwrite 0);
    // other MPIs ignore the variable; shared memory is unaffected.
    setenv("OMPI_MCA_btl_tcp_progress_thread", "1", 0);
    MGS_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    g_mpi_owned = true;
    MGS_ENSURE(provided >= MPI_THREAD_SERIALIZED, kUnsupported,
               "MPI provides thread level " << provided << " but mgs needs MPI_THREAD_SERIALIZED ("
                                            << MPI_THREAD_SERIALIZED << ")");
  } else {
    MGS_MPI_CHECK(MPI_Query_thread(&provided));
    // MPI initialised by the caller: its threads may call MPI while our
    // coordinator does, which is only safe with MPI_THREAD_MULTIPLE -- unless
    // it was us, from an earlier mgs_init in this process.
    MGS_ENSURE(g_mpi_owned || provided == MPI_THREAD_MULTIPLE, kUnsupported,
               "MPI was initialised by the application with thread level "
                   << provided << "; mgs needs MPI_THREAD_MULTIPLE (" << MPI_THREAD_MULTIPLE
                   << ") when the application calls MPI itself");
  }
  if (g_mpi_owned) {
    // Open MPI reports an error completing a nonblocking collective (our
    // MPI_Iallgather: MPI_Test on a truncated receive) through
    // MPI_COMM_WORLD's handler, not the request's communicator, so ERRORS_RETURN
    // on our duplicate alone would still end the job with
    // MPI_ERRORS_ARE_FATAL. We initialised MPI, so world's handler is ours to
    // set; an application that initialised MPI keeps the handler it chose.
    MGS_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  }
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator());
  MGS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->comm_));
  MGS_MPI_CHECK(MPI_Comm_set_errhandler(c->comm_, MPI_ERRORS_RETURN));
  MGS_MPI_CHECK(MPI_Comm_rank(c->comm_, &c->rank_));
  MGS_MPI_CHECK(MPI_Comm_size(c->comm_, &c->size_));
  MPI_Comm local;
  MGS_MPI_CHECK(MPI_Comm_split_type(c->comm_, MPI_COMM_TYPE_SHARED, c->rank_, MPI_INFO_NULL, &local));
  MGS_MPI_CHECK(MPI_Comm_rank(local, &c->local_rank_));
  MGS_MPI_CHECK(MPI_Comm_size(local, &c->local_size_));
  MGS_MPI_CHECK(MPI_Comm_free(&local));
  // Spin briefly before sleeping only where this rank has cores of its own.
  c->wait_.spin_us = availableCores() > c->local_size_ ? 50 : 0;
  *out = std::move(c);
  return Status::OK();
}

void MpiCommunicator::finalizeIfOwned() {
  if (!g_mpi_owned.exchange(false)) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status MpiCommunicator::allreduce(void* buf, size_t count, DataType dtype, CommOp op) {
  MGS_ENSURE(reducible(dtype, op), kInternal, "allreduce of " << dtypeName(dtype) << " with this operation");
  auto* p = static_cast<char*>(buf);
  const size_t esize = dtypeSize(dtype);
  // Floats large enough to be bandwidth-bound, and every 16-bit float (MPI
  // has no type for them), take the ring; the rest MPI's own algorithms.
  const bool sixteen = dtype == MGS_FLOAT16 || dtype == MGS_BFLOAT16;
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(kMaxChunk, count - done);
    if (sixteen || (dtypeIsFloat(dtype) && n * esize >= kRingMinBytes && op == CommOp::kSum)) {
      MGS_RETURN_IF_ERROR(ringAllreduce(comm_, rank_, size_, p + done * esize, n, dtype, op, wait_, kRingTag,
                                        &scratch_));
    } else {
      MPI_Datatype type;
      MGS_RETURN_IF_ERROR(mpiType(dtype, &type));
      MPI_Request req;
      MGS_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p + done * esize, static_cast<int>(n), type, mpiOp(op), comm_, &req));
      MGS_RETURN_IF_ERROR(mpiWait(&req, wait_));
    }
    done += n;
  }
  return Status::OK();
}

Status MpiCommunicator::allgather(const void* send, size_t bytes, void* recv) {
  MGS_ENSURE(bytes <= kMaxChunk && bytes * static_cast<size_t>(size_) <= INT_MAX, kUnsupported,
             "allgather of " << bytes << " bytes per rank exceeds MPI's 2 GiB total limit");
  MPI_Request req;
  MGS_MPI_CHECK(MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE,
                               comm_, &req));
  return mpiWait(&req, wait_);
}

namespace {
// MPI_Iallgather's request; wait() sleeps between tests (mpi_util.h).
class MpiPending final : public PendingCollective {
 public:
  explicit MpiPending(const WaitPolicy& wait) : wait_(wait) {}
  // An operation still active here was abandoned after a fatal error (a
  // peer is gone): waiting could hang, so its request is left to MPI.
  ~MpiPending() override = default;
  MPI_Request* request() { return &req_; }
  Status test(bool* done) override {
    int flag = 1;
    if (req_ != MPI_REQUEST_NULL) MGS_MPI_CHECK(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE));
    *done = flag != 0;
    return Status::OK();
  }
  Status wait() override { return mpiWait(&req_, wait_); }

 private:
  WaitPolicy wait_;
  MPI_Request req_ = MPI_REQUEST_NULL;
};
}  // namespace

Status MpiCommunicator::startAllgather(const void* send, size_t bytes, void* recv,
                                       std::unique_ptr<PendingCollective>* op) {
  MGS_ENSURE(bytes <= kMaxChunk && bytes * static_cast<size_t>(size_) <= INT_MAX, kUnsupported,
             "allgather of " << bytes << " bytes per rank exceeds MPI's 2 GiB total limit");
  auto p = std::make_unique<MpiPending>(wait_);
  MGS_MPI_CHECK(MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE,
                               comm_, p->request()));
  *op = std::move(p);
  return Status::OK();
}

Status MpiCommunicator::allgatherv(const void* send, size_t send_bytes, void* recv,
                                   const std::vector<size_t>& recv_bytes) {
  MGS_ENSURE_EQ(recv_bytes.size(), static_cast<size_t>(size_), kInternal, "allgatherv counts");
  std::vector<int> counts(size_), displs(size_);
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    MGS_ENSURE(offset + recv_bytes[r] <= INT_MAX, kUnsupported,
               "allgatherv result of more than 2 GiB is not supported by the MPI backend");
    counts[r] = static_cast<int>(recv_bytes[r]);
    displs[r] = static_cast<int>(offset);
    offset += recv_bytes[r];
  }
  MPI_Request req;
  MGS_MPI_CHECK(MPI_Iallgatherv(send, static_cast<int>(send_bytes), MPI_BYTE, recv, counts.data(), displs.data(),
                                MPI_BYTE, comm_, &req));
  return mpiWait(&req, wait_);
}

Status MpiCommunicator::gatherStrings(const std::string& send, int root, std::vector<std::string>* out) {
  const int n = static_cast<int>(send.size());
  std::vector<int> counts(rank_ == root ? size_ : 0);
  MPI_Request req;
  MGS_MPI_CHECK(MPI_Igather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, root, comm_, &req));
  MGS_RETURN_IF_ERROR(mpiWait(&req, wait_));
  std::vector<int> displs(counts.size());
  std::string all;
  if (rank_ == root) {
    size_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = static_cast<int>(total);
      total += static_cast<size_t>(counts[r]);
    }
    all.resize(total);
  }
  MGS_MPI_CHECK(MPI_Igatherv(send.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, root,
                             comm_, &req));
  MGS_RETURN_IF_ERROR(mpiWait(&req, wait_));
  if (rank_ == root) {
    out->assign(size_, std::string());
    for (int r = 0; r < size_; ++r) (*out)[r] = all.substr(displs[r], counts[r]);
  }
  return Status::OK();
}

Status MpiCommunicator::broadcast(void* buf, size_t bytes, int root) {
  auto* p = static_cast<char*>(buf);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kMaxChunk, bytes - done);
    MPI_Request req;
    MGS_MPI_CHECK(MPI_Ibcast(p + done, static_cast<int>(n), MPI_BYTE, root, comm_, &req));
    MGS_RETURN_IF_ERROR(mpiWait(&req, wait_));
    done += n;
  }
  return Status::OK();
}

Status MpiCommunicator::barrier() {
  MPI_Request req;
  MGS_MPI_CHECK(MPI_Ibarrier(comm_, &req));
  return mpiWait(&req, wait_);
}

}  // namespace mgs
