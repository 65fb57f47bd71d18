// Never run on a GPU (cuda_thread_communicator.h).
#include "comm/cuda_thread/cuda_thread_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "comm/reduce.h"
#include "common/cuda_check.h"
#include "common/dtype.h"

namespace mgs {
namespace {

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t asEvent(void* e) { return static_cast<cudaEvent_t>(e); }

// Polls `event` until it has passed, the world is aborted, or the timeout.
Status pollEvent(CudaThreadWorld& world, void* event, const char* what, bool block, bool* done, double timeout) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const std::string why = world.abortReason();
    if (!why.empty()) return Status(Code::kCommunication, std::string(what) + ": the communicator was aborted (" + why + ")");
    const cudaError_t e = cudaEventQuery(asEvent(event));
    if (e == cudaSuccess) {
      *done = true;
      return Status::OK();
    }
    if (e != cudaErrorNotReady) {
      world.abort(std::string(what) + ": " + cudaGetErrorName(e));
      MGS_CUDA_CHECK(e);
    }
    *done = false;
    if (!block) return Status::OK();
    if (timeout > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout) {
      world.abort(std::string(what) + " did not complete within " + std::to_string(timeout) + " s");
      return Status(Code::kTimeout, std::string(what) + " did not complete within " + std::to_string(timeout) + " s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

class Pending final : public PendingCollective {
 public:
  Pending(std::shared_ptr<CudaThreadWorld> world, void* event, double timeout)
      : world_(std::move(world)), event_(event), timeout_(timeout) {}
  ~Pending() override { (void)cudaEventDestroy(asEvent(event_)); }
  Status test(bool* done) override { return pollEvent(*world_, event_, "allgather", false, done, timeout_); }
  Status wait() override {
    bool done = false;
    return pollEvent(*world_, event_, "allgather", true, &done, timeout_);
  }

 private:
  std::shared_ptr<CudaThreadWorld> world_;
  void* event_;
  double timeout_;
};

constexpr double kWaitTimeout = 120;

}  // namespace

Status CudaThreadCommunicator::create(std::shared_ptr<CudaThreadWorld> world, int rank,
                                      std::unique_ptr<CudaThreadCommunicator>* out) {
  MGS_ENSURE(world != nullptr && rank >= 0 && rank < world->size(), kInvalidArgument,
             "device thread communicator: rank " << rank << " outside the world");
  std::unique_ptr<CudaThreadCommunicator> c(new CudaThreadCommunicator(world, rank));
  MGS_CUDA_CHECK(cudaSetDevice(world->device()));
  cudaStream_t s = nullptr;
  MGS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  c->stream_ = s;
  for (void** e : {&c->ready_, &c->done_[0], &c->done_[1]}) {
    cudaEvent_t ev = nullptr;
    MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *e = ev;
  }
  *out = std::move(c);
  return Status::OK();
}

CudaThreadCommunicator::~CudaThreadCommunicator() {
  (void)cudaSetDevice(world_->device());
  if (stream_) (void)cudaStreamSynchronize(asStream(stream_));
  for (void* e : {ready_, done_[0], done_[1]})
    if (e) (void)cudaEventDestroy(asEvent(e));
  if (stream_ && ownsStream_) (void)cudaStreamDestroy(asStream(stream_));
}

Status CudaThreadCommunicator::split(int color, int key, std::unique_ptr<Communicator>* out) {
  out->reset();
  MGS_RETURN_IF_ERROR(usable("split"));
  struct Entry {
    int color, key, rank;
  };
  const Entry mine{color, key, rank_};
  std::vector<const void*> all;
  MGS_RETURN_IF_ERROR(world_->exchange(rank_, &mine, "split", &all));
  std::vector<Entry> group;
  for (const void* p : all) {
    const Entry e = *static_cast<const Entry*>(p);
    if (color >= 0 && e.color == color) group.push_back(e);
  }
  std::sort(group.begin(), group.end(),
            [](const Entry& a, const Entry& b) { return a.key != b.key ? a.key < b.key : a.rank < b.rank; });
  // The group's first member makes its world; every member takes it (a
  // second exchange, which also ends the reads of the first).
  std::shared_ptr<CudaThreadWorld> made;
  if (!group.empty() && group[0].rank == rank_)
    made = std::make_shared<CudaThreadWorld>(static_cast<int>(group.size()), world_->device(), kWaitTimeout);
  MGS_RETURN_IF_ERROR(world_->exchange(rank_, &made, "split", &all));
  if (group.empty()) return world_->exchange(rank_, nullptr, "split", &all);
  std::shared_ptr<CudaThreadWorld> sub = *static_cast<const std::shared_ptr<CudaThreadWorld>*>(all[group[0].rank]);
  MGS_RETURN_IF_ERROR(world_->exchange(rank_, nullptr, "split", &all));  // every rank has copied its pointer
  int index = 0;
  while (group[index].rank != rank_) ++index;
  std::unique_ptr<CudaThreadCommunicator> c(new CudaThreadCommunicator(std::move(sub), index));
  MGS_CUDA_CHECK(cudaSetDevice(world_->device()));
  c->stream_ = stream_;
  c->ownsStream_ = false;
  for (void** e : {&c->ready_, &c->done_[0], &c->done_[1]}) {
    cudaEvent_t ev = nullptr;
    MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *e = ev;
  }
  *out = std::move(c);
  return Status::OK();
}

Status CudaThreadCommunicator::usable(const char* what) const {
  const std::string why = world_->abortReason();
  if (!why.empty())
    return Status(Code::kCommunication, std::string(what) + " on rank " + std::to_string(rank_) +
                                            ": the communicator was aborted (" + why + ")");
  return Status::OK();
}

Status CudaThreadCommunicator::collective(const char* what, const void* send,
                                          const std::function<Status(const std::vector<const Part*>&)>& copy) {
  MGS_RETURN_IF_ERROR(usable(what));
  MGS_CUDA_CHECK(cudaSetDevice(world_->device()));
  // 1. This rank's send data is ready once the stream reaches here.
  MGS_CUDA_CHECK(cudaEventRecord(asEvent(ready_), asStream(stream_)));
  const Part me{send, ready_};
  std::vector<const void*> all;
  MGS_RETURN_IF_ERROR(world_->exchange(rank_, &me, what, &all));
  std::vector<const Part*> parts(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    parts[r] = static_cast<const Part*>(all[r]);
    MGS_CUDA_CHECK(cudaStreamWaitEvent(asStream(stream_), asEvent(parts[r]->ready), 0));
  }
  // 2. This rank's copies, then the others' copies of its data, before any
  // later work on its stream (which may overwrite its send buffer).
  Status st = copy(parts);
  void* done = done_[calls_++ % 2];
  const cudaError_t rec = cudaEventRecord(asEvent(done), asStream(stream_));
  if (st.ok() && rec != cudaSuccess) st = Status(Code::kCuda, std::string(what) + ": " + cudaGetErrorName(rec));
  if (!st.ok()) world_->abort(std::string(what) + ": " + st.message());  // the peers must not wait for it
  std::vector<const void*> dones;
  const Status met = world_->exchange(rank_, done, what, &dones);
  MGS_RETURN_IF_ERROR(st);
  MGS_RETURN_IF_ERROR(met);
  for (int r = 0; r < size(); ++r)
    if (r != rank_) MGS_CUDA_CHECK(cudaStreamWaitEvent(asStream(stream_), asEvent(const_cast<void*>(dones[r])), 0));
  return Status::OK();
}

Status CudaThreadCommunicator::waitStream(const char* what) {
  cudaEvent_t ev = nullptr;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  Pending p(world_, ev, kWaitTimeout);  // destroys the event on every path
  MGS_CUDA_CHECK(cudaEventRecord(ev, asStream(stream_)));
  bool done = false;
  return pollEvent(*world_, ev, what, true, &done, kWaitTimeout);
}

Status CudaThreadCommunicator::startAllgather(const void* send, size_t bytes, void* recv,
                                              std::unique_ptr<PendingCollective>* op) {
  MGS_RETURN_IF_ERROR(collective("allgather", send, [&](const std::vector<const Part*>& parts) -> Status {
    for (size_t r = 0; r < parts.size() && bytes; ++r)
      MGS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(recv) + r * bytes, parts[r]->send, bytes,
                                     cudaMemcpyDeviceToDevice, asStream(stream_)));
    return Status::OK();
  }));
  cudaEvent_t ev = nullptr;
  MGS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  auto p = std::make_unique<Pending>(world_, ev, kWaitTimeout);  // owns ev from here
  MGS_CUDA_CHECK(cudaEventRecord(ev, asStream(stream_)));
  *op = std::move(p);
  return Status::OK();
}

Status CudaThreadCommunicator::allgather(const void* send, size_t bytes, void* recv) {
  std::unique_ptr<PendingCollective> op;
  MGS_RETURN_IF_ERROR(startAllgather(send, bytes, recv, &op));
  return op->wait();
}

Status CudaThreadCommunicator::allgatherv(const void* send, size_t send_bytes, void* recv,
                                          const std::vector<size_t>& recv_bytes) {
  MGS_ENSURE(recv_bytes.size() == static_cast<size_t>(size()) && recv_bytes[rank_] == send_bytes, kInvalidArgument,
             "allgatherv on rank " << rank_ << ": its count differs from its send size");
  MGS_RETURN_IF_ERROR(collective("allgatherv", send, [&](const std::vector<const Part*>& parts) -> Status {
    size_t off = 0;
    for (size_t r = 0; r < parts.size(); ++r) {
      if (recv_bytes[r])
        MGS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(recv) + off, parts[r]->send, recv_bytes[r],
                                       cudaMemcpyDeviceToDevice, asStream(stream_)));
      off += recv_bytes[r];
    }
    return Status::OK();
  }));
  return waitStream("allgatherv");
}

Status CudaThreadCommunicator::broadcast(void* buf, size_t bytes, int root) {
  MGS_ENSURE(root >= 0 && root < size(), kInvalidArgument, "broadcast: root " << root << " outside the world");
  MGS_RETURN_IF_ERROR(collective("broadcast", buf, [&](const std::vector<const Part*>& parts) -> Status {
    if (rank_ != root && bytes)
      MGS_CUDA_CHECK(
          cudaMemcpyAsync(buf, parts[root]->send, bytes, cudaMemcpyDeviceToDevice, asStream(stream_)));
    return Status::OK();
  }));
  return waitStream("broadcast");
}

Status CudaThreadCommunicator::allreduce(void* buf, size_t count, DataType dtype, CommOp op) {
  MGS_ENSURE(reducible(dtype, op), kInvalidArgument, "allreduce of " << dtypeName(dtype) << " with this operation");
  MGS_RETURN_IF_ERROR(usable("allreduce"));
  const size_t bytes = count * dtypeSize(dtype);
  // Staged through host memory (the sum in rank order, bitwise the same on
  // every rank), ordered after the stream's earlier work.
  std::vector<char> mine(bytes), sum(bytes);
  MGS_CUDA_CHECK(cudaSetDevice(world_->device()));
  if (bytes) MGS_CUDA_CHECK(cudaMemcpyAsync(mine.data(), buf, bytes, cudaMemcpyDeviceToHost, asStream(stream_)));
  MGS_RETURN_IF_ERROR(waitStream("allreduce"));
  std::vector<const void*> all;
  MGS_RETURN_IF_ERROR(world_->exchange(rank_, mine.data(), "allreduce", &all));
  if (bytes) {
    std::memcpy(sum.data(), all[0], bytes);
    for (size_t r = 1; r < all.size(); ++r) MGS_RETURN_IF_ERROR(reduceInto(sum.data(), all[r], count, dtype, op));
  }
  std::vector<const void*> left;
  MGS_RETURN_IF_ERROR(world_->exchange(rank_, nullptr, "allreduce", &left));  // every rank has read `mine`
  if (bytes) MGS_CUDA_CHECK(cudaMemcpyAsync(buf, sum.data(), bytes, cudaMemcpyHostToDevice, asStream(stream_)));
  return waitStream("allreduce");
}

Status CudaThreadCommunicator::gatherStrings(const std::string& send, int root, std::vector<std::string>* out) {
  std::vector<const void*> all, left;
  MGS_RETURN_IF_ERROR(world_->exchange(rank_, &send, "gatherStrings", &all));
  if (rank_ == root) {
    out->clear();
    for (const void* p : all) out->push_back(*static_cast<const std::string*>(p));
  }
  return world_->exchange(rank_, nullptr, "gatherStrings", &left);
}

Status CudaThreadCommunicator::barrier() {
  MGS_RETURN_IF_ERROR(waitStream("barrier"));
  std::vector<const void*> all;
  return world_->exchange(rank_, nullptr, "barrier", &all);
}

}  // namespace mgs
