#include "comm/mpi/small_allreduce.h"

#include <cstring>

#include "comm/reduce.h"

namespace mgs {
namespace {

Status exchange(MPI_Comm comm, int peer, const char* send, char* recv, int bytes, int tag, const WaitPolicy& wait) {
  MPI_Request reqs[2];
  MGS_MPI_CHECK(MPI_Irecv(recv, bytes, MPI_BYTE, peer, tag, comm, &reqs[0]));
  MGS_MPI_CHECK(MPI_Isend(send, bytes, MPI_BYTE, peer, tag, comm, &reqs[1]));
  return mpiWaitAll(2, reqs, wait);
}

// buf = low op high: `buf_is_low` says whether buf holds the low operand
// (and `other` the high one) or the reverse. Leaves `other` changed.
Status combine(char* buf, char* other, bool buf_is_low, size_t count, size_t bytes, DataType dtype, CommOp op) {
  if (buf_is_low) return reduceInto(buf, other, count, dtype, op);
  MGS_RETURN_IF_ERROR(reduceInto(other, buf, count, dtype, op));
  std::memcpy(buf, other, bytes);
  return Status::OK();
}

Status recursiveDoubling(MPI_Comm comm, int rank, int size, char* buf, size_t count, size_t bytes, DataType dtype,
                         CommOp op, const WaitPolicy& wait, int tag, std::vector<char>* scratch) {
  scratch->resize(bytes);
  char* tmp = scratch->data();
  const int n = static_cast<int>(bytes);
  int pof2 = 1;
  while (pof2 * 2 <= size) pof2 *= 2;
  const int rem = size - pof2;
  // Ranks 2i and 2i+1 (i < rem) fold into 2i+1, which holds x(2i) op x(2i+1).
  int vrank = rank - rem;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      MPI_Request req;
      MGS_MPI_CHECK(MPI_Isend(buf, n, MPI_BYTE, rank + 1, tag, comm, &req));
      MGS_RETURN_IF_ERROR(mpiWait(&req, wait));
      vrank = -1;
    } else {
      MPI_Request req;
      MGS_MPI_CHECK(MPI_Irecv(tmp, n, MPI_BYTE, rank - 1, tag, comm, &req));
      MGS_RETURN_IF_ERROR(mpiWait(&req, wait));
      MGS_RETURN_IF_ERROR(combine(buf, tmp, /*buf_is_low=*/false, count, bytes, dtype, op));
      vrank = rank / 2;
    }
  }
  if (vrank >= 0) {
    // Virtual rank v is real rank 2v+1 among the folded, v + rem past them;
    // its value covers a contiguous range of real ranks, in order.
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < rem ? 2 * vpeer + 1 : vpeer + rem;
      MGS_RETURN_IF_ERROR(exchange(comm, peer, buf, tmp, n, tag, wait));
      MGS_RETURN_IF_ERROR(combine(buf, tmp, (vrank & mask) == 0, count, bytes, dtype, op));
    }
  }
  if (rank < 2 * rem) {
    MPI_Request req;
    if (rank % 2 == 1) {
      MGS_MPI_CHECK(MPI_Isend(buf, n, MPI_BYTE, rank - 1, tag, comm, &req));
    } else {
      MGS_MPI_CHECK(MPI_Irecv(buf, n, MPI_BYTE, rank + 1, tag, comm, &req));
    }
    MGS_RETURN_IF_ERROR(mpiWait(&req, wait));
  }
  return Status::OK();
}

}  // namespace

Status smallAllreduce(MPI_Comm comm, int rank, int size, void* buf, size_t count, DataType dtype, CommOp op,
                      const WaitPolicy& wait, int tag, std::vector<char>* scratch) {
  MGS_ENSURE(reducible(dtype, op), kInternal, "small allreduce of " << dtypeName(dtype) << " with this operation");
  const size_t bytes = count * dtypeSize(dtype);
  MGS_ENSURE(bytes <= kSmallAllreduceMaxBytes, kInternal,
             "small allreduce of " << bytes << " bytes (at most " << kSmallAllreduceMaxBytes << ")");
  if (size <= 1 || count == 0) return Status::OK();
  return recursiveDoubling(comm, rank, size, static_cast<char*>(buf), count, bytes, dtype, op, wait, tag, scratch);
}

}  // namespace mgs
