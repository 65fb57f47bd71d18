// The NCCL communicator at np 1 (NCCL refuses two ranks on one GPU), with the
// thread communicator as bootstrap so that no MPI is needed. Device buffers
// in, results checked on the host; bad input gives errors naming the call.
// Ran on an H100 (2026-11-26).
// Exits 77 (ctest SKIP_RETURN_CODE) when no CUDA device is visible.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "gpu_main.h"
#include "comm/fake/thread_communicator.h"
#include "comm/nccl/nccl_communicator.h"

namespace mgs {
namespace {

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(size_t count) : n(count) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * std::max<size_t>(n, 1)) == cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  void put(const std::vector<T>& h) {
    REQUIRE(cudaMemcpy(p, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<T> get() const {
    std::vector<T> h(n);
    REQUIRE(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

struct One {
  std::shared_ptr<ThreadWorld> world = std::make_shared<ThreadWorld>(1);
  ThreadCommunicator boot{world, 0};
  std::unique_ptr<NcclCommunicator> nccl;
  One() {
    NcclOptions o;
    o.timeoutSeconds = 60;
    const Status st = NcclCommunicator::create(&boot, o, &nccl);
    INFO(st.message());
    REQUIRE(st.ok());
  }
};

TEST_CASE("nccl np1: collectives on device buffers", "[gpu][nccl]") {
  One c;
  REQUIRE(c.nccl->size() == 1);
  REQUIRE(c.nccl->rank() == 0);
  REQUIRE(c.nccl->stream() != nullptr);
  std::vector<float> h(1000);
  std::iota(h.begin(), h.end(), -3.5f);
  Dev<float> d(h.size());
  d.put(h);
  REQUIRE(c.nccl->allreduce(d.p, h.size(), MGS_FLOAT32, CommOp::kSum).ok());
  REQUIRE(d.get() == h);  // one rank: the sum is the input
  REQUIRE(c.nccl->allreduce(d.p, h.size(), MGS_FLOAT32, CommOp::kMax).ok());
  REQUIRE(d.get() == h);

  Dev<float> out(h.size());
  REQUIRE(c.nccl->allgather(d.p, h.size() * 4, out.p).ok());
  REQUIRE(out.get() == h);
  Dev<float> outv(h.size());
  REQUIRE(c.nccl->allgatherv(d.p, h.size() * 4, outv.p, {h.size() * 4}).ok());
  REQUIRE(outv.get() == h);
  REQUIRE(c.nccl->broadcast(d.p, h.size() * 4, 0).ok());
  REQUIRE(d.get() == h);

  Dev<float> out2(h.size());
  std::unique_ptr<PendingCollective> op;
  REQUIRE(c.nccl->startAllgather(d.p, h.size() * 4, out2.p, &op).ok());
  bool done = false;
  for (int i = 0; i < 1000000 && !done; ++i) REQUIRE(op->test(&done).ok());
  REQUIRE(op->wait().ok());
  REQUIRE(out2.get() == h);
  REQUIRE(c.nccl->barrier().ok());
}

TEST_CASE("nccl np1: bad input is an error naming the call", "[gpu][nccl]") {
  One c;
  std::vector<float> host(16, 1.0f);
  const Status st = c.nccl->allreduce(host.data(), host.size(), MGS_FLOAT32, CommOp::kSum);
  REQUIRE(st.code() == Code::kInvalidArgument);
  REQUIRE(st.message().find("allreduce") != std::string::npos);
  REQUIRE(st.message().find("device memory") != std::string::npos);
  Dev<int32_t> d(4);
  REQUIRE(c.nccl->allreduce(d.p, 4, MGS_INT32, CommOp::kBitAnd).code() == Code::kUnsupported);
  REQUIRE(c.nccl->broadcast(d.p, 16, 3).code() == Code::kInvalidArgument);
  REQUIRE(c.nccl->allgatherv(d.p, 16, d.p, {8}).code() == Code::kInvalidArgument);
  // The communicator is still usable after rejected input (nothing was aborted).
  REQUIRE(c.nccl->allreduce(d.p, 4, MGS_INT32, CommOp::kSum).ok());
  REQUIRE(c.nccl->abortReason().empty());
}

// Two ranks (threads) on the one GPU: NCCL may refuse the duplicate device.
// Either way both ranks must return, with the same verdict, within the deadline.
TEST_CASE("nccl two ranks on one GPU end without a hang", "[gpu][nccl]") {
  auto world = std::make_shared<ThreadWorld>(2);
  auto run = [&](int r) {
    ThreadCommunicator boot(world, r);
    NcclOptions o;
    o.device = 0;
    o.timeoutSeconds = 60;
    std::unique_ptr<NcclCommunicator> c;
    Status st = NcclCommunicator::create(&boot, o, &c);
    if (!st.ok()) return st;
    Dev<float> d(8);
    d.put(std::vector<float>(8, 1.0f + r));
    st = c->allreduce(d.p, 8, MGS_FLOAT32, CommOp::kSum);
    if (st.ok() && d.get() != std::vector<float>(8, 3.0f)) return Status(Code::kInternal, "wrong sum");
    return st;
  };
  auto f0 = std::async(std::launch::async, run, 0);
  auto f1 = std::async(std::launch::async, run, 1);
  REQUIRE(f0.wait_for(std::chrono::seconds(120)) == std::future_status::ready);
  REQUIRE(f1.wait_for(std::chrono::seconds(120)) == std::future_status::ready);
  const Status s0 = f0.get(), s1 = f1.get();
  WARN("rank 0: " << s0.message() << " | rank 1: " << s1.message());
  REQUIRE(s0.ok() == s1.ok());
  if (!s0.ok()) REQUIRE(s0.message().find("NCCL") != std::string::npos);
}

}  // namespace
}  // namespace mgs

const char* const mgs::test::kGpuTestsWhat = "the NCCL communicator tests";
