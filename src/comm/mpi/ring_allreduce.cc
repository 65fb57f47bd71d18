#include "comm/mpi/ring_allreduce.h"

#include <algorithm>

#include "comm/reduce.h"

namespace mgs {
namespace {

struct Span {
  size_t begin, end;  // elements
  size_t size() const { return end - begin; }
};

// Segment s of P, and chunk c of `chunks` within a span: the same split on
// every rank, so a sender's chunk c is the receiver's chunk c.
Span segment(size_t count, int size, int s) {
  return {count * static_cast<size_t>(s) / static_cast<size_t>(size),
          count * static_cast<size_t>(s + 1) / static_cast<size_t>(size)};
}
Span chunkOf(const Span& seg, int chunks, int c) {
  const size_t n = seg.size();
  return {seg.begin + n * static_cast<size_t>(c) / static_cast<size_t>(chunks),
          seg.begin + n * static_cast<size_t>(c + 1) / static_cast<size_t>(chunks)};
}
int mod(int a, int p) { return ((a % p) + p) % p; }

}  // namespace

Status ringAllreduce(MPI_Comm comm, int rank, int size, void* buf, size_t count, DataType dtype, CommOp op,
                     const WaitPolicy& wait, int tag, std::vector<char>* scratch) {
  MGS_ENSURE(reducible(dtype, op), kInternal, "ring allreduce of " << dtypeName(dtype) << " with this operation");
  if (size <= 1 || count == 0) return Status::OK();
  const size_t es = dtypeSize(dtype);
  auto* data = static_cast<char*>(buf);
  const size_t segMax = (count + static_cast<size_t>(size) - 1) / static_cast<size_t>(size);
  const int chunks = static_cast<int>(std::clamp<size_t>(segMax * es / kRingChunkBytes, 1, kRingChunks));
  scratch->resize(segMax * es);
  const int right = mod(rank + 1, size), left = mod(rank - 1, size);
  std::vector<MPI_Request> recvs(chunks), sends(chunks);

  // One ring step: send segment `out` to the right, receive segment `in` from
  // the left (into scratch to reduce, or straight into place), chunk by chunk.
  auto step = [&](int out, int in, bool reduce) -> Status {
    const Span so = segment(count, size, out), si = segment(count, size, in);
    for (int c = 0; c < chunks; ++c) {
      const Span r = chunkOf(si, chunks, c);
      char* dst = reduce ? scratch->data() + (r.begin - si.begin) * es : data + r.begin * es;
      MGS_MPI_CHECK(MPI_Irecv(dst, static_cast<int>(r.size() * es), MPI_BYTE, left, tag + c, comm, &recvs[c]));
    }
    for (int c = 0; c < chunks; ++c) {
      const Span s = chunkOf(so, chunks, c);
      MGS_MPI_CHECK(
          MPI_Isend(data + s.begin * es, static_cast<int>(s.size() * es), MPI_BYTE, right, tag + c, comm, &sends[c]));
    }
    for (int c = 0; c < chunks; ++c) {
      MGS_RETURN_IF_ERROR(mpiWait(&recvs[c], wait));
      if (!reduce) continue;
      const Span r = chunkOf(si, chunks, c);
      MGS_RETURN_IF_ERROR(
          reduceInto(data + r.begin * es, scratch->data() + (r.begin - si.begin) * es, r.size(), dtype, op));
    }
    return mpiWaitAll(chunks, sends.data(), wait);
  };
  // Reduce-scatter: after P-1 steps rank r holds the full result of segment r+1.
  for (int s = 0; s < size - 1; ++s) MGS_RETURN_IF_ERROR(step(mod(rank - s, size), mod(rank - s - 1, size), true));
  // Allgather: pass the finished segments around.
  for (int s = 0; s < size - 1; ++s) MGS_RETURN_IF_ERROR(step(mod(rank + 1 - s, size), mod(rank - s, size), false));
  return Status::OK();
}

}  // namespace mgs
