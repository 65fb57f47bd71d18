// The routed local stage (core/routed_local_stage.h) on the CPU: a stand-in
// resident stage keeps its residuals in memory of its own (a private
// ResidualStore standing for device memory) and accepts buckets whose tensor
// names start with "dev.". What is tested is what the CUDA stage relies on:
// which stage runs a bucket, that a residual moves with its bucket and is
// never in two places, that the C ABI's reads and writes reach it wherever it
// lives, that sent + kept == gradient + residual across the moves, and that
// a failed hand-over fails the bucket with a failure code.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <map>
#include <set>

#include "core/cpu_local_stage.h"
#include "core/routed_local_stage.h"
#include "../compress/test_util.h"
#include "core/sparse_block.h"
#include "stand_in_stage.h"

using namespace mgs;
using compress::test::bits;  // the selector tests' bit view of a float

namespace {

bool isDev(const Request& m) { return m.name.rfind("dev.", 0) == 0; }

class StandIn final : public test::StandInStage {
 public:
  explicit StandIn(const LocalStageOptions& shared) : StandInStage(shared) {}
  int runs = 0;

  bool accepts(const LocalJob& job) const override {
    if (job.dense_acc || job.index_block || !job.block) return false;
    for (const auto& m : *job.members)
      if (!isDev(m)) return false;
    return true;
  }
  void run(const LocalJob& job, LocalOutcome* out) override {
    ++runs;
    REQUIRE(adopt(*job.members).ok());
    inner_->run(job, out);
  }
};

struct Tensor {
  std::vector<float> x;
  Request r;
};

Tensor makeTensor(const std::string& name, size_t n, uint32_t seed) {
  Tensor t;
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  t.x.resize(n);
  for (auto& v : t.x) v = g(rng);
  t.r.name = name;
  t.r.input.data = t.x.data();
  t.r.input.dtype = MGS_FLOAT32;
  t.r.input.shape = {static_cast<int64_t>(n)};
  return t;
}

struct Fixture {
  ResidualStore store;
  LocalStageOptions o;
  StandIn* standin = nullptr;
  int factory_calls = 0;
  std::unique_ptr<RoutedLocalStage> stage;
  std::unique_ptr<compress::Selector> sel;
  explicit Fixture(bool factory_fails = false) {
    o.rank = 2;
    o.residuals = &store;
    stage = std::make_unique<RoutedLocalStage>(
        o, std::make_unique<CpuLocalStage>(o),
        [this, factory_fails](const LocalJob& job, std::unique_ptr<ResidentLocalStage>* out) -> Status {
          ++factory_calls;
          if (!isDev((*job.members)[0])) return Status::OK();
          if (factory_fails) return Status(Code::kCuda, "stand-in: no device");
          auto s = std::make_unique<StandIn>(o);
          standin = s.get();
          *out = std::move(s);
          return Status::OK();
        });
    compress::SelectorOptions so;
    so.density = 0.05;
    REQUIRE(compress::Selector::create("topk", so, &sel).ok());
  }

  // What the local stage must fuse: each member's f32 gradient plus its
  // residual as the store reads it now (wherever it lives), back to back.
  std::vector<float> gradientPlusResidual(const std::vector<Request>& members) const {
    std::vector<float> acc;
    for (const auto& m : members) {
      std::vector<float> r(m.input.numel());
      store.read(m.name, r.data(), r.size());
      const float* x = static_cast<const float*>(m.input.data);
      for (size_t i = 0; i < r.size(); ++i) acc.push_back(x[i] + r[i]);
    }
    return acc;
  }

  // One sparse allgather bucket over `members`: run, check sent + kept ==
  // gradient + residual bitwise, settle with `commit`; returns the status.
  Status sparse(std::vector<Request> members, bool commit = true) {
    const std::vector<float> acc = gradientPlusResidual(members);
    const size_t n = acc.size();
    const size_t cap = sel->maxCount(n);
    std::vector<char> buf(block::allgatherBytes(cap));
    LocalJob job;
    job.members = &members;
    job.n = n;
    job.select = true;
    job.selector = sel.get();
    job.cap = cap;
    job.block = buf.data();
    LocalOutcome out;
    stage->run(job, &out);
    const block::ConstAllgatherBlock b(buf.data(), cap);
    REQUIRE(b.sealed());
    if (!out.status.ok()) {
      REQUIRE(b.header() == block::failureCode(-1));
      stage->settle(members, std::move(out.slab), false);
      return out.status;
    }
    std::vector<float> kept(n);
    REQUIRE(stage->readSlab(*out.slab, kept.data()).ok());
    std::vector<char> sent(n, 0);
    size_t bad = 0;
    for (size_t j = 0; j < out.count; ++j) {
      sent[b.indices()[j]] = 1;
      bad += bits(b.values()[j]) != bits(acc[b.indices()[j]]);
    }
    for (size_t i = 0; i < n; ++i) bad += !sent[i] && bits(kept[i]) != bits(acc[i]);
    REQUIRE(bad == 0);
    stage->settle(members, std::move(out.slab), commit);
    if (commit) {  // the store (wherever the residual lives) reads back what was kept
      size_t off = 0;
      for (auto& m : members) {
        std::vector<float> r(m.input.numel());
        REQUIRE(store.copyOut(m.name, r.data(), r.size()).ok());
        REQUIRE(std::memcmp(r.data(), kept.data() + off, 4 * r.size()) == 0);
        off += r.size();
      }
    }
    return out.status;
  }

  // One dense bucket: acc must be gradient + residual; then the residual is zeroed.
  void dense(std::vector<Request> members) {
    const std::vector<float> want = gradientPlusResidual(members);
    const size_t n = want.size();
    std::vector<float> acc(n);
    LocalJob job;
    job.members = &members;
    job.n = n;
    job.dense_acc = acc.data();
    LocalOutcome out;
    stage->run(job, &out);
    REQUIRE(out.status.ok());
    REQUIRE(std::memcmp(acc.data(), want.data(), 4 * n) == 0);
    stage->zeroResidual(members);
  }

  bool residentHolds(const std::string& name) const {
    size_t n;
    return standin && standin->holds(name, &n);
  }
};

}  // namespace

TEST_CASE("routed stage: a residual moves with its bucket and is never in two places", "[core][local_stage][routed]") {
  Fixture f;
  Tensor w = makeTensor("dev.w", 600, 1), v = makeTensor("host.v", 300, 2);
  // A residual restored before the first step (mgs_residual_restore) lives on the host.
  std::vector<float> r0(600, 0.125f);
  REQUIRE(f.store.copyIn("dev.w", r0.data(), 600).ok());

  // Host tensors: the factory is asked, no resident stage yet.
  REQUIRE(f.sparse({v.r}).ok());
  REQUIRE(f.stage->resident() == nullptr);
  REQUIRE(f.stage->hostBuckets() == 1);

  // A "device" bucket: the resident stage is made and takes dev.w's residual with it.
  REQUIRE(f.sparse({w.r}).ok());
  REQUIRE(f.stage->resident() != nullptr);
  REQUIRE(f.stage->residentBuckets() == 1);
  REQUIRE(f.residentHolds("dev.w"));
  const int calls = f.factory_calls;
  // Several steps on the device: the residual accumulates there.
  for (uint32_t step = 0; step < 3; ++step) {
    w = makeTensor("dev.w", 600, 10 + step);
    REQUIRE(f.sparse({w.r}).ok());
  }
  REQUIRE(f.factory_calls == calls);  // asked no more once a stage exists
  REQUIRE(f.stage->residentBuckets() == 4);

  // The C ABI reaches it: a restore writes where it lives, a copy reads it back.
  std::vector<float> r1(600), back(600);
  for (size_t i = 0; i < 600; ++i) r1[i] = 0.001f * static_cast<float>(i);
  REQUIRE(f.store.copyIn("dev.w", r1.data(), 600).ok());
  REQUIRE(f.residentHolds("dev.w"));
  REQUIRE(f.store.copyOut("dev.w", back.data(), 600).ok());
  REQUIRE(back == r1);
  REQUIRE(f.store.copyOut("dev.w", back.data(), 599).code() == Code::kInvalidArgument);

  // A bucket mixing host and device tensors runs on the host: dev.w's residual comes back first.
  REQUIRE(f.sparse({w.r, v.r}).ok());
  REQUIRE(!f.residentHolds("dev.w"));
  REQUIRE(f.stage->hostBuckets() == 2);

  // Back on the device, then a dense bucket (host) that zeroes it.
  REQUIRE(f.sparse({w.r}).ok());
  REQUIRE(f.residentHolds("dev.w"));
  f.dense({w.r});
  REQUIRE(!f.residentHolds("dev.w"));
  REQUIRE(f.store.copyOut("dev.w", back.data(), 600).ok());
  for (float x : back) REQUIRE(bits(x) == bits(0.0f));

  // A failed device bucket leaves the residual where and as it was.
  REQUIRE(f.sparse({w.r}).ok());
  std::vector<float> before(600), after(600);
  REQUIRE(f.store.copyOut("dev.w", before.data(), 600).ok());
  w = makeTensor("dev.w", 600, 99);
  {
    std::vector<Request> ms{w.r};
    const size_t cap = f.sel->maxCount(600);
    std::vector<char> buf(block::allgatherBytes(cap));
    LocalJob job;
    job.members = &ms;
    job.n = 600;
    job.select = true;
    job.selector = f.sel.get();
    job.cap = cap;
    job.block = buf.data();
    LocalOutcome out;
    f.stage->run(job, &out);
    REQUIRE(out.status.ok());
    f.stage->settle(ms, std::move(out.slab), false);  // another rank failed
  }
  REQUIRE(f.store.copyOut("dev.w", after.data(), 600).ok());
  REQUIRE(after == before);

  // Shutdown: the residual comes back to the host store and stays readable.
  f.stage.reset();
  REQUIRE(f.store.copyOut("dev.w", after.data(), 600).ok());
  REQUIRE(after == before);
}

TEST_CASE("routed stage: a failed hand-over fails the bucket with a failure code, nothing moves",
          "[core][local_stage][routed]") {
  Fixture f;
  Tensor w = makeTensor("dev.w", 400, 3), v = makeTensor("host.v", 100, 4);
  REQUIRE(f.sparse({w.r}).ok());
  REQUIRE(f.residentHolds("dev.w"));
  std::vector<float> before(400), after(400);
  REQUIRE(f.store.copyOut("dev.w", before.data(), 400).ok());
  f.standin->fail_evict = true;
  const Status st = f.sparse({w.r, v.r});
  INFO(st.toString());
  REQUIRE(st.code() == Code::kCuda);
  REQUIRE(st.message().find("rank 2: moving the residual of bucket[dev.w .. host.v] (2 tensors) to host memory "
                            "failed: stand-in: copy failed") != std::string::npos);
  REQUIRE(f.residentHolds("dev.w"));
  REQUIRE(f.store.copyOut("dev.w", after.data(), 400).ok());
  REQUIRE(after == before);
  f.standin->fail_evict = false;
}

TEST_CASE("routed stage: a factory that cannot make a stage is asked once; every bucket runs on the host",
          "[core][local_stage][routed]") {
  Fixture f(/*factory_fails=*/true);
  Tensor w = makeTensor("dev.w", 300, 5);
  for (uint32_t step = 0; step < 3; ++step) {
    w = makeTensor("dev.w", 300, 20 + step);
    REQUIRE(f.sparse({w.r}).ok());
  }
  REQUIRE(f.factory_calls == 1);
  REQUIRE(f.stage->resident() == nullptr);
  REQUIRE(f.stage->hostBuckets() == 3);
}
