// The sparse pipeline's stages at P = 2, 3 and 4 ranks sharing one GPU, the
// ranks as threads over the thread communicator (NCCL refuses two ranks on
// one device, so this is the host-staged path: the CUDA local stage selects
// on the device, only the compact block crosses to the host, the blocks are
// allgathered, and the CUDA scatter writes the outputs on the device). Every
// rank also runs the host stage on the same gradients as the reference, with
// exact top-k so both select the same set. Checked per rank and step:
//  - the device outputs (f32 averaged member, f16 summed member) bitwise
//    equal to the host pipeline's;
//  - conservation, bit for bit: at a selected index the block carries
//    gradient * prescale + residual and the new residual is 0; elsewhere the
//    new residual is that sum, for residuals kept on the device across steps;
//  - one host synchronisation for the block and one for the scatter's
//    verdict per bucket and rank (hostSyncs counts every rank's).
// Exits 77 (ctest SKIP_RETURN_CODE) when no CUDA device is visible.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu_main.h"
#include "comm/fake/thread_communicator.h"
#include "common/dtype.h"
#include "compress/decompress.h"
#include "compress/selector.h"
#include "core/cpu_local_stage.h"
#include "core/sparse_block.h"
#include "cuda_local_stage.h"
#include "device_bucket.h"
#include "gpu_bucket_fixture.h"
#include "local_run.h"

namespace mgs::cuda {
namespace {

constexpr size_t kNa = 4000, kNb = 1200, kN = kNa + kNb;
constexpr int kSteps = 3;

// What one rank saw; asserted on the main thread after the join (a failed
// REQUIRE inside a thread would end the process, not the case).
struct RankResult {
  std::vector<std::string> errors;
  size_t compared_steps = 0;
  size_t conserved_values = 0;
};

void fail(RankResult* r, int step, const std::string& what) {
  r->errors.push_back("step " + std::to_string(step) + ": " + what);
}

void runRank(const std::shared_ptr<ThreadWorld>& world, int rank, RankResult* res) {
  const int P = world->size();
  ThreadCommunicator comm(world, rank);
  compress::SelectorOptions so;
  so.density = 0.01;
  std::unique_ptr<compress::Selector> sel;
  if (!compress::Selector::create("topk", so, &sel).ok()) return fail(res, -1, "no topk selector");
  const size_t cap = sel->maxCount(kN);
  const size_t bb = block::allgatherBytes(cap);

  test::TwinStages twins;
  const Status cs = twins.create(0);
  if (!cs.ok()) fail(res, -1, "CudaLocalStage::create: " + cs.toString());
  CpuLocalStage& host = *twins.host;
  ResidualStore& ds = twins.ds;
  CudaLocalStage* dev = twins.dev.get();
  const std::vector<double> factors = {1.0 / P, 1.0};
  const float scales[2] = {static_cast<float>(1.0 / P), 1.0f};

  for (int step = 0; step < kSteps; ++step) {
    test::Bucket k = test::makeBucket(kNa, kNb, 1000 * (rank + 1) + step);
    // acc = gradient * prescale + residual, from the device store's residual.
    std::vector<float> acc(kN, 0.0f), resid_a(kNa, 0.0f), gb(kNb);
    if (step > 0 && !ds.copyOut("w.a", resid_a.data(), kNa).ok()) fail(res, step, "copyOut w.a");
    std::vector<float> resid_b(kNb, 0.0f);
    if (step > 0 && !ds.copyOut("w.b", resid_b.data(), kNb).ok()) fail(res, step, "copyOut w.b");
    toFloat(k.b.data(), MGS_FLOAT16, kNb, gb.data());
    for (size_t i = 0; i < kNa; ++i) acc[i] = k.a[i] * 0.5f + resid_a[i];
    for (size_t i = 0; i < kNb; ++i) acc[kNa + i] = gb[i] + resid_b[i];

    // Both pipelines: local stage, allgather over the thread communicator.
    test::LocalRun h = test::runLocal(host, k.host, kN, *sel);
    std::vector<char> hrecv(bb * P), drecv(bb * P);
    if (!comm.allgather(h.block.data(), bb, hrecv.data()).ok()) fail(res, step, "host allgather");
    const uint64_t syncs0 = hostSyncs();
    test::LocalRun d;
    if (dev) {
      d = test::runLocal(*dev, k.dev, kN, *sel);
    } else {
      d.block.assign(bb, 0);
      d.status = Status(Code::kInternal, "no device stage");
    }
    if (!d.status.ok()) fail(res, step, "device local stage: " + d.status.toString());
    if (!comm.allgather(d.block.data(), bb, drecv.data()).ok()) fail(res, step, "device allgather");
    if (!dev || !d.status.ok()) {
      if (d.slab && dev) dev->settle(k.dev, std::move(d.slab), false);
      host.settle(k.host, std::move(h.slab), false);
      continue;
    }

    // Conservation on this rank: sent + kept == acc, bit for bit.
    const block::ConstAllgatherBlock mine(d.block.data(), cap);
    const size_t count = static_cast<size_t>(mine.header());
    std::vector<char> sent(kN, 0);
    for (size_t j = 0; j < count; ++j) {
      const uint32_t i = mine.indices()[j];
      if (i >= kN || sent[i]) {
        fail(res, step, "bad or repeated index " + std::to_string(i));
        break;
      }
      sent[i] = 1;
      if (std::memcmp(&mine.values()[j], &acc[i], 4) != 0) fail(res, step, "sent value differs from acc");
    }
    for (size_t i = 0; i < kN; ++i) {
      const float want = sent[i] ? 0.0f : acc[i];
      if (std::memcmp(&d.kept[i], &want, 4) != 0) {
        fail(res, step, "kept[" + std::to_string(i) + "] is not acc - sent");
        break;
      }
      ++res->conserved_values;
    }

    // Scatter: host reference against the device's outputs.
    std::vector<float> ref_a;
    std::vector<char> ref_b;
    (void)test::hostScatter(hrecv, P, cap, kNa, kNb, scales, &ref_a, &ref_b);
    test::Dev oa(kNa * 4), ob(kNb * 2);
    cudaMemset(oa.p, 0xff, kNa * 4);
    cudaMemset(ob.p, 0xff, kNb * 2);
    k.dev[0].output = k.dev[0].input;
    k.dev[0].output.data = oa.p;
    k.dev[1].output = k.dev[1].input;
    k.dev[1].output.data = ob.p;
    const uint64_t syncs1 = hostSyncs();
    const Status st = dev->scatterBlocks(k.dev, drecv.data(), P, cap, factors);
    if (!st.ok()) fail(res, step, "scatterBlocks: " + st.toString());
    std::vector<float> got_a(kNa);
    std::vector<char> got_b(kNb * 2);
    cudaMemcpy(got_a.data(), oa.p, kNa * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(got_b.data(), ob.p, kNb * 2, cudaMemcpyDeviceToHost);
    if (std::memcmp(got_a.data(), ref_a.data(), kNa * 4) != 0) fail(res, step, "f32 output differs from host");
    if (got_b != ref_b) fail(res, step, "f16 output differs from host");
    // Every rank's syncs land in one counter; this rank's own are at least
    // the block copy, the slab read (test) and the scatter verdict.
    if (syncs1 - syncs0 < 2 || hostSyncs() - syncs1 < 1) fail(res, step, "fewer host syncs than the path needs");
    ++res->compared_steps;
    host.settle(k.host, std::move(h.slab), true);
    dev->settle(k.dev, std::move(d.slab), true);
  }
  if (dev && !dev->evictAll().ok()) fail(res, kSteps, "evictAll");
}

// The agreed exchange's device parts (cuda_agreed.cc, never run on a GPU
// before this test): per step one leader (step mod P) selects with the CUDA
// stage and with the host stage, both index blocks and values bitwise equal;
// the leader's device block is broadcast; every other rank fuses on both
// stages and extracts the agreed entries, values and kept slabs bitwise
// equal, sent + kept == acc; the values are summed (allreduce) and the CUDA
// scatter writes the f32 and f16 outputs bitwise as ScatterStage's rule.
void runAgreedRank(const std::shared_ptr<ThreadWorld>& world, int rank, RankResult* res) {
  const int P = world->size();
  ThreadCommunicator comm(world, rank);
  compress::SelectorOptions so;
  so.density = 0.01;
  std::unique_ptr<compress::Selector> sel;
  if (!compress::Selector::create("topk", so, &sel).ok()) return fail(res, -1, "no topk selector");
  const size_t cap = sel->maxCount(kN);
  test::TwinStages twins;
  const Status cs = twins.create(0);
  if (!cs.ok()) return fail(res, -1, "CudaLocalStage::create: " + cs.toString());
  CpuLocalStage& host = *twins.host;
  CudaLocalStage* dev = twins.dev.get();
  for (int step = 0; step < kSteps; ++step) {
    const int leader = step % P;
    const bool lead = rank == leader;
    test::Bucket k = test::makeBucket(kNa, kNb, 7000 * (rank + 1) + step);
    std::vector<char> hblock(block::indexBytes(cap), 0), dblock(block::indexBytes(cap), 0);
    std::vector<float> hvals(cap, 0.0f), dvals(cap, 0.0f);
    auto job = [&](std::vector<Request>& members, char* blk, float* vals) {
      LocalJob j;
      j.members = &members;
      j.n = kN;
      j.select = lead;
      j.selector = sel.get();
      j.cap = cap;
      j.block = lead ? blk : nullptr;
      j.index_block = true;
      j.agreed_values = vals;
      j.step = static_cast<uint64_t>(step);
      j.name = "bucket";
      return j;
    };
    LocalOutcome ho, dout;
    const uint64_t syncs0 = hostSyncs();
    host.run(job(k.host, hblock.data(), hvals.data()), &ho);
    if (!dev->accepts(job(k.dev, dblock.data(), dvals.data()))) fail(res, step, "the CUDA stage refuses the agreed job");
    dev->run(job(k.dev, dblock.data(), dvals.data()), &dout);
    if (!ho.status.ok() || !dout.status.ok() || !ho.slab || !dout.slab) {
      fail(res, step, "local stage: host " + ho.status.toString() + ", device " + dout.status.toString());
      return;
    }
    std::vector<float> acc(kN);
    if (!host.readSlab(*ho.slab, acc.data()).ok()) fail(res, step, "host readSlab");
    size_t count = 0;
    if (lead) {
      const block::ConstIndexBlock hb(hblock.data(), cap), db(dblock.data(), cap);
      count = static_cast<size_t>(db.header());
      if (!db.sealed() || db.header() != hb.header() || count == 0 || count > cap)
        fail(res, step, "leader's index block: header or seal differs from the host's");
      else if (std::memcmp(hb.indices(), db.indices(), count * 4) != 0 || std::memcmp(hvals.data(), dvals.data(), count * 4) != 0)
        fail(res, step, "leader's indices or values differ from the host's");
    }
    if (!comm.broadcast(dblock.data(), dblock.size(), leader).ok()) fail(res, step, "index broadcast");
    const block::ConstIndexBlock agreed(dblock.data(), cap);
    count = static_cast<size_t>(agreed.header());
    const uint32_t* idx = agreed.indices();
    if (!lead) {
      if (!host.extract(*ho.slab, idx, count, hvals.data()).ok()) fail(res, step, "host extract");
      const uint64_t syncs1 = hostSyncs();
      if (!dev->extract(*dout.slab, idx, count, dvals.data()).ok()) fail(res, step, "device extract");
      if (hostSyncs() - syncs1 < 1) fail(res, step, "extract without a host sync");
      if (std::memcmp(hvals.data(), dvals.data(), count * 4) != 0) fail(res, step, "extracted values differ from the host's");
    }
    // sent + kept == acc on both stages, bit for bit.
    std::vector<float> hkept(kN), dkept(kN);
    if (!host.readSlab(*ho.slab, hkept.data()).ok() || !dev->readSlab(*dout.slab, dkept.data()).ok())
      fail(res, step, "readSlab");
    if (std::memcmp(hkept.data(), dkept.data(), kN * 4) != 0) fail(res, step, "kept slab differs from the host's");
    std::vector<char> sent(kN, 0);
    for (size_t j = 0; j < count; ++j) {
      sent[idx[j]] = 1;
      if (std::memcmp(&dvals[j], &acc[idx[j]], 4) != 0) fail(res, step, "a sent value is not acc's");
    }
    for (size_t i = 0; i < kN; ++i) {
      const float want = sent[i] ? 0.0f : acc[i];
      if (std::memcmp(&dkept[i], &want, 4) != 0) {
        fail(res, step, "kept[" + std::to_string(i) + "] is not acc - sent");
        break;
      }
      ++res->conserved_values;
    }
    // The values' allreduce, then both scatters.
    std::vector<float> sums(dvals.begin(), dvals.begin() + count);
    if (count && !comm.allreduce(sums.data(), count, MGS_FLOAT32, CommOp::kSum).ok()) fail(res, step, "allreduce");
    // The host reference (ScatterStage::scatterAgreed's rule): +0 but the
    // sums assigned at the agreed indices, times float(factor) unless 1.
    const std::vector<double> factors = {1.0 / P, 1.0};
    std::vector<float> ref(kN, 0.0f);
    for (size_t j = 0; j < count; ++j) {
      const float f = static_cast<float>(factors[idx[j] < kNa ? 0 : 1]);
      ref[idx[j]] = f != 1.0f ? sums[j] * f : sums[j];
    }
    std::vector<float> ha(ref.begin(), ref.begin() + kNa);
    std::vector<char> hb16(kNb * 2, 0);
    fromFloat(ref.data() + kNa, MGS_FLOAT16, kNb, hb16.data());
    test::Dev oa(kNa * 4), ob(kNb * 2);
    cudaMemset(oa.p, 0xff, kNa * 4);
    cudaMemset(ob.p, 0xff, kNb * 2);
    k.dev[0].output = k.dev[0].input;
    k.dev[0].output.data = oa.p;
    k.dev[1].output = k.dev[1].input;
    k.dev[1].output.data = ob.p;
    const Status st = dev->scatterAgreed(k.dev, idx, sums.data(), count, factors);
    if (!st.ok()) fail(res, step, "device scatterAgreed: " + st.toString());
    std::vector<float> got_a(kNa);
    std::vector<char> got_b(kNb * 2);
    cudaMemcpy(got_a.data(), oa.p, kNa * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(got_b.data(), ob.p, kNb * 2, cudaMemcpyDeviceToHost);
    if (std::memcmp(got_a.data(), ha.data(), kNa * 4) != 0) fail(res, step, "agreed f32 output differs from host");
    if (got_b != hb16) fail(res, step, "agreed f16 output differs from host");
    if (hostSyncs() - syncs0 < 2) fail(res, step, "fewer host syncs than the path needs");
    ++res->compared_steps;
    host.settle(k.host, std::move(ho.slab), true);
    dev->settle(k.dev, std::move(dout.slab), true);
  }
  if (!dev->evictAll().ok()) fail(res, kSteps, "evictAll");
}

void runThreads(int P, void (*body)(const std::shared_ptr<ThreadWorld>&, int, RankResult*), std::vector<RankResult>* res) {
  auto world = std::make_shared<ThreadWorld>(P);
  res->assign(P, RankResult{});
  std::vector<std::thread> ts;
  for (int r = 0; r < P; ++r) ts.emplace_back([&, r] {
    try {
      body(world, r, &(*res)[r]);
    } catch (...) {
      (*res)[r].errors.push_back("exception (a REQUIRE in a helper failed)");
    }
  });
  for (auto& t : ts) t.join();
}

// Every rank compared every step and conserved every value, without errors.
void requireEveryRank(int P, const std::vector<RankResult>& res) {
  for (int r = 0; r < P; ++r) {
    INFO("P = " << P << ", rank " << r << ": " << (res[r].errors.empty() ? "" : res[r].errors.front()));
    CHECK(res[r].errors.empty());
    REQUIRE(res[r].compared_steps == static_cast<size_t>(kSteps));
    REQUIRE(res[r].conserved_values == kSteps * kN);
  }
}

}  // namespace

TEST_CASE("P ranks as threads on one GPU: the agreed exchange's device parts equal the host stage's, conservation") {
  for (int P : {2, 3, 4}) {
    std::vector<RankResult> res;
    runThreads(P, runAgreedRank, &res);
    requireEveryRank(P, res);
  }
}

TEST_CASE("P ranks as threads on one GPU: host-staged blocks, device scatter equals the host pipeline, conservation") {
  for (int P : {2, 3, 4}) {
    std::vector<RankResult> res;
    runThreads(P, runRank, &res);
    requireEveryRank(P, res);
  }
}

}  // namespace mgs::cuda

const char* const mgs::test::kGpuTestsWhat = "the multi-rank GPU tests";
