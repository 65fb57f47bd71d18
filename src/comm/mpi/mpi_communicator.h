// MPI backend. Initialises MPI if the process has not (MPI_THREAD_SERIALIZED:
// only one thread, the current coordinator, calls MPI at any time; a later
// runtime after mgs_shutdown reuses the same MPI), works on a duplicate of
// MPI_COMM_WORLD with MPI_ERRORS_RETURN so failures come back as Status.
// Every collective is started nonblocking and waited for without busy-polling
// (mpi_util.h); large float sums and all 16-bit ones run a ring (ring_allreduce.h),
// and from 5 ranks on allreduces of a few bytes run recursive doubling
// (small_allreduce.h).
#pragma once

#include <memory>
#include <string>

#include <mpi.h>

#include <vector>

#include "comm/communicator.h"
#include "comm/mpi/mpi_util.h"
#include "comm/mpi/ring_allreduce.h"

namespace mgs {

class MpiCommunicator final : public Communicator {
 public:
  // Initialise MPI when needed and build the communicator.
  static Status create(std::unique_ptr<Communicator>* out);
  // MPI_Finalize, if mgs initialised MPI and it is not finalised yet. Called at
  // process exit (MPI cannot be initialised twice, so not at mgs_shutdown).
  // With a non-empty `hazard` (a fatal error or stall abort happened here),
  // waits at most a few seconds for the other ranks to reach exit too and
  // otherwise aborts the job (MPI_Abort) instead of hanging in MPI_Finalize.
  static void finalizeIfOwned(const std::string& hazard = std::string());
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return local_rank_; }
  int localSize() const override { return local_size_; }

  Status allreduce(void* buf, size_t count, DataType dtype, CommOp op) override;
  Status allgather(const void* send, size_t bytes, void* recv) override;
  Status startAllgather(const void* send, size_t bytes, void* recv, std::unique_ptr<PendingCollective>* op) override;
  Status allgatherv(const void* send, size_t send_bytes, void* recv, const std::vector<size_t>& recv_bytes) override;
  Status alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                   const std::vector<size_t>& recv_bytes) override;
  Status reduceScatter(void* buf, void* recv, const std::vector<size_t>& counts, DataType dtype, CommOp op) override;
  Status gatherStrings(const std::string& send, int root, std::vector<std::string>* out) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status barrier() override;
  Status split(int color, int key, std::unique_ptr<Communicator>* out) override;
  Status startAllreduce(void* buf, size_t count, DataType dtype, CommOp op,
                        std::unique_ptr<PendingCollective>* pending) override;
  Status startBroadcast(void* buf, size_t bytes, int root, std::unique_ptr<PendingCollective>* pending) override;
  bool asyncCollectives() const override { return true; }
  Status duplicate(std::unique_ptr<Communicator>* out) override;
  void setWaitHook(std::function<void()> hook) override { *wait_.hook = std::move(hook); }
  bool setRingMinBytes(size_t bytes) override {
    ring_min_bytes_ = bytes;
    return true;
  }
  size_t ringMinBytes() const override { return ring_min_bytes_; }
  AllreduceCounts allreduceCounts() const override { return counts_; }

 private:
  // Rank, size and the node-local numbers of `comm_` (owned).
  Status describe();
  // Whether a chunk of `count` elements takes the ring (see setRingMinBytes).
  bool onRing(size_t count, DataType dtype, CommOp op) const;
  MpiCommunicator();
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  WaitPolicy wait_;
  std::vector<char> scratch_;  // the ring's receive buffer, reused
  // startAllreduce's rings: each takes the next of these tag ranges, in the
  // same order on every rank.
  std::vector<std::weak_ptr<RingAllreduce::Steps>> ring_slots_;
  size_t rings_started_ = 0;
  size_t ring_min_bytes_;  // set in the constructor (the backend's default)
  AllreduceCounts counts_;
  std::vector<char> send_copy_;  // the blocking allreduce's out-of-place input
};

}  // namespace mgs
