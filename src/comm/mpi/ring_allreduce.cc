#include "comm/mpi/ring_allreduce.h"

#include <algorithm>

#include "comm/reduce.h"

namespace mgs {
namespace {

struct Span {
  size_t begin, end;  // elements
  size_t size() const { return end - begin; }
};

int mod(int a, int p) { return ((a % p) + p) % p; }

// Segment s of P, and chunk c of `chunks` within a span: the same split on
// every rank, so a sender's chunk c is the receiver's chunk c. With `bounds`
// (a reduce-scatter's parts) segment s is part s - 1: the reduce-scatter
// half leaves segment rank + 1 complete on each rank, which is then its own
// part.
Span segment(size_t count, int size, int s, const std::vector<size_t>* bounds) {
  if (bounds) {
    const size_t part = static_cast<size_t>(mod(s - 1, size));
    return {(*bounds)[part], (*bounds)[part + 1]};
  }
  return {count * static_cast<size_t>(s) / static_cast<size_t>(size),
          count * static_cast<size_t>(s + 1) / static_cast<size_t>(size)};
}
Span chunkOf(const Span& seg, int chunks, int c) {
  const size_t n = seg.size();
  return {seg.begin + n * static_cast<size_t>(c) / static_cast<size_t>(chunks),
          seg.begin + n * static_cast<size_t>(c + 1) / static_cast<size_t>(chunks)};
}
// The ring: with `bounds`, its reduce-scatter half only.
Status ring(MPI_Comm comm, int rank, int size, void* buf, size_t count, const std::vector<size_t>* bounds,
            DataType dtype, CommOp op, const WaitPolicy& wait, int tag, std::vector<char>* scratch) {
  MGS_ENSURE(reducible(dtype, op), kInternal, "ring allreduce of " << dtypeName(dtype) << " with this operation");
  if (size <= 1 || count == 0) return Status::OK();
  const size_t es = dtypeSize(dtype);
  auto* data = static_cast<char*>(buf);
  size_t segMax = (count + static_cast<size_t>(size) - 1) / static_cast<size_t>(size);
  if (bounds) {
    segMax = 0;
    for (int s = 0; s < size; ++s) segMax = std::max(segMax, segment(count, size, s, bounds).size());
  }
  const int chunks = static_cast<int>(std::clamp<size_t>(segMax * es / kRingChunkBytes, 1, kRingChunks));
  const size_t chunkMax = (segMax + static_cast<size_t>(chunks) - 1) / static_cast<size_t>(chunks);
  scratch->resize(chunkMax * es * static_cast<size_t>(chunks));  // one receive slot per chunk
  const int right = mod(rank + 1, size), left = mod(rank - 1, size);
  // 2(P-1) steps: P-1 of reduce-scatter (receive into scratch, add), then P-1
  // of allgather (receive in place). Step t sends segment out(t) and receives
  // in(t), and out(t + 1) == in(t): what arrives at step t is what goes on at
  // t + 1. So each chunk runs its own chain of steps, and chunk c moves on as
  // soon as its own piece has arrived, not when the whole step has: the link
  // never idles between steps (a step-synchronous ring left it idle at every
  // step and ran a 9.4 MB allreduce on 1 Gbit/s at 64% of the wire's rate).
  const int steps = bounds ? size - 1 : 2 * (size - 1);
  auto outSeg = [&](int t) { return t < size - 1 ? mod(rank - t, size) : mod(rank + 1 - (t - (size - 1)), size); };
  auto inSeg = [&](int t) { return t < size - 1 ? mod(rank - t - 1, size) : mod(rank - (t - (size - 1)), size); };
  std::vector<MPI_Request> recvs(chunks, MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends(static_cast<size_t>(chunks) * steps, MPI_REQUEST_NULL);
  std::vector<int> at(chunks, 0);  // the step whose receive chunk c waits for

  auto postSend = [&](int c, int t) -> Status {
    const Span s = chunkOf(segment(count, size, outSeg(t), bounds), chunks, c);
    MGS_MPI_CHECK(MPI_Isend(data + s.begin * es, static_cast<int>(s.size() * es), MPI_BYTE, right, tag + c, comm,
                            &sends[static_cast<size_t>(t) * chunks + c]));
    return Status::OK();
  };
  auto postRecv = [&](int c, int t) -> Status {
    const Span r = chunkOf(segment(count, size, inSeg(t), bounds), chunks, c);
    char* dst = scratch->data() + static_cast<size_t>(c) * chunkMax * es;
    if (t >= size - 1) {
      // In place: this piece of the buffer left at reduce-scatter step
      // t - (P-1) (the same segment); that send must be done before it is
      // overwritten. It finished long ago in practice.
      MGS_RETURN_IF_ERROR(mpiWait(&sends[static_cast<size_t>(t - (size - 1)) * chunks + c], wait));
      dst = data + r.begin * es;
    }
    MGS_MPI_CHECK(MPI_Irecv(dst, static_cast<int>(r.size() * es), MPI_BYTE, left, tag + c, comm, &recvs[c]));
    return Status::OK();
  };

  for (int c = 0; c < chunks; ++c) MGS_RETURN_IF_ERROR(postRecv(c, 0));
  for (int c = 0; c < chunks; ++c) MGS_RETURN_IF_ERROR(postSend(c, 0));
  // Messages of one chunk share a tag and are matched in order (MPI does not
  // let messages of one sender and tag overtake), one receive posted at a time.
  std::vector<int> done(chunks);
  for (int running = chunks; running > 0;) {
    int n = 0;
    MGS_RETURN_IF_ERROR(mpiWaitSome(chunks, recvs.data(), &n, done.data(), wait));
    for (int i = 0; i < n; ++i) {
      const int c = done[i], t = at[c];
      if (t < size - 1) {
        const Span r = chunkOf(segment(count, size, inSeg(t), bounds), chunks, c);
        MGS_RETURN_IF_ERROR(reduceInto(data + r.begin * es, scratch->data() + static_cast<size_t>(c) * chunkMax * es,
                                       r.size(), dtype, op));
      }
      if (t + 1 == steps) {
        --running;
        continue;
      }
      at[c] = t + 1;
      MGS_RETURN_IF_ERROR(postSend(c, t + 1));
      MGS_RETURN_IF_ERROR(postRecv(c, t + 1));
    }
  }
  return mpiWaitAll(static_cast<int>(sends.size()), sends.data(), wait);
}

}  // namespace

Status ringAllreduce(MPI_Comm comm, int rank, int size, void* buf, size_t count, DataType dtype, CommOp op,
                     const WaitPolicy& wait, int tag, std::vector<char>* scratch) {
  return ring(comm, rank, size, buf, count, nullptr, dtype, op, wait, tag, scratch);
}

Status ringReduceScatter(MPI_Comm comm, int rank, int size, void* buf, const std::vector<size_t>& bounds,
                         DataType dtype, CommOp op, const WaitPolicy& wait, int tag, std::vector<char>* scratch) {
  MGS_ENSURE(bounds.size() == static_cast<size_t>(size) + 1 && bounds.front() == 0, kInternal,
             "ring reduce-scatter: " << bounds.size() << " bounds for " << size << " ranks");
  return ring(comm, rank, size, buf, bounds.back(), &bounds, dtype, op, wait, tag, scratch);
}

}  // namespace mgs
