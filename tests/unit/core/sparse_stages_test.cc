// The stages of the sparse pipeline one by one (docs/architecture.md "Sparse
// pipeline stages"): the typed block's layout, seals and failure codes; the
// exchange's validation of what two thread ranks received; the host local
// stage (sent + kept == acc bitwise, the residual untouched until settle).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "comm/fake/thread_communicator.h"
#include "common/dtype.h"
#include "core/block_exchange.h"
#include "core/cpu_local_stage.h"
#include "core/device.h"
#include "core/nonfinite.h"
#include "core/scatter_stage.h"
#include "core/sparse_progress.h"
#include "../compress/test_util.h"
#include "core/sparse_block.h"

using namespace mgs;
using compress::test::bits;  // the selector tests' bit view of a float

namespace {}  // namespace

TEST_CASE("sparse block: sizes, typed round trip and seals", "[core][sparse_block]") {
  REQUIRE(block::allgatherBytes(0) == 16);
  REQUIRE(block::allgatherBytes(3) == 40);
  REQUIRE(block::indexBytes(3) == 28);
  const size_t cap = 5;
  std::vector<char> buf(block::allgatherBytes(cap), 0);
  const block::AllgatherBlock b(buf.data(), cap);
  REQUIRE(b.bytes() == buf.size());
  REQUIRE(!b.sealed());  // zeroed: a seal of 0 would need header == the seal constant
  for (size_t j = 0; j < 3; ++j) {
    b.values()[j] = 0.5f * j - 1.0f;
    b.indices()[j] = static_cast<uint32_t>(10 * j + 1);
  }
  b.finish(3);
  // The layout itself: header, then cap values, then cap indices, then the seal.
  uint64_t h, seal;
  float v1;
  uint32_t i2;
  std::memcpy(&h, buf.data(), 8);
  std::memcpy(&v1, buf.data() + 8 + 4, 4);
  std::memcpy(&i2, buf.data() + 8 + 4 * cap + 8, 4);
  std::memcpy(&seal, buf.data() + buf.size() - 8, 8);
  REQUIRE(h == 3);
  REQUIRE(v1 == -0.5f);
  REQUIRE(i2 == 21);
  REQUIRE(seal == (3 ^ block::kAllgatherSeal));

  const block::ConstAllgatherBlock c(buf.data(), cap);
  REQUIRE(c.sealed());
  REQUIRE(c.header() == 3);
  REQUIRE(c.values()[2] == 0.0f);
  REQUIRE(c.indices()[1] == 11);

  SECTION("a block read with a larger cap (a short message) is not sealed") {
    std::vector<char> longer(block::allgatherBytes(cap + 1), 0);
    std::memcpy(longer.data(), buf.data(), buf.size());
    REQUIRE(!block::ConstAllgatherBlock(longer.data(), cap + 1).sealed());
  }
  SECTION("a changed header breaks the seal") {
    const uint64_t four = 4;
    std::memcpy(buf.data(), &four, 8);
    REQUIRE(!c.sealed());
  }
  SECTION("clearSeal") {
    b.clearSeal();
    REQUIRE(!c.sealed());
  }
  SECTION("the index layout: indices right after the header, its own seal") {
    // allgatherBytes(2) == indexBytes(4): the same bytes, sealed as one
    // layout, do not pass as the other.
    std::vector<char> same(block::indexBytes(4), 0);
    block::AllgatherBlock(same.data(), 2).finish(1);
    REQUIRE(!block::ConstIndexBlock(same.data(), 4).sealed());
    const block::IndexBlock ib(same.data(), 4);
    ib.indices()[0] = 77;
    ib.finish(1);
    REQUIRE(block::ConstIndexBlock(same.data(), 4).sealed());
    uint32_t first;
    std::memcpy(&first, same.data() + 8, 4);
    REQUIRE(first == 77);
  }
}

TEST_CASE("sparse block: failure codes encode and decode", "[core][sparse_block]") {
  const size_t cap = 10, members = 3;
  REQUIRE(block::failureCode(-1) == UINT64_MAX);
  for (int m = 0; m < 3; ++m) {
    const block::Header h = block::decodeHeader(block::failureCode(m), cap, members);
    REQUIRE(h.kind == block::Header::kFailure);
    REQUIRE(h.bad_member == m);
  }
  const block::Header any = block::decodeHeader(UINT64_MAX, cap, members);
  REQUIRE(any.kind == block::Header::kFailure);
  REQUIRE(any.bad_member == -1);
  // A member code for a member the bucket does not have, and a count above
  // cap, are malformed.
  REQUIRE(block::decodeHeader(block::failureCode(3), cap, members).kind == block::Header::kInvalid);
  REQUIRE(block::decodeHeader(cap + 1, cap, members).kind == block::Header::kInvalid);
  const block::Header full = block::decodeHeader(cap, cap, members);
  REQUIRE(full.kind == block::Header::kCount);
  REQUIRE(full.count == cap);
  REQUIRE(block::decodeHeader(0, 0, members).kind == block::Header::kCount);
}

namespace {

// Two thread ranks allgather their blocks (rank 1's from `make1`) and both
// validate what they received; returns each rank's verdict.
std::vector<Status> exchangeTwo(size_t cap, size_t n, const std::function<void(const block::AllgatherBlock&)>& make1) {
  auto world = std::make_shared<ThreadWorld>(2);
  std::vector<Status> verdict(2);
  std::vector<std::pair<uint64_t, float>> got0(2);  // rank 0's header and first value, as each rank received it
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      ThreadCommunicator comm(world, r);
      BlockExchange ex(comm);
      BlockExchange::Allgather a;
      a.cap = cap;
      a.send = ex.takeBuffer(block::allgatherBytes(cap));
      const block::AllgatherBlock b(a.send.data(), cap);
      if (r == 0) {
        b.values()[0] = 1.5f;
        b.indices()[0] = static_cast<uint32_t>(n - 1);
        b.finish(1);
      } else {
        make1(b);
      }
      ex.start(a);
      Status st = ex.finish(a);
      verdict[r] = st.ok() ? ex.validate(a, n, 2, "t") : st;
      // Catch's assertions are not thread-safe: record here, check after join.
      if (verdict[r].ok()) got0[r] = {a.received(0).header(), a.received(0).values()[0]};
      ex.release(a);
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) {
    if (!verdict[r].ok()) continue;
    REQUIRE(got0[r].first == 1);
    REQUIRE(got0[r].second == 1.5f);
  }
  return verdict;
}

}  // namespace

TEST_CASE("block exchange: every rank takes the same verdict on a malformed block", "[core][block_exchange]") {
  const size_t cap = 4, n = 100;
  auto same = [](const std::vector<Status>& v, Code code, const std::string& text) {
    for (const auto& st : v) {
      INFO(st.toString());
      REQUIRE(st.code() == code);
      if (!text.empty()) REQUIRE(st.message().find(text) != std::string::npos);
    }
  };
  SECTION("well formed, and a failure code, pass") {
    same(exchangeTwo(cap, n,
                     [&](const block::AllgatherBlock& b) {
                       b.values()[0] = -2.0f;
                       b.indices()[0] = 0;
                       b.finish(1);
                     }),
         Code::kOk, "");
    same(exchangeTwo(cap, n, [](const block::AllgatherBlock& b) { b.finish(block::failureCode(1)); }), Code::kOk, "");
  }
  SECTION("an index out of the bucket") {
    same(exchangeTwo(cap, n,
                     [&](const block::AllgatherBlock& b) {
                       b.indices()[0] = static_cast<uint32_t>(n);
                       b.finish(1);
                     }),
         Code::kCommunication, "rank 1 sent index 100 at position 0 (the bucket has 100 elements)");
  }
  SECTION("a count above the capacity") {
    same(exchangeTwo(cap, n, [&](const block::AllgatherBlock& b) { b.finish(cap + 1); }), Code::kCommunication,
         "rank 1 sent a count of 5 above the block's capacity 4");
  }
  SECTION("a non-finite value") {
    same(exchangeTwo(cap, n,
                     [&](const block::AllgatherBlock& b) {
                       b.values()[0] = NAN;
                       b.indices()[0] = 3;
                       b.finish(1);
                     }),
         Code::kCommunication, "rank 1 sent a non-finite value at index 3");
  }
  SECTION("a torn block (no seal)") {
    same(exchangeTwo(cap, n,
                     [&](const block::AllgatherBlock& b) {
                       b.finish(0);
                       b.clearSeal();
                     }),
         Code::kCommunication, "rank 1 sent a short or torn block");
  }
}

namespace {

struct Bucket {
  std::vector<float> a;     // f32, prescale 0.5
  std::vector<uint16_t> b;  // f16
  std::vector<Request> members;
};

Bucket makeBucket(size_t na, size_t nb, bool single) {
  Bucket k;
  std::mt19937 rng(11);
  std::normal_distribution<float> g;
  k.a.resize(na);
  for (auto& v : k.a) v = g(rng);
  Request ra;
  ra.name = "a";
  ra.input.data = k.a.data();
  ra.input.dtype = MGS_FLOAT32;
  ra.input.shape = {static_cast<int64_t>(na)};
  ra.sig.prescale = single ? 1.0 : 0.5;
  k.members.push_back(ra);
  if (!single) {
    std::vector<float> f(nb);
    for (auto& v : f) v = g(rng);
    k.b.resize(nb);
    fromFloat(f.data(), MGS_FLOAT16, nb, k.b.data());
    Request rb;
    rb.name = "b";
    rb.input.data = k.b.data();
    rb.input.dtype = MGS_FLOAT16;
    rb.input.shape = {static_cast<int64_t>(nb)};
    k.members.push_back(rb);
  }
  return k;
}

}  // namespace

TEST_CASE("cpu local stage: sent + kept == acc bitwise, the residual changes only at settle", "[core][local_stage]") {
  const bool single = GENERATE(false, true);  // true: the direct single-f32-tensor path
  const bool agreed = GENERATE(false, true);
  const size_t na = 700, nb = single ? 0 : 300, n = na + nb;
  Bucket k = makeBucket(na, nb, single);
  ResidualStore residuals;
  std::vector<float> ra(na), rb(nb);
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 0.3f);
  for (auto& v : ra) v = g(rng);
  for (auto& v : rb) v = g(rng);
  REQUIRE(residuals.copyIn("a", ra.data(), na).ok());
  if (!single) REQUIRE(residuals.copyIn("b", rb.data(), nb).ok());
  // The reference acc, member by member.
  std::vector<float> acc(n);
  fuseIntoFloat(k.a.data(), MGS_FLOAT32, na, k.members[0].sig.prescale, ra.data(), acc.data());
  if (!single) fuseIntoFloat(k.b.data(), MGS_FLOAT16, nb, 1.0, rb.data(), acc.data() + na);

  LocalStageOptions o;
  o.residuals = &residuals;
  CpuLocalStage stage(o);
  compress::SelectorOptions so;
  so.density = 0.05;
  std::unique_ptr<compress::Selector> sel;
  REQUIRE(compress::Selector::create("topk", so, &sel).ok());
  const size_t cap = sel->maxCount(n);
  std::vector<char> buf(agreed ? block::indexBytes(cap) : block::allgatherBytes(cap));
  std::vector<float> agreed_vals(cap);
  LocalJob job;
  job.members = &k.members;
  job.n = n;
  job.select = true;
  job.selector = sel.get();
  job.cap = cap;
  job.block = buf.data();
  job.index_block = agreed;
  job.agreed_values = agreed_vals.data();
  job.name = "bucket";
  LocalOutcome out;
  stage.run(job, &out);
  REQUIRE(out.status.ok());
  REQUIRE(out.selected);
  REQUIRE(out.count == compress::kForDensity(n, 0.05));
  REQUIRE(out.slab);
  REQUIRE(out.slab->size() == n);
  const float* vals = agreed ? agreed_vals.data() : block::ConstAllgatherBlock(buf.data(), cap).values();
  const uint32_t* idx = agreed ? block::ConstIndexBlock(buf.data(), cap).indices()
                               : block::ConstAllgatherBlock(buf.data(), cap).indices();
  const uint64_t header =
      agreed ? block::ConstIndexBlock(buf.data(), cap).header() : block::ConstAllgatherBlock(buf.data(), cap).header();
  const bool sealed =
      agreed ? block::ConstIndexBlock(buf.data(), cap).sealed() : block::ConstAllgatherBlock(buf.data(), cap).sealed();
  REQUIRE(header == out.count);
  REQUIRE(sealed);

  std::vector<float> kept(n);
  REQUIRE(stage.readSlab(*out.slab, kept.data()).ok());
  std::vector<char> sent(n, 0);
  size_t bad = 0;
  for (size_t j = 0; j < out.count; ++j) {
    REQUIRE(idx[j] < n);
    sent[idx[j]] = 1;
    bad += bits(vals[j]) != bits(acc[idx[j]]) || bits(kept[idx[j]]) != bits(0.0f);
  }
  for (size_t i = 0; i < n; ++i)
    if (!sent[i]) bad += bits(kept[i]) != bits(acc[i]);
  REQUIRE(bad == 0);

  // The residual is as before until settle commits the slab.
  std::vector<float> now(na);
  REQUIRE(residuals.copyOut("a", now.data(), na).ok());
  REQUIRE(now == ra);
  stage.settle(k.members, std::move(out.slab), true);
  REQUIRE(residuals.copyOut("a", now.data(), na).ok());
  REQUIRE(std::memcmp(now.data(), kept.data(), 4 * na) == 0);
  if (!single) {
    std::vector<float> nowb(nb);
    REQUIRE(residuals.copyOut("b", nowb.data(), nb).ok());
    REQUIRE(std::memcmp(nowb.data(), kept.data() + na, 4 * nb) == 0);
  }
}

TEST_CASE("cpu local stage: a NaN fails the bucket with a failure code and leaves the residual",
          "[core][local_stage]") {
  const bool single = GENERATE(false, true);
  const size_t na = 500, nb = single ? 0 : 200, n = na + nb;
  Bucket k = makeBucket(na, nb, single);
  if (single) {
    k.a[17] = NAN;
  } else {
    k.b[3] = 0x7e00;  // f16 NaN
  }
  ResidualStore residuals;
  std::vector<float> ra(na, 0.25f);
  REQUIRE(residuals.copyIn("a", ra.data(), na).ok());
  LocalStageOptions o;
  o.rank = 3;
  o.residuals = &residuals;
  CpuLocalStage stage(o);
  compress::SelectorOptions so;
  so.density = 0.05;
  std::unique_ptr<compress::Selector> sel;
  REQUIRE(compress::Selector::create("topk", so, &sel).ok());
  const size_t cap = sel->maxCount(n);
  std::vector<char> buf(block::allgatherBytes(cap));
  LocalJob job;
  job.members = &k.members;
  job.n = n;
  job.select = true;
  job.selector = sel.get();
  job.cap = cap;
  job.block = buf.data();
  LocalOutcome out;
  stage.run(job, &out);
  INFO(out.status.toString());
  REQUIRE(out.status.code() == Code::kNumeric);
  const int bad = single ? 0 : 1;
  REQUIRE(out.bad_member == bad);
  REQUIRE(out.non_finite == 1);
  REQUIRE(out.status.message().find(std::string("rank 3: non-finite gradient in tensor '") + (single ? "a" : "b") +
                                    "'") != std::string::npos);
  const block::ConstAllgatherBlock b(buf.data(), cap);
  REQUIRE(b.sealed());
  REQUIRE(b.header() == block::failureCode(bad));
  stage.settle(k.members, std::move(out.slab), false);
  std::vector<float> now(na);
  REQUIRE(residuals.copyOut("a", now.data(), na).ok());
  REQUIRE(now == ra);
}

TEST_CASE("cpu local stage: dense buckets, extract and zeroResidual", "[core][local_stage]") {
  const size_t na = 64, nb = 32, n = na + nb;
  Bucket k = makeBucket(na, nb, false);
  ResidualStore residuals;
  std::vector<float> ra(na, 1.0f);
  REQUIRE(residuals.copyIn("a", ra.data(), na).ok());
  LocalStageOptions o;
  o.residuals = &residuals;
  CpuLocalStage stage(o);
  std::vector<float> acc(n), want(n);
  fuseIntoFloat(k.a.data(), MGS_FLOAT32, na, 0.5, ra.data(), want.data());
  fuseIntoFloat(k.b.data(), MGS_FLOAT16, nb, 1.0, nullptr, want.data() + na);  // "b" has no residual yet: zeros
  LocalJob job;
  job.members = &k.members;
  job.n = n;
  job.dense_acc = acc.data();
  LocalOutcome out;
  stage.run(job, &out);
  REQUIRE(out.status.ok());
  REQUIRE(!out.slab);
  REQUIRE(std::memcmp(acc.data(), want.data(), 4 * n) == 0);
  stage.zeroResidual(k.members);
  std::vector<float> now(na);
  REQUIRE(residuals.copyOut("a", now.data(), na).ok());
  for (float v : now) REQUIRE(bits(v) == bits(0.0f));

  // A fuse-only sparse job (an agreed non-leader), then extract.
  LocalJob fuse;
  fuse.members = &k.members;
  fuse.n = n;
  stage.run(fuse, &out);
  REQUIRE(out.status.ok());
  REQUIRE(!out.selected);
  const uint32_t idx[3] = {0, 65, 95};
  float vals[3];
  std::vector<float> before(n), after(n);
  REQUIRE(stage.readSlab(*out.slab, before.data()).ok());
  REQUIRE(stage.extract(*out.slab, idx, 3, vals).ok());
  REQUIRE(stage.readSlab(*out.slab, after.data()).ok());
  for (int j = 0; j < 3; ++j) {
    REQUIRE(bits(vals[j]) == bits(before[idx[j]]));
    before[idx[j]] = 0.0f;
  }
  REQUIRE(std::memcmp(before.data(), after.data(), 4 * n) == 0);
}

TEST_CASE("cpu local stage: zero_inputs zeroes in-place f32 inputs while fusing; the scatter then writes only the picks",
          "[core][local_stage]") {
  // Sizes across the 4,096-element chunk of the fuse, prescale on one member.
  const size_t na = 10007, nb = 4096, n = na + nb;
  std::mt19937 rng(23);
  std::normal_distribution<float> g;
  std::vector<float> a(na), b(nb), ra(na), rb(nb);
  for (auto* v : {&a, &b, &ra, &rb})
    for (auto& x : *v) x = g(rng);
  const std::vector<float> a0 = a, b0 = b;
  auto member = [](const char* name, std::vector<float>& x, double prescale) {
    Request r;
    r.name = name;
    r.input.data = r.output.data = x.data();
    r.input.dtype = r.output.dtype = MGS_FLOAT32;
    r.input.shape = r.output.shape = {static_cast<int64_t>(x.size())};
    r.sig.prescale = prescale;
    return r;
  };
  std::vector<Request> members = {member("a", a, 0.5), member("b", b, 1.0)};
  std::vector<float> want(n);
  fuseIntoFloat(a0.data(), MGS_FLOAT32, na, 0.5, ra.data(), want.data());
  fuseIntoFloat(b0.data(), MGS_FLOAT32, nb, 1.0, rb.data(), want.data() + na);

  ResidualStore residuals;
  REQUIRE(residuals.copyIn("a", ra.data(), na).ok());
  REQUIRE(residuals.copyIn("b", rb.data(), nb).ok());
  LocalStageOptions o;
  o.residuals = &residuals;
  CpuLocalStage stage(o);
  LocalJob job;  // an agreed non-leader: fuse only
  job.members = &members;
  job.n = n;
  job.zero_inputs = GENERATE(false, true);
  const bool out_of_place = GENERATE(false, true);
  std::vector<float> sink(nb, 7.0f);
  if (out_of_place) members[1].output.data = sink.data();  // one member not in place: nobody is zeroed
  LocalOutcome out;
  stage.run(job, &out);
  REQUIRE(out.status.ok());
  const bool zeroed = job.zero_inputs && !out_of_place;
  REQUIRE(out.inputs_zeroed == zeroed);
  std::vector<float> acc(n);
  REQUIRE(stage.readSlab(*out.slab, acc.data()).ok());
  REQUIRE(std::memcmp(acc.data(), want.data(), 4 * n) == 0);  // the same acc either way
  size_t nonzero = 0;
  for (float v : a) nonzero += bits(v) != bits(0.0f);
  for (float v : b) nonzero += bits(v) != bits(0.0f);
  if (zeroed) {
    REQUIRE(nonzero == 0);
  } else {
    REQUIRE(std::memcmp(a.data(), a0.data(), 4 * na) == 0);
    REQUIRE(std::memcmp(b.data(), b0.data(), 4 * nb) == 0);
  }

  // The scatter: with outputs_zeroed it writes only the picks; the outputs
  // end bitwise as a scatter into zeroed outputs would leave them.
  ScatterStage scatter(2);
  for (auto& m : members) m.sig.reduce_op = MGS_REDUCE_SUM;
  const uint32_t idx[4] = {3, 4099, 10006, 10007 + 4095};
  const float vals[4] = {1.5f, -0.0f, 2.0f, -3.0f};
  REQUIRE(scatter.scatterAgreed(members, n, idx, vals, 4, out.inputs_zeroed).ok());
  std::vector<float> want_a(na, 0.0f), want_b(nb, 0.0f);
  want_a[3] = 1.5f, want_a[4099] = -0.0f, want_a[10006] = 2.0f, want_b[4095] = -3.0f;
  REQUIRE(std::memcmp(a.data(), want_a.data(), 4 * na) == 0);
  const float* ob = out_of_place ? sink.data() : b.data();
  REQUIRE(std::memcmp(ob, want_b.data(), 4 * nb) == 0);
}

TEST_CASE("scatter stage: scatterAgreed with outputs_zeroed leaves the rest of the output as it is",
          "[core][scatter]") {
  std::vector<float> x(10, 9.0f);
  Request r;
  r.name = "x";
  r.input.data = r.output.data = x.data();
  r.input.dtype = r.output.dtype = MGS_FLOAT32;
  r.input.shape = r.output.shape = {10};
  r.sig.reduce_op = MGS_REDUCE_AVERAGE;
  std::vector<Request> members = {r};
  ScatterStage scatter(4);
  const uint32_t idx[1] = {2};
  const float vals[1] = {8.0f};
  REQUIRE(scatter.scatterAgreed(members, 10, idx, vals, 1, true).ok());
  for (size_t i = 0; i < 10; ++i) REQUIRE(x[i] == (i == 2 ? 2.0f : 9.0f));  // 8 / P
  REQUIRE(scatter.scatterAgreed(members, 10, idx, vals, 1, false).ok());
  for (size_t i = 0; i < 10; ++i) REQUIRE(x[i] == (i == 2 ? 2.0f : 0.0f));
}

TEST_CASE("device::createLocalStage: a build without CUDA has no device stage and says so", "[core][local_stage]") {
  if (device::builtWithCuda()) return;  // src/device/cuda/device_cuda.cc answers there (tests/gpu)
  std::unique_ptr<ResidentLocalStage> s;
  const Status st = device::createLocalStage(LocalStageOptions{}, 0, &s);
  REQUIRE(st.code() == Code::kUnsupported);
  REQUIRE(!s);
}

// A resumed job continues bitwise only if the agreed buckets' leaders and the
// step counter come back with the residuals (core/sparse_progress.h,
// mgs_sparse_state_copy/restore): a fresh runtime starts every agreed bucket
// at its first leader, and at P = 3 two applied steps give "w" another one.
TEST_CASE("sparse progress: the agreed leaders and the step counter survive a save and restore",
          "[core][checkpoint]") {
  auto world = std::make_shared<ThreadWorld>(3);
  ThreadCommunicator comm(world, 0);  // only its size is used
  SparseProgress saved_from;
  BlockExchange ex(comm, &saved_from);
  const int first = ex.agreedLeader("w");
  ex.agreedApplied("w");
  ex.agreedApplied("w");
  ex.agreedApplied("v");
  saved_from.stepBegan(6);  // step 6 ran: a resumed job goes on with step 7
  CHECK(ex.agreedLeader("w") == (first + 2) % 3);
  const std::string saved = saved_from.save(3);

  SparseProgress resumed;
  BlockExchange fresh(comm, &resumed);
  CHECK(fresh.agreedLeader("w") == first);  // without the restore: the first leader again
  uint64_t step = 0;
  CHECK(!resumed.takeRestoredStep(&step));
  REQUIRE(resumed.restore(saved, 3).ok());
  CHECK(fresh.agreedLeader("w") == ex.agreedLeader("w"));
  CHECK(fresh.agreedLeader("v") == ex.agreedLeader("v"));
  REQUIRE(resumed.takeRestoredStep(&step));
  CHECK(step == 7);
  CHECK(!resumed.takeRestoredStep(&step));  // handed over once
  CHECK(resumed.save(3) == saved);

  // Refused, leaving the state as it was: another world size, other bytes.
  const Status other = resumed.restore(saved, 4);
  CHECK(other.code() == Code::kInvalidArgument);
  CHECK(other.message().find("saved by a job of 3 ranks; this job has 4") != std::string::npos);
  CHECK(resumed.restore("not a state", 3).code() == Code::kInvalidArgument);
  CHECK(resumed.restore(saved.substr(0, saved.size() - 1), 3).code() == Code::kInvalidArgument);
  CHECK(resumed.restore(saved + "x", 3).code() == Code::kInvalidArgument);
  CHECK(resumed.save(3) == saved);
}
