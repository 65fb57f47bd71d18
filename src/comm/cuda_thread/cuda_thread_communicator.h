// A device communicator whose ranks are threads of one process sharing one
// GPU: what NCCL does for device buffers, for the case NCCL refuses (two
// ranks on one device), so that every device exchange can run at P = 2..8
// on the single GPU a test machine has. Tests and benchmarks only; the
// runtime uses NcclCommunicator (src/comm/nccl).
//
// NCCL's semantics, as the device exchanges rely on them:
//  - Collectives take DEVICE pointers and are stream-ordered on this rank's
//    stream (stream()): the data moves when the stream reaches the call, and
//    work enqueued on the stream after it sees the result. startAllgather
//    returns a PendingCollective that polls an event (no host sync).
//  - A rank's send buffer may be reused by work ordered after the
//    collective on its stream: completion on a rank's stream means every
//    rank has read that rank's data.
//  - Async errors and abort: abort(why) (or a rank not reaching a collective
//    within the timeout) aborts the whole world; every pending and later
//    operation on every rank fails with kCommunication naming the reason,
//    never a hang.
// How: each collective is a host rendezvous of the P threads (the one
// difference from NCCL, whose enqueue never waits for the peers). At the
// first, every rank has recorded an event after its send data on its
// stream; each rank's stream then waits for every rank's event and copies
// (device to device) what it receives. At the second, every rank has
// recorded an event after its copies; each rank's stream waits for all of
// them before anything later runs. allreduce is staged through host memory
// (summed in rank order, then copied back; the copy waits on the stream).
//
// The host twin, the same interface over host memory without streams, is
// ThreadCommunicator (src/comm/fake): the CPU tests run the device
// exchanges' pipeline logic over it.
//
// Written 2026-12-01 without a GPU: never run on one
// (tests/gpu/device_threads_gpu_test.cc, tests/gpu/runtime_gpu_test.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/fake/rendezvous.h"

namespace mgs {

// The world: a rendezvous of P rank threads with abort and timeout
// (comm/fake/rendezvous.h, tested on the CPU) on one CUDA device.
class CudaThreadWorld : public Rendezvous {
 public:
  // `timeoutSeconds`: how long a rank waits at a rendezvous for the others
  // before it aborts the world (<= 0: forever).
  CudaThreadWorld(int size, int device, double timeoutSeconds = 120)
      : Rendezvous(size, timeoutSeconds), device_(device) {}
  int device() const { return device_; }

 private:
  const int device_;
};

class CudaThreadCommunicator final : public Communicator {
 public:
  // Creates this rank's stream and events on the world's device.
  static Status create(std::shared_ptr<CudaThreadWorld> world, int rank, std::unique_ptr<CudaThreadCommunicator>* out);
  ~CudaThreadCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  int localRank() const override { return rank_; }
  int localSize() const override { return world_->size(); }
  int device() const { return world_->device(); }
  void* stream() const { return stream_; }  // cudaStream_t

  Status allreduce(void* buf, size_t count, DataType dtype, CommOp op) override;
  Status allgather(const void* send, size_t bytes, void* recv) override;
  Status allgatherv(const void* send, size_t send_bytes, void* recv, const std::vector<size_t>& recv_bytes) override;
  Status startAllgather(const void* send, size_t bytes, void* recv, std::unique_ptr<PendingCollective>* op) override;
  Status gatherStrings(const std::string& send, int root, std::vector<std::string>* out) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status barrier() override;
  // The ranks of one color as a new world on the same device, in (key,
  // rank) order; the new communicator enqueues on THIS communicator's
  // stream (as NcclCommunicator::split) and must not outlive it.
  Status split(int color, int key, std::unique_ptr<Communicator>* out) override;

  // NCCL's ncclCommAbort: every rank's pending and later operations fail.
  void abort(const std::string& why) { world_->abort("rank " + std::to_string(rank_) + ": " + why); }

 private:
  CudaThreadCommunicator(std::shared_ptr<CudaThreadWorld> world, int rank) : world_(std::move(world)), rank_(rank) {}
  Status usable(const char* what) const;
  // The stream-ordered core of every device collective: after the first
  // rendezvous (publishing `mine`), copy(all) enqueues this rank's copies;
  // after the second, this stream waits for every rank's copies.
  struct Part {
    const void* send;
    void* ready;  // cudaEvent_t recorded after the send data
  };
  Status collective(const char* what, const void* send,
                    const std::function<Status(const std::vector<const Part*>&)>& copy);
  Status waitStream(const char* what);  // an event on the stream, polled with the world's abort

  std::shared_ptr<CudaThreadWorld> world_;
  int rank_;
  void* stream_ = nullptr;                    // cudaStream_t
  bool ownsStream_ = true;                    // false for a split communicator (its parent's stream)
  void* ready_ = nullptr;                     // cudaEvent_t: send data ready
  void* done_[2] = {nullptr, nullptr};        // cudaEvent_t: this rank's copies, by collective parity
  uint64_t calls_ = 0;
};

}  // namespace mgs
