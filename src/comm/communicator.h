// Communicator: the narrow interface every collective algorithm in mgs is
// written against. Backends: MPI (mpi/), threads in one process (fake/, for
// tests), NCCL later. All calls are collective, and blocking but for startAllgather: every rank of the
// communicator must make the same calls in the same order. Only the
// coordinator thread of a rank uses its communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace mgs {

enum class CommOp { kSum, kMax, kMin, kBitAnd };

// A collective started without waiting (Communicator::startAllgather).
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Sets *done once the operation has completed (its buffers may be reused).
  virtual Status test(bool* done) = 0;
  // Blocks until the operation has completed.
  virtual Status wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int localRank() const = 0;
  virtual int localSize() const = 0;

  // In place over `count` elements. dtype: float32/64, int32/64, uint8 (no 16-bit
  // floats: callers reduce those in float32). kBitAnd only for integer dtypes.
  virtual Status allreduce(void* buf, size_t count, DataType dtype, CommOp op) = 0;
  // Every rank contributes `bytes`; `recv` receives size()*bytes in rank order.
  virtual Status allgather(const void* send, size_t bytes, void* recv) = 0;
  // Rank r contributes recv_bytes[r] (send_bytes on this rank); `recv` receives
  // them back to back in rank order.
  virtual Status allgatherv(const void* send, size_t send_bytes, void* recv, const std::vector<size_t>& recv_bytes) = 0;
  // Nonblocking allgather: the contract of allgather(), but it returns at
  // once; `send` and `recv` stay untouched by the caller until *op reports
  // completion. Other collectives may be issued meanwhile (same order on
  // every rank). The default runs allgather() now and returns a finished op.
  virtual Status startAllgather(const void* send, size_t bytes, void* recv, std::unique_ptr<PendingCollective>* op);
  // Nonblocking allreduce (in place) and broadcast, with startAllgather's
  // contract. The defaults run the blocking call now and return a finished op;
  // asyncCollectives() says whether the backend really returns at once.
  virtual Status startAllreduce(void* buf, size_t count, DataType dtype, CommOp op,
                                std::unique_ptr<PendingCollective>* pending);
  virtual Status startBroadcast(void* buf, size_t bytes, int root, std::unique_ptr<PendingCollective>* pending);
  virtual bool asyncCollectives() const { return false; }
  // Collective: a communicator over the same ranks whose collectives are
  // ordered apart from this one's (so a sequence of them may be started at
  // times that differ between ranks, as long as its own order is the same
  // everywhere). The default says the backend cannot.
  virtual Status duplicate(std::unique_ptr<Communicator>* out);
  // Called, on the waiting thread, each time a blocking call of this
  // communicator or of one made from it (duplicate, split) finds its
  // operation unfinished. It may start or test nonblocking operations; it
  // must not block. Backends that cannot call it ignore it.
  virtual void setWaitHook(std::function<void()> hook) { (void)hook; }
  // Each rank sends send_bytes[q] bytes to rank q (its parts back to back in
  // `send`, in rank order) and receives recv_bytes[q] bytes from rank q into
  // `recv`, back to back in rank order. Every rank's recv_bytes[q] must equal
  // rank q's send_bytes for it. The default runs an allgatherv of every
  // rank's whole send buffer (size() times the traffic); backends override it.
  virtual Status alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                           const std::vector<size_t>& recv_bytes);
  // Reduces the sum(counts) elements of every rank's `buf` with `op` and
  // leaves this rank's part in `recv`: counts[rank()] elements, the parts
  // back to back in rank order. `buf` is the caller's scratch: its contents
  // are undefined afterwards. The default runs an allreduce of `buf` and
  // keeps this rank's part (an allreduce's traffic); backends override it.
  virtual Status reduceScatter(void* buf, void* recv, const std::vector<size_t>& counts, DataType dtype, CommOp op);
  // Backends with two allreduce algorithms for float sums (MPI: mgs's ring,
  // bandwidth-optimal but 2(P-1) start-ups, and the MPI library's own, fewer
  // start-ups): float sums of at least `bytes` take the ring, smaller ones
  // the library's. duplicate() inherits the setting; split() starts from the
  // backend's default. Returns false where the backend has no such choice.
  // Every rank must set the same value before the collectives it affects.
  virtual bool setRingMinBytes(size_t bytes) {
    (void)bytes;
    return false;
  }
  virtual size_t ringMinBytes() const { return 0; }
  // How many float sums of at least 64 KiB this communicator ran on each
  // algorithm (blocking and nonblocking calls; zeros without the choice).
  struct AllreduceCounts {
    uint64_t ring = 0, library = 0;
  };
  virtual AllreduceCounts allreduceCounts() const { return {}; }
  // Variable-size byte strings gathered to `root`; `out` is filled on root only.
  virtual Status gatherStrings(const std::string& send, int root, std::vector<std::string>* out) = 0;
  virtual Status broadcast(void* buf, size_t bytes, int root) = 0;
  virtual Status barrier() = 0;

  // A variable-size string from `root` to every rank (size, then bytes).
  Status broadcastString(std::string* s, int root);
  // Collective: the ranks with the same `color` >= 0 form a new
  // communicator, ordered by `key` (then rank); a rank with color < 0 gets
  // none (*out null). For the hierarchical exchange (a node's ranks, the
  // nodes' leaders). The default says the backend cannot split.
  virtual Status split(int color, int key, std::unique_ptr<Communicator>* out);
};

}  // namespace mgs
