// Device buckets (CudaLocalStage::startBucket, core/routed_local_stage.h) on
// the NCCL backend at np 1 (NCCL takes one rank per GPU, so a multi-rank
// run needs several GPUs or processes: the multi-rank verdict and the
// pipeline's wiring are tested on the CPU with a stand-in,
// tests/unit/core/device_bucket_test.cc). Checked, several steps over a
// bucket of two f32 members (output factors 1 and 0.5):
//  - after two warm-up steps, hostSyncs() does not move across a whole
//    bucket: start, polling test() until done, result, settle;
//  - outputs bitwise equal to the host path (CpuLocalStage + the scatter of
//    the one block from +0, touched entries times the factor), the
//    committed residual (read through the ResidualStore's External) bitwise
//    the host stage's, and sent + kept == gradient + old residual bit for bit;
//  - a member on another device: the block carries its staging code, the
//    local status names the rank, the tensor and the cause, nothing is
//    written, nothing fused, the residual is as it was;
//  - a NaN: its member's code; NaN outputs under propagate, none written
//    under error; the residual as it was.
// Ran on an H100 (2026-11-26). Exits 77 (ctest
// SKIP_RETURN_CODE) when no CUDA device is visible.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_bucket_fixture.h"
#include "gpu_main.h"
#include "comm/fake/thread_communicator.h"
#include "comm/nccl/nccl_communicator.h"
#include "compress/selector.h"
#include "core/cpu_local_stage.h"
#include "core/sparse_block.h"
#include "cuda_local_stage.h"
#include "device_bucket.h"
#include "host_sync.h"
#include "local_run.h"

namespace mgs::cuda {
namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Dev(size_t b) : bytes(b) { REQUIRE(cudaMalloc(&p, b ? b : 1) == cudaSuccess); }
  ~Dev() { cudaFree(p); }
  void put(const std::vector<float>& h) {
    REQUIRE(cudaMemcpy(p, h.data(), 4 * h.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<float> get() const {
    std::vector<float> h(bytes / 4);
    REQUIRE(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

using test::gaussian;

struct World {
  std::shared_ptr<ThreadWorld> world = std::make_shared<ThreadWorld>(1);
  ThreadCommunicator boot{world, 0};
  std::unique_ptr<NcclCommunicator> nccl;
  World() {
    NcclOptions o;
    o.timeoutSeconds = 120;
    const Status st = NcclCommunicator::create(&boot, o, &nccl);
    INFO(st.message());
    REQUIRE(st.ok());
  }
};

const size_t kNa = 3000, kNb = 1000, kN = kNa + kNb;
const std::vector<double> kFactors = {1.0, 0.5};

// One step's tensors: gradients on the host and the device, device outputs
// filled with a sentinel (-7: "not written").
struct Step {
  std::vector<float> a, b;
  Dev da{4 * kNa}, db{4 * kNb}, oa{4 * kNa}, ob{4 * kNb};
  std::vector<Request> dev, host;
  Step(uint64_t seed, int device) {
    a = gaussian(kNa, seed);
    b = gaussian(kNb, seed + 1);
    da.put(a);
    db.put(b);
    oa.put(std::vector<float>(kNa, -7.0f));
    ob.put(std::vector<float>(kNb, -7.0f));
    Request ra, rb;
    ra.name = "w.a";
    rb.name = "w.b";
    ra.sig.prescale = 0.5;
    for (Request* r : {&ra, &rb}) {
      r->sig.on_cuda = true;
      r->input.dtype = MGS_FLOAT32;
    }
    ra.input.shape = {static_cast<int64_t>(kNa)};
    rb.input.shape = {static_cast<int64_t>(kNb)};
    host = {ra, rb};
    host[0].input.data = a.data();
    host[1].input.data = b.data();
    ra.input.device = rb.input.device = device;
    ra.input.data = da.p;
    rb.input.data = db.p;
    ra.output = ra.input;
    rb.output = rb.input;
    ra.output.data = oa.p;
    rb.output.data = ob.p;
    dev = {ra, rb};
  }
};

struct HostRef {
  Status status;
  std::vector<char> block;
  std::vector<float> kept, out;  // out: members back to back, factors applied
};

HostRef hostStep(CpuLocalStage& host, std::vector<Request>& members, const compress::Selector& sel, bool commit) {
  HostRef h;
  const size_t cap = sel.maxCount(kN);
  test::LocalRun l = test::runLocal(host, members, kN, sel);
  h.status = l.status;
  h.block = std::move(l.block);
  h.kept = std::move(l.kept);
  // The scatter of the one block (P = 1): from +0, touched entries times the factor.
  h.out.assign(kN, 0.0f);
  std::vector<char> touched(kN, 0);
  const block::ConstAllgatherBlock b(h.block.data(), cap);
  if (l.status.ok())
    for (size_t j = 0; j < b.header(); ++j) {
      h.out[b.indices()[j]] = 0.0f + b.values()[j];
      touched[b.indices()[j]] = 1;
    }
  for (size_t i = kNa; i < kN; ++i)
    if (touched[i]) h.out[i] = h.out[i] * static_cast<float>(kFactors[1]);
  host.settle(members, std::move(l.slab), commit && l.status.ok());
  return h;
}

struct DevRun {
  Status start;
  DeviceBucketResult r;
  uint64_t syncs = 0;  // hostSyncs() across start .. settle
  bool hadSlab = false;
  int polls = 0;
};

DevRun devStep(CudaLocalStage& dev, World& w, std::vector<Request>& members, const compress::Selector& sel,
               bool propagate) {
  DevRun d;
  LocalJob job;
  job.members = &members;
  job.n = kN;
  job.select = true;
  job.selector = &sel;
  job.cap = sel.maxCount(kN);
  job.block = nullptr;
  job.name = "bucket";
  DeviceBucketJob dj;
  dj.job = &job;
  dj.comm = w.nccl.get();
  dj.comm_stream = w.nccl->stream();
  dj.comm_device = w.nccl->device();
  dj.factors = kFactors;
  dj.propagate = propagate;
  const uint64_t s0 = hostSyncs();
  std::unique_ptr<PendingDeviceBucket> p;
  d.start = dev.startBucket(dj, &p);
  if (!d.start.ok()) return d;
  bool done = false;
  while (!done) {
    const Status st = p->test(&done);
    INFO(st.toString());
    REQUIRE(st.ok());
    ++d.polls;
  }
  REQUIRE(p->result(&d.r).ok());
  std::unique_ptr<LocalSlab> slab = p->takeSlab();
  d.hadSlab = slab != nullptr;
  dev.settle(members, std::move(slab), d.r.written);
  p.reset();
  d.syncs = hostSyncs() - s0;
  return d;
}

std::vector<float> outputs(Step& s) {
  std::vector<float> o = s.oa.get(), b = s.ob.get();
  o.insert(o.end(), b.begin(), b.end());
  return o;
}

std::vector<float> residual(ResidualStore& st) {
  std::vector<float> r(kN);
  REQUIRE(st.copyOut("w.a", r.data(), kNa).ok());
  REQUIRE(st.copyOut("w.b", r.data() + kNa, kNb).ok());
  return r;
}

}  // namespace

TEST_CASE("device bucket np1: no host sync in steady state, bitwise the host path, conservation") {
  World w;
  compress::SelectorOptions so;
  so.density = 0.01;
  std::unique_ptr<compress::Selector> sel;
  REQUIRE(compress::Selector::create("topk", so, &sel).ok());
  test::TwinStages twins;
  REQUIRE(twins.create(w.nccl->device()).ok());
  CpuLocalStage& host = *twins.host;
  ResidualStore& ds = twins.ds;
  std::unique_ptr<CudaLocalStage>& dev = twins.dev;
  REQUIRE(dev->runsDeviceBuckets());

  for (uint64_t step = 0; step < 6; ++step) {
    INFO("step " << step);
    // Nothing is held before the first step (the residual starts at zero).
    const std::vector<float> before = step == 0 ? std::vector<float>(kN, 0.0f) : residual(ds);
    Step s(100 + step, w.nccl->device());
    const HostRef h = hostStep(host, s.host, *sel, true);
    REQUIRE(h.status.ok());
    const DevRun d = devStep(*dev, w, s.dev, *sel, true);
    INFO(d.start.toString() << " / " << d.r.local.toString());
    REQUIRE(d.start.ok());
    REQUIRE(d.r.local.ok());
    REQUIRE(d.r.written);
    REQUIRE(!d.r.nan_written);
    REQUIRE(d.r.malformed_rank == -1);
    REQUIRE(d.r.headers.size() == 1);
    const size_t cap = sel->maxCount(kN);
    REQUIRE(d.r.headers[0] == block::ConstAllgatherBlock(h.block.data(), cap).header());
    REQUIRE(d.r.count == d.r.headers[0]);
    REQUIRE(d.hadSlab);
    if (step >= 2) REQUIRE(d.syncs == 0);  // warm: pools, pinned slots and events exist
    const std::vector<float> out = outputs(s), kept = residual(ds);
    REQUIRE(std::memcmp(out.data(), h.out.data(), 4 * kN) == 0);
    REQUIRE(std::memcmp(kept.data(), h.kept.data(), 4 * kN) == 0);
    // sent + kept == gradient * prescale + old residual, for both members
    // (a: prescale 0.5, factor 1; b: prescale 1, factor 0.5, exact in f32).
    size_t bad = 0, sent = 0;
    for (size_t i = 0; i < kN; ++i) {
      const bool inA = i < kNa;
      const float acc = inA ? s.a[i] * 0.5f + before[i] : s.b[i - kNa] + before[i];
      const float factor = inA ? 1.0f : 0.5f;
      const bool is_sent = bitsOf(kept[i]) == 0 && bitsOf(out[i]) != 0;
      sent += is_sent;
      bad += is_sent ? bitsOf(out[i]) != bitsOf(acc * factor) : bitsOf(kept[i]) != bitsOf(acc) || bitsOf(out[i]) != 0;
    }
    REQUIRE(bad == 0);
    REQUIRE(sent > 0);
  }
}

TEST_CASE("device bucket np1: a member on another device, and a NaN, fail without writing") {
  World w;
  compress::SelectorOptions so;
  so.density = 0.01;
  std::unique_ptr<compress::Selector> sel;
  REQUIRE(compress::Selector::create("topk", so, &sel).ok());
  ResidualStore ds;
  LocalStageOptions dopt;
  dopt.residuals = &ds;
  std::unique_ptr<CudaLocalStage> dev;
  REQUIRE(CudaLocalStage::create(dopt, w.nccl->device(), &dev).ok());
  ds.setExternal(dev.get());
  {  // one good step: residuals on the device
    Step s(1, w.nccl->device());
    REQUIRE(devStep(*dev, w, s.dev, *sel, true).r.written);
  }
  const std::vector<float> before = residual(ds);

  // w.b claims another device (never dereferenced: refused before any CUDA call on it).
  Step s(2, w.nccl->device());
  s.dev[1].input.device = w.nccl->device() + 1;
  const DevRun d = devStep(*dev, w, s.dev, *sel, true);
  INFO(d.start.toString());
  REQUIRE(d.start.ok());  // this rank still took part in the exchange
  REQUIRE(d.r.headers.size() == 1);
  REQUIRE(d.r.headers[0] == block::stagingCode(1, block::StagingCause::kWrongDevice));
  REQUIRE(!d.r.written);
  REQUIRE(!d.r.nan_written);
  REQUIRE(!d.hadSlab);
  const std::string msg = d.r.local.message();
  INFO(msg);
  REQUIRE(msg.find("rank 0") != std::string::npos);
  REQUIRE(msg.find("tensor 'w.b'") != std::string::npos);
  REQUIRE(msg.find("another CUDA device") != std::string::npos);
  for (float v : outputs(s)) REQUIRE(v == -7.0f);
  REQUIRE(residual(ds) == before);

  // A NaN in w.a: its code; NaN outputs under propagate, nothing under error.
  for (bool propagate : {true, false}) {
    Step t(3, w.nccl->device());
    const float nan = std::nanf("");
    REQUIRE(cudaMemcpy(static_cast<float*>(t.da.p) + 17, &nan, 4, cudaMemcpyHostToDevice) == cudaSuccess);
    const DevRun e = devStep(*dev, w, t.dev, *sel, propagate);
    REQUIRE(e.start.ok());
    REQUIRE(e.r.headers[0] == block::failureCode(0));
    REQUIRE(e.r.local.code() == Code::kNumeric);
    REQUIRE(e.r.bad_member == 0);
    REQUIRE(!e.r.written);
    REQUIRE(e.r.nan_written == propagate);
    for (float v : outputs(t)) REQUIRE((propagate ? std::isnan(v) : v == -7.0f));
    REQUIRE(residual(ds) == before);
  }
}

}  // namespace mgs::cuda

const char* const mgs::test::kGpuTestsWhat = "the device bucket tests over NCCL";
