#include "comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <memory>
#include <sstream>
#include <thread>

#include "common/check.h"
#include "common/logging.h"

namespace mgs {
namespace {

std::atomic<bool> g_mpi_owned{false};

std::string mpiErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

}  // namespace

// Wrap one MPI call: a failure becomes a kCommunication Status naming the call.
#define MGS_MPI_CHECK(call)                                                              \
  do {                                                                                   \
    const int _mgs_rc = (call);                                                          \
    if (_mgs_rc != MPI_SUCCESS)                                                          \
      return Status(Code::kCommunication, std::string(#call) + " failed: " +            \
                                              mpiErrorString(_mgs_rc) +                  \
                                              detail::where(__FILE__, __LINE__));        \
  } while (0)

namespace {

Status mpiType(DataType dtype, MPI_Datatype* out) {
  switch (dtype) {
    case MGS_FLOAT32: *out = MPI_FLOAT; return Status::OK();
    case MGS_FLOAT64: *out = MPI_DOUBLE; return Status::OK();
    case MGS_INT32: *out = MPI_INT32_T; return Status::OK();
    case MGS_INT64: *out = MPI_INT64_T; return Status::OK();
    case MGS_UINT8: *out = MPI_UINT8_T; return Status::OK();
    default:
      return Status(Code::kInternal, "MPI has no reduction type for " + dtypeName(dtype) +
                                         " (16-bit floats are reduced in float32)");
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

}  // namespace

Status MpiCommunicator::create(std::unique_ptr<Communicator>* out) {
  int initialized = 0, finalized = 0;
  MGS_MPI_CHECK(MPI_Initialized(&initialized));
  MGS_MPI_CHECK(MPI_Finalized(&finalized));
  MGS_ENSURE(!finalized, kUnsupported,
             "MPI has already been finalized in this process; mgs cannot start again");
  int provided = 0;
  if (!initialized) {
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
  MPI_Datatype type;
  MGS_RETURN_IF_ERROR(mpiType(dtype, &type));
  auto* p = static_cast<char*>(buf);
  const size_t esize = dtypeSize(dtype);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(kMaxChunk, count - done);
    MGS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + done * esize, static_cast<int>(n), type, mpiOp(op), comm_));
    done += n;
  }
  return Status::OK();
}

Status MpiCommunicator::allgather(const void* send, size_t bytes, void* recv) {
  MGS_ENSURE(bytes <= kMaxChunk && bytes * static_cast<size_t>(size_) <= INT_MAX, kUnsupported,
             "allgather of " << bytes << " bytes per rank exceeds MPI's 2 GiB total limit");
  MGS_MPI_CHECK(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes),
                              MPI_BYTE, comm_));
  return Status::OK();
}

namespace {
// MPI_Iallgather's request. wait() polls with MPI_Test and sleeps between
// polls after a short spin: on an oversubscribed host a rank that waits must
// give its core to the ranks still working (MPI_Wait would busy-poll).
class MpiPending final : public PendingCollective {
 public:
  MpiPending() = default;
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
  Status wait() override {
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    auto pause = std::chrono::microseconds(10);
    while (true) {
      bool done = false;
      Status st = test(&done);
      if (!st.ok() || done) return st;
      if (std::chrono::steady_clock::now() < spin_until) continue;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
  }

 private:
  MPI_Request req_ = MPI_REQUEST_NULL;
};
}  // namespace

Status MpiCommunicator::startAllgather(const void* send, size_t bytes, void* recv,
                                       std::unique_ptr<PendingCollective>* op) {
  MGS_ENSURE(bytes <= kMaxChunk && bytes * static_cast<size_t>(size_) <= INT_MAX, kUnsupported,
             "allgather of " << bytes << " bytes per rank exceeds MPI's 2 GiB total limit");
  auto p = std::make_unique<MpiPending>();
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
  MGS_MPI_CHECK(MPI_Allgatherv(send, static_cast<int>(send_bytes), MPI_BYTE, recv, counts.data(),
                               displs.data(), MPI_BYTE, comm_));
  return Status::OK();
}

Status MpiCommunicator::gatherStrings(const std::string& send, int root, std::vector<std::string>* out) {
  const int n = static_cast<int>(send.size());
  std::vector<int> counts(rank_ == root ? size_ : 0);
  MGS_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, root, comm_));
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
  MGS_MPI_CHECK(MPI_Gatherv(send.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(),
                            MPI_BYTE, root, comm_));
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
    MGS_MPI_CHECK(MPI_Bcast(p + done, static_cast<int>(n), MPI_BYTE, root, comm_));
    done += n;
  }
  return Status::OK();
}

Status MpiCommunicator::barrier() {
  MGS_MPI_CHECK(MPI_Barrier(comm_));
  return Status::OK();
}

}  // namespace mgs
