#include "comm/communicator.h"

namespace mgs {
namespace {
class FinishedCollective final : public PendingCollective {
 public:
  Status test(bool* done) override {
    *done = true;
    return Status::OK();
  }
  Status wait() override { return Status::OK(); }
};
}  // namespace

Status Communicator::startAllgather(const void* send, size_t bytes, void* recv,
                                    std::unique_ptr<PendingCollective>* op) {
  op->reset(new FinishedCollective);
  return allgather(send, bytes, recv);
}

Status Communicator::startAllreduce(void* buf, size_t count, DataType dtype, CommOp op,
                                    std::unique_ptr<PendingCollective>* pending) {
  pending->reset(new FinishedCollective);
  return allreduce(buf, count, dtype, op);
}

Status Communicator::startBroadcast(void* buf, size_t bytes, int root, std::unique_ptr<PendingCollective>* pending) {
  pending->reset(new FinishedCollective);
  return broadcast(buf, bytes, root);
}

Status Communicator::duplicate(std::unique_ptr<Communicator>* out) {
  out->reset();
  return Status(Code::kUnsupported, "this communicator cannot be duplicated");
}

Status Communicator::split(int, int, std::unique_ptr<Communicator>* out) {
  out->reset();
  return Status(Code::kUnsupported, "this communicator cannot be split into sub-communicators");
}

Status Communicator::broadcastString(std::string* s, int root) {
  uint64_t n = s->size();
  Status st = broadcast(&n, sizeof n, root);
  if (!st.ok()) return st;
  if (rank() != root) s->resize(n);
  if (n == 0) return Status::OK();
  return broadcast(s->data(), n, root);
}

}  // namespace mgs
