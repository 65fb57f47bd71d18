#include "comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "comm/mpi/ring_allreduce.h"
#include "comm/mpi/small_allreduce.h"
#include "comm/reduce.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/threads.h"

namespace mgs {
namespace {

std::atomic<bool> g_mpi_owned{false};
// A communicator of our own for the exit handshake (finalizeIfOwned), created
// with MPI when mgs initialises it; used only at process exit.
MPI_Comm g_exit_comm = MPI_COMM_NULL;
// How long a rank that saw a fatal error or a stall abort waits at exit for
// every other rank to reach exit too, before it aborts the job.
constexpr double kExitHandshakeS = 10.0;

Status mpiType(DataType dtype, MPI_Datatype* out) {
  switch (dtype) {
    case MGS_FLOAT32:
      *out = MPI_FLOAT;
      return Status::OK();
    case MGS_FLOAT64:
      *out = MPI_DOUBLE;
      return Status::OK();
    case MGS_INT32:
      *out = MPI_INT32_T;
      return Status::OK();
    case MGS_INT64:
      *out = MPI_INT64_T;
      return Status::OK();
    case MGS_UINT8:
      *out = MPI_UINT8_T;
      return Status::OK();
    default:
      return Status(Code::kInternal,
                    "MPI has no reduction type for " + dtypeName(dtype) + " (16-bit floats take the ring)");
  }
}

MPI_Op mpiOp(CommOp op) {
  switch (op) {
    case CommOp::kSum:
      return MPI_SUM;
    case CommOp::kMax:
      return MPI_MAX;
    case CommOp::kMin:
      return MPI_MIN;
    case CommOp::kBitAnd:
      return MPI_BAND;
  }
  return MPI_SUM;
}

// MPI counts are ints; larger transfers go in chunks of this many elements.
constexpr size_t kMaxChunk = size_t{1} << 30;
// Float sums of at least this many bytes take the ring (ring_allreduce.h)
// unless setRingMinBytes() moved the bound (calibration, core/calibration.h).
// Below it Open MPI's algorithms run, out of place from this size on.
constexpr size_t kRingMinBytes = size_t{64} << 10;
constexpr int kRingTag = 7100;
constexpr int kSmallTag = 7200;
// Rings in flight (startAllreduce) take tags [kRingAsyncTag + kRingChunks * s,
// + kRingChunks) for slot s = the ring's start number modulo kRingSlots.
constexpr int kRingAsyncTag = 7300;
constexpr size_t kRingSlots = 64;

// The blocking and the nonblocking allreduce choose alike. A few bytes among
// many ranks are latency-bound: log2(P) hops by recursive doubling, not
// libnbc's 2 log2(P) (small_allreduce.h).
bool smallSum(int ranks, size_t count, DataType dtype) {
  return ranks >= kSmallAllreduceMinRanks && count <= kSmallAllreduceMaxBytes / dtypeSize(dtype);
}
// Otherwise a chunk of `count` elements takes the ring when it is a float sum
// of at least `min_bytes`, or any 16-bit float (MPI has no type for them);
// the rest MPI's own algorithms.
bool ringFor(size_t count, DataType dtype, CommOp op, size_t min_bytes) {
  if (dtype == MGS_FLOAT16 || dtype == MGS_BFLOAT16) return true;
  return dtypeIsFloat(dtype) && count * dtypeSize(dtype) >= min_bytes && op == CommOp::kSum;
}
// The float sums the algorithm counters count (Communicator::allreduceCounts).
bool counted(size_t count, DataType dtype, CommOp op) {
  return dtypeIsFloat(dtype) && op == CommOp::kSum && count * dtypeSize(dtype) >= kRingMinBytes;
}

}  // namespace

MpiCommunicator::MpiCommunicator() : ring_min_bytes_(kRingMinBytes) {}

bool MpiCommunicator::onRing(size_t count, DataType dtype, CommOp op) const {
  return ringFor(count, dtype, op, ring_min_bytes_);
}

Status MpiCommunicator::create(std::unique_ptr<Communicator>* out) {
  int initialized = 0, finalized = 0;
  MGS_MPI_CHECK(MPI_Initialized(&initialized));
  MGS_MPI_CHECK(MPI_Finalized(&finalized));
  MGS_ENSURE(!finalized, kUnsupported, "MPI has already been finalized in this process; mgs cannot start again");
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
    // Eager TCP messages up to 1 MiB. Open MPI's default (64 KiB) sends every
    // larger message through a rendezvous (a request, a reply, then the data):
    // one round trip per message, and the ring allreduce sends messages of up
    // to 256 KiB per chunk, 2(P-1) steps per tensor. Dense ResNet-50 on 4
    // emulated 1 Gbit/s hosts: 1.473 s per step with 1 MiB against 1.591 s
    // with the default (torch DDP 1.443 s; medians of 3 interleaved runs).
    // Larger messages still use the rendezvous, which bounds what a receiver
    // may have to buffer unexpectedly. A user's settings win.
    setenv("OMPI_MCA_btl_tcp_eager_limit", "1048576", 0);
    setenv("OMPI_MCA_btl_tcp_rndv_eager_limit", "1048576", 0);
    setenv("OMPI_MCA_btl_tcp_max_send_size", "1048576", 0);
    MGS_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    g_mpi_owned = true;
    MGS_ENSURE(provided >= MPI_THREAD_SERIALIZED, kUnsupported,
               "MPI provides thread level " << provided << " but mgs needs MPI_THREAD_SERIALIZED ("
                                            << MPI_THREAD_SERIALIZED << ")");
    MGS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_exit_comm));
    MGS_MPI_CHECK(MPI_Comm_set_errhandler(g_exit_comm, MPI_ERRORS_RETURN));
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
  MGS_RETURN_IF_ERROR(c->describe());
  *out = std::move(c);
  return Status::OK();
}

Status MpiCommunicator::describe() {
  MGS_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MGS_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MPI_Comm local;
  MGS_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  MGS_MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  MGS_MPI_CHECK(MPI_Comm_size(local, &local_size_));
  MGS_MPI_CHECK(MPI_Comm_free(&local));
  // Spin briefly before sleeping only where this rank has cores of its own.
  wait_.spin_us = availableCores() > local_size_ ? 50 : 0;
  return Status::OK();
}

Status MpiCommunicator::split(int color, int key, std::unique_ptr<Communicator>* out) {
  out->reset();
  MPI_Comm sub = MPI_COMM_NULL;
  MGS_MPI_CHECK(MPI_Comm_split(comm_, color >= 0 ? color : MPI_UNDEFINED, key, &sub));
  if (sub == MPI_COMM_NULL) return Status::OK();
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator());
  c->comm_ = sub;  // owned from here: freed by the destructor on any path
  c->wait_.hook = wait_.hook;
  MGS_MPI_CHECK(MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN));
  MGS_RETURN_IF_ERROR(c->describe());
  *out = std::move(c);
  return Status::OK();
}

Status MpiCommunicator::duplicate(std::unique_ptr<Communicator>* out) {
  out->reset();
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator());
  MGS_MPI_CHECK(MPI_Comm_dup(comm_, &c->comm_));
  c->wait_.hook = wait_.hook;
  c->ring_min_bytes_ = ring_min_bytes_;
  MGS_MPI_CHECK(MPI_Comm_set_errhandler(c->comm_, MPI_ERRORS_RETURN));
  MGS_RETURN_IF_ERROR(c->describe());
  *out = std::move(c);
  return Status::OK();
}

void MpiCommunicator::finalizeIfOwned(const std::string& hazard) {
  if (!g_mpi_owned.exchange(false)) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // MPI_Finalize waits for every rank. Meet in a barrier of our own first,
  // polled, so a rank whose job went wrong (hazard) can bound that wait: a
  // peer stuck outside mgs, or gone, would otherwise hold it here forever.
  // Healthy ranks wait as long as it takes (a slow peer may still be saving a
  // checkpoint); a healthy job costs one barrier at exit.
  MPI_Request req = MPI_REQUEST_NULL;
  bool met = g_exit_comm != MPI_COMM_NULL && MPI_Ibarrier(g_exit_comm, &req) == MPI_SUCCESS;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kExitHandshakeS);
  auto pause = std::chrono::microseconds(100);
  while (met) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) met = false;
    if (done) break;
    if (!hazard.empty() && std::chrono::steady_clock::now() > deadline) met = false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
  if (met) {
    MPI_Comm_free(&g_exit_comm);
    MPI_Finalize();
    return;
  }
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Never a collective finalize here: it would hang. Abort ends every rank,
  // including one stuck outside mgs, and the job exits non-zero.
  std::fprintf(stderr,
               "[mgs rank %d] not finalizing MPI: %s; other ranks did not reach exit within %.0f s, so the "
               "job is aborted\n",
               rank, hazard.empty() ? "the exit barrier failed" : hazard.c_str(), kExitHandshakeS);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status MpiCommunicator::allreduce(void* buf, size_t count, DataType dtype, CommOp op) {
  MGS_ENSURE(reducible(dtype, op), kInternal, "allreduce of " << dtypeName(dtype) << " with this operation");
  auto* p = static_cast<char*>(buf);
  const size_t esize = dtypeSize(dtype);
  if (smallSum(size_, count, dtype))
    return smallAllreduce(comm_, rank_, size_, buf, count, dtype, op, wait_, kSmallTag, &scratch_);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(kMaxChunk, count - done);
    const bool ring = onRing(n, dtype, op), float_sum = counted(n, dtype, op);
    if (float_sum) ++(ring ? counts_.ring : counts_.library);
    if (ring) {
      MGS_RETURN_IF_ERROR(
          ringAllreduce(comm_, rank_, size_, p + done * esize, n, dtype, op, wait_, kRingTag, &scratch_));
    } else {
      MPI_Datatype type;
      MGS_RETURN_IF_ERROR(mpiType(dtype, &type));
      // Float sums out of place from kRingMinBytes, as startAllreduce calls
      // them (there Open MPI takes a bandwidth-optimal algorithm, in place a
      // binomial tree), so that both run the same algorithm, bitwise alike.
      // Integer and min/max results do not depend on the order: in place,
      // with no copy of a large buffer.
      char* chunk = p + done * esize;
      const void* send = MPI_IN_PLACE;
      if (float_sum) {
        send_copy_.assign(chunk, chunk + n * esize);
        send = send_copy_.data();
      }
      MPI_Request req;
      MGS_MPI_CHECK(MPI_Iallreduce(send, chunk, static_cast<int>(n), type, mpiOp(op), comm_, &req));
      MGS_RETURN_IF_ERROR(mpiWait(&req, wait_));
    }
    done += n;
  }
  return Status::OK();
}

Status MpiCommunicator::reduceScatter(void* buf, void* recv, const std::vector<size_t>& counts, DataType dtype,
                                      CommOp op) {
  const size_t esize = dtypeSize(dtype);
  size_t total = 0;
  for (size_t c : counts) total += c;
  // Float sums large enough to be bandwidth-bound, and every 16-bit float
  // sum, take the first half of mgs's ring (on one host Open MPI's
  // reduce-scatter ran 2-3.7x slower than the whole ring allreduce from 4 MiB
  // on; docs/benchmarks.md "Collectives").
  if (size_ > 1 && counts.size() == static_cast<size_t>(size_) && op == CommOp::kSum && total <= kMaxChunk &&
      ringFor(total, dtype, op, kRingMinBytes)) {
    std::vector<size_t> bounds(counts.size() + 1, 0);
    for (size_t q = 0; q < counts.size(); ++q) bounds[q + 1] = bounds[q] + counts[q];
    MGS_RETURN_IF_ERROR(ringReduceScatter(comm_, rank_, size_, buf, bounds, dtype, op, wait_, kRingTag, &scratch_));
    const size_t me = static_cast<size_t>(rank_);
    if (counts[me]) std::memcpy(recv, static_cast<const char*>(buf) + bounds[me] * esize, counts[me] * esize);
    return Status::OK();
  }
  // Else Open MPI's (latency-bound sizes, integers); MPI has no 16-bit float
  // types and takes int counts: past those, the allreduce (Communicator's
  // default).
  MPI_Datatype type;
  bool fits = counts.size() == static_cast<size_t>(size_) && reducible(dtype, op) && mpiType(dtype, &type).ok();
  std::vector<int> n(counts.size());
  for (size_t q = 0; fits && q < counts.size(); ++q) {
    fits = counts[q] <= static_cast<size_t>(INT_MAX);
    n[q] = static_cast<int>(counts[q]);
  }
  fits = fits && total <= static_cast<size_t>(INT_MAX);
  if (!fits || size_ == 1) return Communicator::reduceScatter(buf, recv, counts, dtype, op);
  // A receive buffer even for an empty part (MPI may touch the pointer).
  char dummy[16];
  void* out = counts[static_cast<size_t>(rank_)] ? recv : dummy;
  MPI_Request req;
  MGS_MPI_CHECK(MPI_Ireduce_scatter(buf, out, n.data(), type, mpiOp(op), comm_, &req));
  return mpiWait(&req, wait_);
}

// MPI_Allgather(v) takes int counts and displacements: past INT_MAX bytes in
// all, the gather runs as one chunked broadcast per rank instead.
static bool fitsIntCounts(size_t total_bytes) { return total_bytes <= static_cast<size_t>(INT_MAX); }

Status MpiCommunicator::allgather(const void* send, size_t bytes, void* recv) {
  size_t total = 0;
  MGS_ENSURE(!__builtin_mul_overflow(bytes, static_cast<size_t>(size_), &total), kInvalidArgument,
             "allgather of " << bytes << " bytes per rank over " << size_ << " ranks overflows");
  if (!fitsIntCounts(total)) return allgatherv(send, bytes, recv, std::vector<size_t>(size_, bytes));
  MPI_Request req;
  MGS_MPI_CHECK(
      MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, comm_, &req));
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
  std::vector<char>& sendCopy() { return send_; }
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
  std::vector<char> send_;  // a separate send buffer, where one is needed (startAllreduce)
};
}  // namespace

Status MpiCommunicator::startAllgather(const void* send, size_t bytes, void* recv,
                                       std::unique_ptr<PendingCollective>* op) {
  size_t total = 0;
  // Too large for one nonblocking call: run the chunked blocking form now.
  if (__builtin_mul_overflow(bytes, static_cast<size_t>(size_), &total) || !fitsIntCounts(total))
    return Communicator::startAllgather(send, bytes, recv, op);
  auto p = std::make_unique<MpiPending>(wait_);
  MGS_MPI_CHECK(MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, comm_,
                               p->request()));
  *op = std::move(p);
  return Status::OK();
}

Status MpiCommunicator::startAllreduce(void* buf, size_t count, DataType dtype, CommOp op,
                                       std::unique_ptr<PendingCollective>* pending) {
  MGS_ENSURE(reducible(dtype, op), kInternal, "allreduce of " << dtypeName(dtype) << " with this operation");
  const size_t bytes = count * dtypeSize(dtype);
  // What the blocking allreduce runs on the ring runs the same ring here,
  // bitwise the same, moved on by each test(). Open MPI's nonblocking
  // allreduce moves a large buffer only while it is polled too, but kept a
  // 1 Gbit/s link less busy: ResNet-50 on 4 emulated hosts ran 4-7% slower
  // with it in flight than with the blocking ring, and as fast with the
  // stepped ring.
  // The small-sum and chunked paths below end in allreduce(), which counts them.
  const bool here = size_ > 1 && !smallSum(size_, count, dtype) && count <= kMaxChunk;
  const bool ring = here && onRing(count, dtype, op);
  if (here && counted(count, dtype, op)) ++(ring ? counts_.ring : counts_.library);
  if (ring) {
    if (ring_slots_.empty()) ring_slots_.resize(kRingSlots);
    const size_t s = rings_started_++ % kRingSlots;
    auto ring = std::make_unique<RingAllreduce>();
    MGS_RETURN_IF_ERROR(ring->start(comm_, rank_, size_, buf, count, dtype, op, wait_,
                                    kRingAsyncTag + kRingChunks * static_cast<int>(s), &ring_slots_[s]));
    *pending = std::move(ring);
    return Status::OK();
  }
  MPI_Datatype type;
  // Counts past an int: the blocking form now.
  if (count > static_cast<size_t>(INT_MAX) || !mpiType(dtype, &type).ok())
    return Communicator::startAllreduce(buf, count, dtype, op, pending);
  auto p = std::make_unique<MpiPending>(wait_);
  // Open MPI's nonblocking allreduce (libnbc) takes a binomial tree for
  // every in-place call: reduce to one rank and broadcast back, log P full
  // copies through the root. From 64 KiB it takes a bandwidth-optimal
  // algorithm (ring, or reduce-scatter + allgather) but only out of place,
  // so the input is copied to a send buffer first (one pass over it).
  const void* send = MPI_IN_PLACE;
  if (bytes >= kRingMinBytes) {
    p->sendCopy().assign(static_cast<const char*>(buf), static_cast<const char*>(buf) + bytes);
    send = p->sendCopy().data();
  }
  MGS_MPI_CHECK(MPI_Iallreduce(send, buf, static_cast<int>(count), type, mpiOp(op), comm_, p->request()));
  *pending = std::move(p);
  return Status::OK();
}

Status MpiCommunicator::startBroadcast(void* buf, size_t bytes, int root, std::unique_ptr<PendingCollective>* pending) {
  if (bytes > static_cast<size_t>(INT_MAX)) return Communicator::startBroadcast(buf, bytes, root, pending);
  auto p = std::make_unique<MpiPending>(wait_);
  MGS_MPI_CHECK(MPI_Ibcast(buf, static_cast<int>(bytes), MPI_BYTE, root, comm_, p->request()));
  *pending = std::move(p);
  return Status::OK();
}

Status MpiCommunicator::allgatherv(const void* send, size_t send_bytes, void* recv,
                                   const std::vector<size_t>& recv_bytes) {
  MGS_ENSURE_EQ(recv_bytes.size(), static_cast<size_t>(size_), kInternal, "allgatherv counts");
  MGS_ENSURE_EQ(recv_bytes[rank_], send_bytes, kInternal, "allgatherv: this rank's count");
  std::vector<size_t> offsets(size_);
  size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    offsets[r] = total;
    MGS_ENSURE(!__builtin_add_overflow(total, recv_bytes[r], &total), kInvalidArgument,
               "allgatherv: the byte counts over ranks overflow");
  }
  auto* out = static_cast<char*>(recv);
  if (!fitsIntCounts(total)) {
    // Each rank in turn broadcasts its part in place (broadcast() chunks it).
    if (send_bytes && out + offsets[rank_] != send) std::memmove(out + offsets[rank_], send, send_bytes);
    for (int r = 0; r < size_; ++r) MGS_RETURN_IF_ERROR(broadcast(out + offsets[r], recv_bytes[r], r));
    return Status::OK();
  }
  std::vector<int> counts(size_), displs(size_);
  for (int r = 0; r < size_; ++r) {
    counts[r] = static_cast<int>(recv_bytes[r]);
    displs[r] = static_cast<int>(offsets[r]);
  }
  MPI_Request req;
  MGS_MPI_CHECK(MPI_Iallgatherv(send, static_cast<int>(send_bytes), MPI_BYTE, recv, counts.data(), displs.data(),
                                MPI_BYTE, comm_, &req));
  return mpiWait(&req, wait_);
}

Status MpiCommunicator::alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                  const std::vector<size_t>& recv_bytes) {
  MGS_ENSURE(send_bytes.size() == static_cast<size_t>(size_) && recv_bytes.size() == static_cast<size_t>(size_),
             kInternal, "alltoallv: one count per rank is needed");
  std::vector<int> scounts(size_), sdispls(size_), rcounts(size_), rdispls(size_);
  size_t stotal = 0, rtotal = 0;
  for (int r = 0; r < size_; ++r) {
    sdispls[r] = static_cast<int>(stotal);
    rdispls[r] = static_cast<int>(rtotal);
    scounts[r] = static_cast<int>(send_bytes[r]);
    rcounts[r] = static_cast<int>(recv_bytes[r]);
    stotal += send_bytes[r];
    rtotal += recv_bytes[r];
    // Past int counts and displacements: the generic form (chunked broadcasts).
    if (!fitsIntCounts(stotal) || !fitsIntCounts(rtotal)) {
      // Every rank must take the same path: agree on it first.
      int64_t big = 1;
      MGS_RETURN_IF_ERROR(allreduce(&big, 1, MGS_INT64, CommOp::kMax));
      return Communicator::alltoallv(send, send_bytes, recv, recv_bytes);
    }
  }
  int64_t big = 0;
  MGS_RETURN_IF_ERROR(allreduce(&big, 1, MGS_INT64, CommOp::kMax));
  if (big) return Communicator::alltoallv(send, send_bytes, recv, recv_bytes);
  MPI_Request req;
  MGS_MPI_CHECK(MPI_Ialltoallv(send, scounts.data(), sdispls.data(), MPI_BYTE, recv, rcounts.data(), rdispls.data(),
                               MPI_BYTE, comm_, &req));
  return mpiWait(&req, wait_);
}

Status MpiCommunicator::gatherStrings(const std::string& send, int root, std::vector<std::string>* out) {
  MGS_ENSURE(send.size() <= static_cast<size_t>(INT_MAX), kUnsupported,
             "a negotiation message of " << send.size() << " bytes exceeds MPI's 2 GiB count limit");
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
      // The negotiation caps each rank's report at INT_MAX / size bytes
      // (Controller::slowPath), so this holds; a caller that breaks the
      // cap gets an error here instead of wrapped displacements.
      MGS_ENSURE(total <= static_cast<size_t>(INT_MAX), kInternal,
                 "gatherStrings: " << total << "+ bytes exceed MPI's int displacements");
    }
    all.resize(total);
  }
  MGS_MPI_CHECK(
      MPI_Igatherv(send.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, root, comm_, &req));
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
