#include "comm/fake/thread_communicator.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace mgs {

ThreadWorld::ThreadWorld(int size) : size_(size), slots_(size, nullptr) {}

void ThreadWorld::arriveAndWait() {
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lk, [&] { return generation_ != gen; });
}

void ThreadWorld::exchange(int rank, const void* mine,
                           const std::function<void(const std::vector<const void*>&)>& read) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    slots_[rank] = mine;
  }
  arriveAndWait();
  std::vector<const void*> all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    all = slots_;
  }
  read(all);
  arriveAndWait();
}

namespace {

template <typename T>
void reduceInto(T* acc, const T* x, size_t n, CommOp op) {
  for (size_t i = 0; i < n; ++i) {
    switch (op) {
      case CommOp::kSum: acc[i] = static_cast<T>(acc[i] + x[i]); break;
      case CommOp::kMax: acc[i] = std::max(acc[i], x[i]); break;
      case CommOp::kMin: acc[i] = std::min(acc[i], x[i]); break;
      case CommOp::kBitAnd:
        if constexpr (std::is_integral_v<T>) acc[i] = static_cast<T>(acc[i] & x[i]);
        break;
    }
  }
}

template <typename T>
void reduceAll(const std::vector<const void*>& all, size_t count, CommOp op, void* out) {
  auto* acc = static_cast<T*>(out);
  std::memcpy(acc, all[0], count * sizeof(T));
  for (size_t r = 1; r < all.size(); ++r) reduceInto(acc, static_cast<const T*>(all[r]), count, op);
}

}  // namespace

Status ThreadCommunicator::allreduce(void* buf, size_t count, DataType dtype, CommOp op) {
  const size_t bytes = count * dtypeSize(dtype);
  MGS_ENSURE(dtype != MGS_FLOAT16 && dtype != MGS_BFLOAT16, kInternal,
             "allreduce of " << dtypeName(dtype) << " is not supported by communicators");
  std::vector<char> tmp(bytes);
  world_->exchange(rank_, buf, [&](const std::vector<const void*>& all) {
    if (count == 0) return;
    switch (dtype) {
      case MGS_FLOAT32: reduceAll<float>(all, count, op, tmp.data()); break;
      case MGS_FLOAT64: reduceAll<double>(all, count, op, tmp.data()); break;
      case MGS_INT32: reduceAll<int32_t>(all, count, op, tmp.data()); break;
      case MGS_INT64: reduceAll<int64_t>(all, count, op, tmp.data()); break;
      case MGS_UINT8: reduceAll<uint8_t>(all, count, op, tmp.data()); break;
      default: break;
    }
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

Status ThreadCommunicator::barrier() {
  world_->exchange(rank_, nullptr, [](const std::vector<const void*>&) {});
  return Status::OK();
}

}  // namespace mgs
