#include "comm/communicator.h"

#include <cstring>

#include "common/check.h"

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

Status Communicator::reduceScatter(void* buf, void* recv, const std::vector<size_t>& counts, DataType dtype,
                                   CommOp op) {
  const size_t p = static_cast<size_t>(size()), me = static_cast<size_t>(rank());
  if (counts.size() != p)
    return Status(Code::kInvalidArgument, "reduce-scatter: " + std::to_string(counts.size()) + " counts for " +
                                              std::to_string(p) + " ranks");
  size_t total = 0, offset = 0;
  for (size_t q = 0; q < p; ++q) {
    if (q == me) offset = total;
    total += counts[q];
  }
  const size_t esize = dtypeSize(dtype);
  MGS_RETURN_IF_ERROR(allreduce(buf, total, dtype, op));
  if (counts[me]) std::memcpy(recv, static_cast<const char*>(buf) + offset * esize, counts[me] * esize);
  return Status::OK();
}

Status Communicator::alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                               const std::vector<size_t>& recv_bytes) {
  const size_t p = static_cast<size_t>(size()), me = static_cast<size_t>(rank());
  if (send_bytes.size() != p || recv_bytes.size() != p)
    return Status(Code::kInternal, "alltoallv: one count per rank is needed");
  // Every rank's counts, then every rank's whole buffer; each keeps its parts.
  std::vector<uint64_t> mine(send_bytes.begin(), send_bytes.end()), all(p * p);
  Status st = allgather(mine.data(), p * sizeof(uint64_t), all.data());
  if (!st.ok()) return st;
  std::vector<size_t> totals(p, 0);
  size_t grand = 0;
  for (size_t s = 0; s < p; ++s) {
    for (size_t q = 0; q < p; ++q) totals[s] += all[s * p + q];
    grand += totals[s];
  }
  std::vector<char> gathered(grand);
  size_t mine_total = totals[me];
  st = allgatherv(send, mine_total, gathered.data(), totals);
  if (!st.ok()) return st;
  size_t base = 0, out = 0;
  for (size_t s = 0; s < p; ++s) {
    size_t off = base;
    for (size_t q = 0; q < me; ++q) off += all[s * p + q];
    const size_t n = all[s * p + me];
    if (n != recv_bytes[s])
      return Status(Code::kInternal, "alltoallv: rank " + std::to_string(s) + " sends " + std::to_string(n) +
                                         " bytes here, " + std::to_string(recv_bytes[s]) + " expected");
    if (n) std::memcpy(static_cast<char*>(recv) + out, gathered.data() + off, n);
    out += n;
    base += totals[s];
  }
  return Status::OK();
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
