// NCCL backend of Communicator, for buffers in CUDA device memory.
//
// Built only when CUDA and NCCL are found (MGS_WITH_NCCL is then defined for
// dependants). Ran on an H100 at np 1 (gpu/nccl, 2026-11-26); never
// at np > 1 (one GPU): docs/architecture.md, "GPU parts".
//
// Set-up (collective over `bootstrap`, normally the MPI communicator): rank 0
// creates the ncclUniqueId, bootstrap->broadcast() sends it (with a flag, so
// a failure on rank 0 fails every rank instead of hanging them), every rank
// calls ncclCommInitRankConfig on its device with a non-blocking config, and
// the ranks agree over the bootstrap that all of them succeeded.
//
// Collectives run on the communicator's own stream (stream(): the pipeline
// can order its kernels against it). The blocking calls record an event and
// poll it; between polls they ask ncclCommGetAsyncError, and on an error or
// past NcclOptions::timeoutSeconds they ncclCommAbort the communicator and
// return kCommunication / kTimeout naming the collective and the rank, so a
// dead peer never hangs a rank (nccl_wait.h). After an abort every call fails
// at once with the first error. startAllgather(), startAllreduce() and
// startBroadcast() return at once; their PendingCollective polls the same way.
//
// Buffers: allreduce/allgather/allgatherv/broadcast take DEVICE pointers
// (checked: a host pointer is an kInvalidArgument error naming the call).
// gatherStrings and barrier go through the bootstrap (host data); barrier
// first drains this communicator's stream. Coordinator thread only, like
// every Communicator; `bootstrap` must outlive this object.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace mgs {

struct NcclOptions {
  int device = -1;              // CUDA device; -1: bootstrap->localRank() % visible devices
  double timeoutSeconds = 600;  // a blocking collective (or init) older than this aborts; <= 0: never
};

class NcclCommunicator final : public Communicator {
 public:
  // The factory the runtime wires (MGS_BACKEND=nccl, or auto for CUDA tensors).
  static Status create(Communicator* bootstrap, const NcclOptions& options, std::unique_ptr<NcclCommunicator>* out);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return bootstrap_->localRank(); }
  int localSize() const override { return bootstrap_->localSize(); }
  int device() const { return device_; }
  // The cudaStream_t every collective is enqueued on.
  void* stream() const { return stream_; }
  // Empty unless the communicator was aborted (then: why).
  const std::string& abortReason() const { return abortReason_; }

  Status allreduce(void* buf, size_t count, DataType dtype, CommOp op) override;
  Status allgather(const void* send, size_t bytes, void* recv) override;
  Status allgatherv(const void* send, size_t send_bytes, void* recv, const std::vector<size_t>& recv_bytes) override;
  Status startAllgather(const void* send, size_t bytes, void* recv, std::unique_ptr<PendingCollective>* op) override;
  // Enqueue only, like startAllgather (the agreed device bucket's phases).
  Status startAllreduce(void* buf, size_t count, DataType dtype, CommOp op,
                        std::unique_ptr<PendingCollective>* pending) override;
  Status startBroadcast(void* buf, size_t bytes, int root, std::unique_ptr<PendingCollective>* pending) override;
  Status gatherStrings(const std::string& send, int root, std::vector<std::string>* out) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status barrier() override;
  // ncclCommSplit (collective), with the bootstrap split alike: the new
  // communicator enqueues on THIS communicator's stream (so that the
  // collectives of a hierarchical device bucket on the three are ordered
  // by their enqueue order) and must not outlive it. Written 2026-12-02
  // without a GPU: never run.
  Status split(int color, int key, std::unique_ptr<Communicator>* out) override;

  // Used by the pending operations: waits for `event` (a cudaEvent_t) the
  // NCCL way (async errors, deadline, abort); test() when !block, with the
  // deadline counted from `started` when given (nccl::pollOnce).
  Status pollEvent(void* event, const char* what, bool block, bool* done,
                   const std::chrono::steady_clock::time_point* started = nullptr);

 private:
  NcclCommunicator() = default;
  Status usable(const char* what) const;
  Status checkDevice(const void* p, const char* what) const;
  Status enqueued(int ncclResult, const char* what);  // after an NCCL call
  Status settle(const char* what);                    // non-blocking comm: wait out ncclInProgress
  Status drain(const char* what);                     // record + wait on the stream
  std::string asyncError();
  void abort(const std::string& why);

  Communicator* bootstrap_ = nullptr;
  NcclOptions options_;
  int rank_ = 0, size_ = 1, device_ = 0;
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t
  void* event_ = nullptr;   // cudaEvent_t of the blocking calls
  bool ownsStream_ = true;  // false for a split communicator (its parent's stream)
  std::unique_ptr<Communicator> ownBootstrap_;  // a split communicator's bootstrap
  bool aborted_ = false;
  std::string abortReason_;
};

}  // namespace mgs
