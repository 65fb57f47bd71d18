// Device buckets (CudaLocalStage::startBucket) at P = 2, 3 and 4 ranks as
// threads sharing one GPU, over the device thread communicator
// (src/comm/cuda_thread: NCCL's stream-ordered semantics where NCCL refuses
// two ranks on one device). The whole bucket is enqueued work: the local
// stage, the allgather of the P fixed-capacity blocks on the communicator's
// stream, the verdict over every rank's header and the scatter on the
// engine's stream. Every rank also runs the host stage on the same
// gradients, allgathers its blocks over the host twin (ThreadCommunicator)
// and scatters them on the host, with exact top-k so both select the same
// entries. Checked per rank and step:
//  - outputs (f32 averaged member, f16 summed member) and the committed
//    residuals bitwise the host pipeline's;
//  - after two warm-up steps, no host synchronisation across the bucket on
//    any rank (hostSyncs() is process-wide; the ranks meet at barriers
//    around the measured part);
//  - every rank reads the same P headers.
// And: a rank that aborts the communicator instead of joining a bucket
// ends every other rank's bucket with an error naming it, within seconds.
// Written 2026-12-01 without a GPU: never run on one. Exits 77 (ctest
// SKIP_RETURN_CODE) when no CUDA device is visible.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/cuda_thread/cuda_thread_communicator.h"
#include "comm/fake/thread_communicator.h"
#include "common/check.h"
#include "compress/selector.h"
#include "core/cpu_local_stage.h"
#include "core/sparse_block.h"
#include "cuda_local_stage.h"
#include "device_bucket.h"
#include "gpu_bucket_fixture.h"
#include "gpu_main.h"
#include "host_sync.h"
#include "local_run.h"

namespace mgs::cuda {
namespace {

constexpr size_t kNa = 4000, kNb = 1200, kN = kNa + kNb;
constexpr int kSteps = 4, kWarm = 2;

struct RankResult {
  std::vector<std::string> errors;
  size_t compared_steps = 0;
  std::vector<uint64_t> syncs;  // per measured step, process-wide
};

void fail(RankResult* r, int step, const std::string& what) {
  r->errors.push_back("step " + std::to_string(step) + ": " + what);
}

struct Worlds {
  std::shared_ptr<CudaThreadWorld> dev;
  std::shared_ptr<ThreadWorld> host;
};

// Polls the bucket to its end (no waiting call), as the pipeline does.
Status pollToEnd(PendingDeviceBucket& p) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    bool done = false;
    MGS_RETURN_IF_ERROR(p.test(&done));
    if (done) return Status::OK();
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60))
      return Status(Code::kTimeout, "the device bucket did not finish within 60 s");
    std::this_thread::yield();
  }
}

void runRank(const Worlds& w, int rank, RankResult* res) {
  const int P = w.host->size();
  ThreadCommunicator host_comm(w.host, rank);
  std::unique_ptr<CudaThreadCommunicator> dcomm;
  Status st = CudaThreadCommunicator::create(w.dev, rank, &dcomm);
  if (!st.ok()) return fail(res, -1, "CudaThreadCommunicator::create: " + st.toString());
  compress::SelectorOptions so;
  so.density = 0.01;
  std::unique_ptr<compress::Selector> sel;
  if (!compress::Selector::create("topk", so, &sel).ok()) return fail(res, -1, "no topk selector");
  const size_t cap = sel->maxCount(kN);
  test::TwinStages twins;
  st = twins.create(0);
  if (!st.ok()) return fail(res, -1, "CudaLocalStage::create: " + st.toString());
  CpuLocalStage& host = *twins.host;
  CudaLocalStage& dev = *twins.dev;
  if (!dev.runsDeviceBuckets()) return fail(res, -1, "the CUDA stage does not run device buckets");
  const std::vector<double> factors = {1.0 / P, 1.0};
  const float scales[2] = {static_cast<float>(1.0 / P), 1.0f};
  for (int step = 0; step < kSteps; ++step) {
    test::Bucket k = test::makeBucket(kNa, kNb, 1000 * (rank + 1) + step);
    test::Dev oa(kNa * 4), ob(kNb * 2);
    cudaMemset(oa.p, 0xff, kNa * 4);
    cudaMemset(ob.p, 0xff, kNb * 2);
    for (auto* r : {&k.dev[0], &k.dev[1]}) r->sig.on_cuda = true;
    k.dev[0].output = k.dev[0].input;
    k.dev[0].output.data = oa.p;
    k.dev[1].output = k.dev[1].input;
    k.dev[1].output.data = ob.p;
    cudaDeviceSynchronize();  // the test's own copies, before the measured part

    // The host reference: local stage, allgather over the host twin, scatter.
    test::LocalRun h = test::runLocal(host, k.host, kN, *sel);
    std::vector<char> hrecv(block::allgatherBytes(cap) * P);
    if (!host_comm.allgather(h.block.data(), h.block.size(), hrecv.data()).ok()) fail(res, step, "host allgather");
    std::vector<float> ref_a;
    std::vector<char> ref_b;
    (void)test::hostScatter(hrecv, P, cap, kNa, kNb, scales, &ref_a, &ref_b);
    host.settle(k.host, std::move(h.slab), h.status.ok());

    // The device bucket, measured between barriers.
    LocalJob job;
    job.members = &k.dev;
    job.n = kN;
    job.select = true;
    job.selector = sel.get();
    job.cap = cap;
    job.step = static_cast<uint64_t>(step);
    job.name = "bucket";
    DeviceBucketJob dj;
    dj.job = &job;
    dj.comm = dcomm.get();
    dj.comm_stream = dcomm->stream();
    dj.comm_device = dcomm->device();
    dj.factors = factors;
    dj.propagate = true;
    (void)host_comm.barrier();
    const uint64_t s0 = hostSyncs();
    (void)host_comm.barrier();
    std::unique_ptr<PendingDeviceBucket> p;
    st = dev.startBucket(dj, &p);
    if (st.ok()) st = pollToEnd(*p);
    DeviceBucketResult r;
    if (st.ok()) st = p->result(&r);
    if (p) dev.settle(k.dev, p->takeSlab(), st.ok() && r.written);
    p.reset();
    (void)host_comm.barrier();
    if (step >= kWarm) res->syncs.push_back(hostSyncs() - s0);
    (void)host_comm.barrier();
    if (!st.ok()) {
      fail(res, step, "device bucket: " + st.toString());
      continue;
    }
    if (!r.local.ok() || !r.written || r.malformed_rank >= 0)
      fail(res, step, "verdict: local " + r.local.toString() + ", written " + std::to_string(r.written));
    if (r.headers.size() != static_cast<size_t>(P)) fail(res, step, "headers for " + std::to_string(r.headers.size()));
    for (int q = 0; q < P && q < static_cast<int>(r.headers.size()); ++q)
      if (r.headers[q] != block::ConstAllgatherBlock(hrecv.data() + q * block::allgatherBytes(cap), cap).header())
        fail(res, step, "rank " + std::to_string(q) + "'s header differs from the host exchange's");
    std::vector<float> got_a(kNa);
    std::vector<char> got_b(kNb * 2);
    cudaMemcpy(got_a.data(), oa.p, kNa * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(got_b.data(), ob.p, kNb * 2, cudaMemcpyDeviceToHost);
    if (std::memcmp(got_a.data(), ref_a.data(), kNa * 4) != 0) fail(res, step, "f32 output differs from host");
    if (got_b != ref_b) fail(res, step, "f16 output differs from host");
    std::vector<float> hr(kN), dr(kN);
    if (!twins.hs.copyOut("w.a", hr.data(), kNa).ok() || !twins.hs.copyOut("w.b", hr.data() + kNa, kNb).ok() ||
        !twins.ds.copyOut("w.a", dr.data(), kNa).ok() || !twins.ds.copyOut("w.b", dr.data() + kNa, kNb).ok())
      fail(res, step, "reading the residuals");
    else if (std::memcmp(hr.data(), dr.data(), kN * 4) != 0)
      fail(res, step, "committed residual differs from the host stage's");
    ++res->compared_steps;
  }
  if (!dev.evictAll().ok()) fail(res, kSteps, "evictAll");
}

std::vector<RankResult> runWorld(int P, void (*body)(const Worlds&, int, RankResult*)) {
  Worlds w{std::make_shared<CudaThreadWorld>(P, 0, 60.0), std::make_shared<ThreadWorld>(P)};
  std::vector<RankResult> res(P);
  std::vector<std::thread> ts;
  for (int r = 0; r < P; ++r) ts.emplace_back([&, r] {
    try {
      body(w, r, &res[r]);
    } catch (...) {
      res[r].errors.push_back("exception (a REQUIRE in a helper failed)");
    }
  });
  for (auto& t : ts) t.join();
  return res;
}

// Rank P - 1 aborts the communicator instead of taking part in the bucket.
void runAbortRank(const Worlds& w, int rank, RankResult* res) {
  const int P = w.host->size();
  std::unique_ptr<CudaThreadCommunicator> dcomm;
  Status st = CudaThreadCommunicator::create(w.dev, rank, &dcomm);
  if (!st.ok()) return fail(res, -1, "CudaThreadCommunicator::create: " + st.toString());
  if (rank == P - 1) {
    dcomm->abort("injected failure");
    return;
  }
  compress::SelectorOptions so;
  so.density = 0.01;
  std::unique_ptr<compress::Selector> sel;
  if (!compress::Selector::create("topk", so, &sel).ok()) return fail(res, -1, "no topk selector");
  test::TwinStages twins;
  st = twins.create(0);
  if (!st.ok()) return fail(res, -1, "CudaLocalStage::create: " + st.toString());
  test::Bucket k = test::makeBucket(kNa, kNb, 77 + rank);
  for (auto* r : {&k.dev[0], &k.dev[1]}) r->output = r->input;  // in place
  LocalJob job;
  job.members = &k.dev;
  job.n = kN;
  job.select = true;
  job.selector = sel.get();
  job.cap = sel->maxCount(kN);
  job.name = "bucket";
  DeviceBucketJob dj;
  dj.job = &job;
  dj.comm = dcomm.get();
  dj.comm_stream = dcomm->stream();
  dj.comm_device = dcomm->device();
  dj.factors = {1.0, 1.0};
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<PendingDeviceBucket> p;
  st = twins.dev->startBucket(dj, &p);
  if (st.ok()) st = pollToEnd(*p);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.ok()) return fail(res, 0, "the bucket succeeded although rank " + std::to_string(P - 1) + " aborted");
  if (st.message().find("rank " + std::to_string(P - 1) + ": injected failure") == std::string::npos)
    fail(res, 0, "the error does not name the aborting rank: " + st.toString());
  if (s > 10) fail(res, 0, "the error took " + std::to_string(s) + " s");
  if (p) twins.dev->settle(k.dev, p->takeSlab(), false);
  ++res->compared_steps;
}

}  // namespace

TEST_CASE("device buckets, P ranks as threads on one GPU: bitwise the host pipeline, no host sync once warm") {
  for (int P : {2, 3, 4}) {
    const std::vector<RankResult> res = runWorld(P, runRank);
    for (int r = 0; r < P; ++r) {
      INFO("P = " << P << ", rank " << r << ": " << (res[r].errors.empty() ? "" : res[r].errors.front()));
      CHECK(res[r].errors.empty());
      REQUIRE(res[r].compared_steps == static_cast<size_t>(kSteps));
      for (uint64_t s : res[r].syncs) REQUIRE(s == 0);
    }
  }
}

TEST_CASE("device buckets, P ranks as threads on one GPU: an aborting rank fails every other rank's bucket") {
  for (int P : {2, 3}) {
    const std::vector<RankResult> res = runWorld(P, runAbortRank);
    for (int r = 0; r + 1 < P; ++r) {
      INFO("P = " << P << ", rank " << r << ": " << (res[r].errors.empty() ? "" : res[r].errors.front()));
      CHECK(res[r].errors.empty());
      REQUIRE(res[r].compared_steps == 1);
    }
  }
}

}  // namespace mgs::cuda

const char* const mgs::test::kGpuTestsWhat = "the device-bucket thread-rank tests";
