// A communicator whose "ranks" are threads of one process. Used by unit tests
// to run the negotiation and execution logic for several ranks without MPI.
// Each collective is two barriers: every rank publishes a pointer to its data,
// all read what they need, then all leave together.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/fake/rendezvous.h"

namespace mgs {

class ThreadWorld {
 public:
  explicit ThreadWorld(int size) : rv_(size, /*timeoutSeconds=*/0) {}
  int size() const { return rv_.size(); }
  // Publish `mine` for `rank`, then call `read` with every rank's pointer once
  // all have published; returns after every rank's `read` has finished.
  void exchange(int rank, const void* mine, const std::function<void(const std::vector<const void*>&)>& read);

 private:
  Rendezvous rv_;  // never aborted, no timeout: its exchanges always succeed
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadWorld> world, int rank) : world_(std::move(world)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  int localRank() const override { return rank_; }
  int localSize() const override { return world_->size(); }

  Status allreduce(void* buf, size_t count, DataType dtype, CommOp op) override;
  Status allgather(const void* send, size_t bytes, void* recv) override;
  Status allgatherv(const void* send, size_t send_bytes, void* recv, const std::vector<size_t>& recv_bytes) override;
  Status gatherStrings(const std::string& send, int root, std::vector<std::string>* out) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status barrier() override;
  // The ranks (threads) with the same color >= 0 form a new thread world,
  // ordered by key, then rank: the hierarchical exchange's node and leader
  // communicators.
  Status split(int color, int key, std::unique_ptr<Communicator>* out) override;

 private:
  std::shared_ptr<ThreadWorld> world_;
  int rank_;
};

}  // namespace mgs
