#include "comm/fake/thread_communicator.h"

#include <algorithm>
#include <cstring>

#include "comm/reduce.h"
#include "common/check.h"

namespace mgs {

void ThreadWorld::exchange(int rank, const void* mine,
                           const std::function<void(const std::vector<const void*>&)>& read) {
  // The second rendezvous brackets the reads: `mine` stays valid until every
  // rank has read it.
  std::vector<const void*> all, left;
  (void)rv_.exchange(rank, mine, "thread exchange", &all);
  read(all);
  (void)rv_.exchange(rank, nullptr, "thread exchange", &left);
}

Status ThreadCommunicator::allreduce(void* buf, size_t count, DataType dtype, CommOp op) {
  const size_t bytes = count * dtypeSize(dtype);
  MGS_ENSURE(reducible(dtype, op), kInternal, "allreduce of " << dtypeName(dtype) << " with this operation");
  std::vector<char> tmp(bytes);
  world_->exchange(rank_, buf, [&](const std::vector<const void*>& all) {
    if (count == 0) return;
    // In rank order, as every rank computes it: bitwise the same everywhere.
    std::memcpy(tmp.data(), all[0], bytes);
    for (size_t r = 1; r < all.size(); ++r) (void)reduceInto(tmp.data(), all[r], count, dtype, op);
  });
  if (bytes) std::memcpy(buf, tmp.data(), bytes);
  return Status::OK();
}

Status ThreadCommunicator::allgather(const void* send, size_t bytes, void* recv) {
  std::vector<size_t> counts(size(), bytes);
  return allgatherv(send, bytes, recv, counts);
}

Status ThreadCommunicator::allgatherv(const void* send, size_t send_bytes, void* recv,
                                      const std::vector<size_t>& recv_bytes) {
  MGS_ENSURE_EQ(recv_bytes[rank_], send_bytes, kInternal, "allgatherv: own count");
  world_->exchange(rank_, send, [&](const std::vector<const void*>& all) {
    size_t off = 0;
    for (size_t r = 0; r < all.size(); ++r) {
      if (recv_bytes[r]) std::memcpy(static_cast<char*>(recv) + off, all[r], recv_bytes[r]);
      off += recv_bytes[r];
    }
  });
  return Status::OK();
}

Status ThreadCommunicator::gatherStrings(const std::string& send, int root, std::vector<std::string>* out) {
  world_->exchange(rank_, &send, [&](const std::vector<const void*>& all) {
    if (rank_ != root) return;
    out->clear();
    for (const void* p : all) out->push_back(*static_cast<const std::string*>(p));
  });
  return Status::OK();
}

Status ThreadCommunicator::broadcast(void* buf, size_t bytes, int root) {
  std::vector<char> tmp(bytes);
  world_->exchange(rank_, buf, [&](const std::vector<const void*>& all) {
    if (bytes) std::memcpy(tmp.data(), all[root], bytes);
  });
  if (bytes && rank_ != root) std::memcpy(buf, tmp.data(), bytes);
  return Status::OK();
}

Status ThreadCommunicator::split(int color, int key, std::unique_ptr<Communicator>* out) {
  out->reset();
  struct Entry {
    int color, key, rank;
  };
  const Entry mine{color, key, rank_};
  std::vector<Entry> all;
  world_->exchange(rank_, &mine, [&](const std::vector<const void*>& slots) {
    for (const void* p : slots) all.push_back(*static_cast<const Entry*>(p));
  });
  // This rank's group, ordered by (key, rank); its first member makes the
  // group's world and every member takes it from there.
  std::vector<Entry> group;
  for (const Entry& e : all)
    if (color >= 0 && e.color == color) group.push_back(e);
  std::sort(group.begin(), group.end(),
            [](const Entry& a, const Entry& b) { return a.key != b.key ? a.key < b.key : a.rank < b.rank; });
  std::shared_ptr<ThreadWorld> made;
  if (!group.empty() && group[0].rank == rank_) made = std::make_shared<ThreadWorld>(static_cast<int>(group.size()));
  std::shared_ptr<ThreadWorld> sub;
  world_->exchange(rank_, &made, [&](const std::vector<const void*>& slots) {
    if (!group.empty()) sub = *static_cast<const std::shared_ptr<ThreadWorld>*>(slots[group[0].rank]);
  });
  if (group.empty()) return Status::OK();
  int index = 0;
  while (group[index].rank != rank_) ++index;
  *out = std::make_unique<ThreadCommunicator>(std::move(sub), index);
  return Status::OK();
}

Status ThreadCommunicator::barrier() {
  world_->exchange(rank_, nullptr, [](const std::vector<const void*>&) {});
  return Status::OK();
}

}  // namespace mgs
