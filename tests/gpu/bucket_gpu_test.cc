// The device-resident bucket (cuda/device_bucket.h) against a CPU reference:
// fuse (f32/f16/bf16 members, prescale, with and without a residual) bitwise;
// the local stage's block (count, values, indices, seal) and new residual
// bitwise equal to the CPU selector run in place on the same acc, with
// conservation (sent + kept == acc, bit for bit); non-finite gradients give
// the first bad member's failure code and leave the residual untouched; the
// scatter of P = 1..4 blocks bitwise equal to the CPU's rank-order sum with
// one scaling per touched entry, and its verdicts (NaN under propagate, an
// error otherwise, a malformed block); hostSyncs() == 0 and no allocation
// across the enqueue path in steady state. Sizes n = 0, 1, k = n, 2^22.
// Ran on an H100 (2026-11-26). Exits 77 (ctest
// SKIP_RETURN_CODE) when no CUDA device is visible.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_main.h"
#include "common/dtype.h"
#include "compress/selector.h"
#include "device_bucket.h"
#include "gpu_selector.h"

namespace mgs::cuda {
namespace {

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { REQUIRE(cudaMalloc(&p, std::max<size_t>(bytes, 1)) == cudaSuccess); }
  ~Dev() { cudaFree(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
  void put(const void* h, size_t b) { REQUIRE(cudaMemcpy(p, h, b, cudaMemcpyHostToDevice) == cudaSuccess); }
  void get(void* h, size_t b) const { REQUIRE(cudaMemcpy(h, p, b, cudaMemcpyDeviceToHost) == cudaSuccess); }
};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Host bytes of float values in `dtype`, and back.
std::vector<char> encode(const std::vector<float>& x, DataType dtype) {
  std::vector<char> out(x.size() * dtypeSize(dtype));
  fromFloat(x.data(), dtype, x.size(), out.data());
  return out;
}

std::vector<float> gaussian(size_t n, uint64_t seed, float scale = 1e-3f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g) * scale;
  return v;
}

void waitVerdict(PendingVerdict& pv) {
  bool done = false;
  for (int i = 0; i < 100000000 && !done; ++i) REQUIRE(pv.test(&done).ok());
  REQUIRE(done);
}

struct MemberData {
  DataType dtype;
  size_t count;
  double prescale;
  std::vector<char> grad;  // host bytes in dtype
};

// The CPU reference of the fuse: float(x) * float(pre) + r, the product rounded first.
std::vector<float> cpuFuse(const std::vector<MemberData>& ms, const std::vector<float>* residual) {
  std::vector<float> acc;
  for (const auto& m : ms) {
    std::vector<float> f(m.count);
    toFloat(m.grad.data(), m.dtype, m.count, f.data());
    for (size_t i = 0; i < m.count; ++i) {
      volatile float p = f[i] * static_cast<float>(m.prescale);  // no contraction
      acc.push_back(static_cast<float>(p));
    }
  }
  if (residual)
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = acc[i] + (*residual)[i];
  return acc;
}

// Runs the local stage on `ms`; returns the block and the new residual.
struct LocalOut {
  std::vector<char> block;
  std::vector<float> acc_after;
  size_t cap = 0;
};
LocalOut runLocal(DeviceBucketEngine& e, const GpuSelector& sel, std::vector<MemberData>& ms,
                  const std::vector<float>* residual, uint64_t step) {
  size_t n = 0;
  for (auto& m : ms) n += m.count;
  std::vector<std::unique_ptr<Dev>> grads;
  std::vector<BucketMember> members;
  for (size_t i = 0; i < ms.size(); ++i) {
    grads.emplace_back(new Dev(ms[i].grad.size()));
    if (!ms[i].grad.empty()) grads.back()->put(ms[i].grad.data(), ms[i].grad.size());
    BucketMember b;
    b.name = "m" + std::to_string(i);
    b.d_grad = grads.back()->p;
    b.dtype = ms[i].dtype;
    b.count = ms[i].count;
    b.prescale = ms[i].prescale;
    members.push_back(b);
  }
  LocalOut out;
  out.cap = sel.maxCount(n);
  Dev res(n * 4), acc(n * 4), block(mgs::block::allgatherBytes(out.cap));
  size_t wb = 0;
  REQUIRE(sel.workspaceBytes(n, &wb).ok());
  Dev ws(wb);
  if (residual && n) res.put(residual->data(), n * 4);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the test's own uploads (pageable)
  LocalStageArgs a;
  a.members = &members;
  a.d_residual = residual ? res.as<float>() : nullptr;
  a.d_acc = acc.as<float>();
  a.d_block = block.p;
  a.cap = out.cap;
  a.d_workspace = ws.p;
  a.workspaceBytes = wb;
  a.step = step;
  a.name = "test bucket";
  REQUIRE(e.enqueueLocal(sel, a).ok());
  REQUIRE(cudaStreamSynchronize(static_cast<cudaStream_t>(e.stream())) == cudaSuccess);
  out.block.resize(mgs::block::allgatherBytes(out.cap));
  block.get(out.block.data(), out.block.size());
  out.acc_after.resize(n);
  if (n) acc.get(out.acc_after.data(), n * 4);
  if (residual && n) {  // the old residual is never written
    std::vector<float> still(n);
    res.get(still.data(), n * 4);
    for (size_t i = 0; i < n; ++i) REQUIRE(bits(still[i]) == bits((*residual)[i]));
  }
  return out;
}

uint64_t header(const std::vector<char>& block) {
  uint64_t h;
  std::memcpy(&h, block.data(), 8);
  return h;
}

void checkSeal(const std::vector<char>& block, size_t cap) {
  uint64_t s;
  std::memcpy(&s, block.data() + mgs::block::sealOffset(cap), 8);
  CHECK(s == (header(block) ^ mgs::block::kAllgatherSeal));
}

}  // namespace

TEST_CASE("device bucket: local stage equals fuse + CPU selector, conservation bitwise", "[gpu][bucket]") {
  std::unique_ptr<DeviceBucketEngine> e;
  REQUIRE(DeviceBucketEngine::create(0, nullptr, &e).ok());
  struct Case {
    std::vector<std::pair<DataType, size_t>> members;
    double density;
  };
  const std::vector<Case> cases = {
      {{{MGS_FLOAT32, 0}}, 0.01},
      {{{MGS_FLOAT32, 1}}, 0.01},
      {{{MGS_FLOAT16, 1}, {MGS_BFLOAT16, 1}}, 1.0},                           // k = n
      {{{MGS_FLOAT32, 1000}, {MGS_FLOAT16, 3000}, {MGS_BFLOAT16, 17}}, 1.0},  // k = n, mixed
      {{{MGS_FLOAT32, 1000}, {MGS_FLOAT16, 3000}, {MGS_BFLOAT16, 17}}, 0.01},
      {{{MGS_FLOAT32, size_t{1} << 22}}, 0.001},
      {{{MGS_BFLOAT16, (size_t{1} << 21) + 3}, {MGS_FLOAT16, size_t{1} << 20}}, 0.001},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    for (bool with_residual : {false, true}) {
      INFO("case " << c << " residual " << with_residual);
      compress::SelectorOptions o;
      o.density = cases[c].density;
      std::unique_ptr<GpuSelector> gsel;
      std::unique_ptr<compress::Selector> csel;
      REQUIRE(GpuSelector::create("topk", o, &gsel).ok());
      REQUIRE(compress::Selector::create("topk", o, &csel).ok());
      std::vector<MemberData> ms;
      size_t n = 0;
      for (size_t i = 0; i < cases[c].members.size(); ++i) {
        const auto [dt, cnt] = cases[c].members[i];
        ms.push_back({dt, cnt, i == 1 ? 0.5 : 1.0, encode(gaussian(cnt, 10 * c + i), dt)});
        n += cnt;
      }
      const std::vector<float> residual = gaussian(n, 99 + c, 1e-4f);
      const std::vector<float> acc = cpuFuse(ms, with_residual ? &residual : nullptr);
      LocalOut g = runLocal(*e, *gsel, ms, with_residual ? &residual : nullptr, 3);
      // CPU oracle: in place on a copy of acc.
      std::vector<float> r = acc, vals(csel->maxCount(n));
      std::vector<uint32_t> idx(csel->maxCount(n));
      std::vector<char> ws(csel->workspaceBytes(n) + 64);
      compress::SelectArgs a;
      a.residual = r.data();
      a.n = n;
      a.outValues = vals.data();
      a.outIndices = idx.data();
      a.workspace = ws.data() + (16 - reinterpret_cast<uintptr_t>(ws.data()) % 16) % 16;
      a.workspaceBytes = csel->workspaceBytes(n);
      a.step = 3;
      compress::SelectResult res;
      REQUIRE(csel->select(a, &res).ok());
      REQUIRE(header(g.block) == res.count);
      checkSeal(g.block, g.cap);
      const float* gv = reinterpret_cast<const float*>(g.block.data() + mgs::block::valuesOffset());
      const uint32_t* gi = reinterpret_cast<const uint32_t*>(g.block.data() + mgs::block::indicesOffset(g.cap));
      std::vector<char> sent(n, 0);
      for (size_t j = 0; j < res.count; ++j) {
        REQUIRE(gi[j] == idx[j]);
        REQUIRE(bits(gv[j]) == bits(vals[j]));
        REQUIRE(bits(gv[j]) == bits(acc[gi[j]]));  // sent == acc there
        sent[gi[j]] = 1;
      }
      for (size_t i = 0; i < n; ++i) {
        REQUIRE(bits(g.acc_after[i]) == bits(r[i]));
        // Conservation: kept == acc where not sent, 0 where sent.
        REQUIRE(bits(g.acc_after[i]) == (sent[i] ? bits(0.0f) : bits(acc[i])));
      }
    }
  }
}

TEST_CASE("device bucket: a non-finite gradient sends the first bad member's code", "[gpu][bucket]") {
  std::unique_ptr<DeviceBucketEngine> e;
  REQUIRE(DeviceBucketEngine::create(0, nullptr, &e).ok());
  compress::SelectorOptions o;
  o.density = 0.01;
  std::unique_ptr<GpuSelector> sel;
  REQUIRE(GpuSelector::create("topk", o, &sel).ok());
  std::vector<float> a = gaussian(500, 1), b = gaussian(700, 2), c = gaussian(300, 3);
  b[123] = NAN;
  c[5] = INFINITY;
  std::vector<MemberData> ms = {{MGS_FLOAT32, 500, 1.0, encode(a, MGS_FLOAT32)},
                                {MGS_FLOAT16, 700, 1.0, encode(b, MGS_FLOAT16)},
                                {MGS_FLOAT32, 300, 1.0, encode(c, MGS_FLOAT32)}};
  const std::vector<float> residual = gaussian(1500, 4);
  LocalOut g = runLocal(*e, *sel, ms, &residual, 0);  // checks the residual is untouched
  CHECK(header(g.block) == mgs::block::failureCode(1));
  checkSeal(g.block, g.cap);
  // Overflow in the sum counts too: finite gradient * prescale -> Inf.
  std::vector<MemberData> big = {{MGS_FLOAT32, 4, 1e38, encode({1.f, 2.f, 3.f, 4.f}, MGS_FLOAT32)}};
  g = runLocal(*e, *sel, big, nullptr, 0);
  CHECK(header(g.block) == mgs::block::failureCode(0));
}

namespace {

// P blocks with random ascending unique indices; the CPU scatter reference.
struct Scatter {
  size_t n = 0, cap = 0;
  int P = 1;
  std::vector<char> recv;
  void build(int P_, size_t n_, size_t cap_, uint64_t seed) {
    P = P_;
    n = n_;
    cap = cap_;
    const size_t bb = mgs::block::allgatherBytes(cap);
    recv.assign(bb * P, 0);
    std::mt19937_64 g(seed);
    for (int r = 0; r < P; ++r) {
      std::vector<uint32_t> idx(n);
      for (size_t i = 0; i < n; ++i) idx[i] = static_cast<uint32_t>(i);
      std::shuffle(idx.begin(), idx.end(), g);
      const size_t count = std::min(cap, n) ? g() % (std::min(cap, n) + 1) : 0;
      idx.resize(count);
      std::sort(idx.begin(), idx.end());
      std::vector<float> v = gaussian(count, seed + r);
      setBlock(r, count, v, idx);
    }
  }
  void setBlock(int r, uint64_t h, const std::vector<float>& v, const std::vector<uint32_t>& idx) {
    char* b = recv.data() + mgs::block::allgatherBytes(cap) * r;
    std::memcpy(b, &h, 8);
    if (!v.empty()) std::memcpy(b + 8, v.data(), v.size() * 4);
    if (!idx.empty()) std::memcpy(b + mgs::block::indicesOffset(cap), idx.data(), idx.size() * 4);
    const uint64_t seal = h ^ mgs::block::kAllgatherSeal;
    std::memcpy(b + mgs::block::sealOffset(cap), &seal, 8);
  }
  void setHeader(int r, uint64_t h) { setBlock(r, h, {}, {}); }
  // The CPU's order: rank by rank from +0, then each touched entry scaled once.
  std::vector<float> reference(const std::vector<BucketMember>& ms) const {
    std::vector<float> s(n, 0.0f);
    std::vector<char> touched(n, 0);
    std::vector<float> fac;
    for (const auto& m : ms)
      for (size_t i = 0; i < m.count; ++i) fac.push_back(static_cast<float>(m.outFactor));
    for (int r = 0; r < P; ++r) {
      const char* b = recv.data() + mgs::block::allgatherBytes(cap) * r;
      uint64_t h;
      std::memcpy(&h, b, 8);
      for (uint64_t j = 0; j < h; ++j) {
        float v;
        uint32_t i;
        std::memcpy(&v, b + 8 + 4 * j, 4);
        std::memcpy(&i, b + mgs::block::indicesOffset(cap) + 4 * j, 4);
        s[i] += v;
        touched[i] = 1;
      }
    }
    for (size_t i = 0; i < n; ++i)
      if (touched[i] && fac[i] != 1.0f) s[i] *= fac[i];
    return s;
  }
};

// Runs the scatter; returns each member's output as host bytes and the verdict.
std::vector<std::vector<char>> runScatter(DeviceBucketEngine& e, const Scatter& sc, std::vector<BucketMember>& ms,
                                          bool propagate, BucketVerdict* verdict, const std::vector<char>& fill) {
  Dev recv(sc.recv.size());
  recv.put(sc.recv.data(), sc.recv.size());
  std::vector<std::unique_ptr<Dev>> outs;
  for (auto& m : ms) {
    const size_t b = m.count * dtypeSize(m.dtype);
    outs.emplace_back(new Dev(b));
    std::vector<char> f(b);
    for (size_t i = 0; i < b; ++i) f[i] = fill[i % fill.size()];
    if (b) outs.back()->put(f.data(), b);
    m.d_out = outs.back()->p;
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  ScatterArgs a;
  a.members = &ms;
  a.d_recv = recv.p;
  a.P = sc.P;
  a.cap = sc.cap;
  a.propagate = propagate;
  PendingVerdict pv;
  REQUIRE(e.enqueueScatter(a, &pv).ok());
  waitVerdict(pv);
  REQUIRE(pv.verdict(verdict).ok());
  std::vector<std::vector<char>> host;
  for (size_t i = 0; i < ms.size(); ++i) {
    host.emplace_back(ms[i].count * dtypeSize(ms[i].dtype));
    if (!host.back().empty()) outs[i]->get(host.back().data(), host.back().size());
  }
  return host;
}

std::vector<BucketMember> outMembers(const std::vector<std::pair<DataType, size_t>>& spec, int P) {
  std::vector<BucketMember> ms;
  for (size_t i = 0; i < spec.size(); ++i) {
    BucketMember m;
    m.name = "out" + std::to_string(i);
    m.dtype = spec[i].first;
    m.count = spec[i].second;
    m.outFactor = i == 0 ? 1.0 : 1.0 / P;
    ms.push_back(m);
  }
  return ms;
}

}  // namespace

TEST_CASE("device bucket: scatter equals the CPU's rank-order sum, bitwise", "[gpu][bucket]") {
  std::unique_ptr<DeviceBucketEngine> e;
  REQUIRE(DeviceBucketEngine::create(0, nullptr, &e).ok());
  const std::vector<std::vector<std::pair<DataType, size_t>>> shapes = {
      {{MGS_FLOAT32, 0}},
      {{MGS_FLOAT32, 1}},
      {{MGS_FLOAT32, 100}, {MGS_FLOAT16, 250}, {MGS_BFLOAT16, 3}},
      {{MGS_FLOAT32, size_t{1} << 20}, {MGS_BFLOAT16, size_t{1} << 20}},
  };
  for (int P = 1; P <= 4; ++P) {
    for (size_t s = 0; s < shapes.size(); ++s) {
      auto ms = outMembers(shapes[s], P);
      size_t n = 0;
      for (auto& m : ms) n += m.count;
      for (size_t cap : {size_t{0}, n, n / 100 + 1}) {
        INFO("P " << P << " shape " << s << " cap " << cap);
        Scatter sc;
        sc.build(P, n, cap, 7 * P + s);
        BucketVerdict v;
        auto out = runScatter(*e, sc, ms, true, &v, {0x55});
        REQUIRE(v.kind == VerdictKind::kOk);
        const std::vector<float> ref = sc.reference(ms);
        size_t off = 0;
        for (size_t i = 0; i < ms.size(); ++i) {
          std::vector<float> slice(ref.begin() + off, ref.begin() + off + ms[i].count);
          const std::vector<char> want = encode(slice, ms[i].dtype);
          REQUIRE(out[i] == want);
          off += ms[i].count;
        }
      }
    }
  }
}

TEST_CASE("device bucket: scatter verdicts (NaN under propagate, errors, malformed)", "[gpu][bucket]") {
  std::unique_ptr<DeviceBucketEngine> e;
  REQUIRE(DeviceBucketEngine::create(0, nullptr, &e).ok());
  auto ms = outMembers({{MGS_FLOAT32, 50}, {MGS_FLOAT16, 40}, {MGS_BFLOAT16, 30}}, 3);
  Scatter sc;
  sc.build(3, 120, 20, 5);
  sc.setHeader(1, mgs::block::failureCode(2));
  BucketVerdict v;
  auto out = runScatter(*e, sc, ms, true, &v, {0x11});
  CHECK(v.kind == VerdictKind::kNaNWritten);
  CHECK(v.failure[1] == 2);
  uint32_t f32;
  std::memcpy(&f32, out[0].data() + 4 * 7, 4);
  CHECK(f32 == 0x7fc00000u);
  uint16_t h;
  std::memcpy(&h, out[1].data(), 2);
  CHECK(h == 0x7e00u);
  std::memcpy(&h, out[2].data() + 2 * 29, 2);
  CHECK(h == 0x7fc0u);
  // MGS_NONFINITE=error: outputs untouched, kNumeric naming rank 1 and 'out2'.
  out = runScatter(*e, sc, ms, false, &v, {0x11});
  CHECK(v.kind == VerdictKind::kFailed);
  for (auto& o : out)
    for (char c : o) REQUIRE(c == 0x11);
  Status st = verdictStatus(v, ms, "b");
  CHECK(st.code() == Code::kNumeric);
  CHECK(st.message().find("rank 1 has NaN or Inf in tensor 'out2'") != std::string::npos);
  // A generic failure is never NaN, even under propagate.
  sc.setHeader(0, mgs::block::failureCode(-1));
  out = runScatter(*e, sc, ms, true, &v, {0x22});
  CHECK(v.kind == VerdictKind::kFailed);
  for (auto& o : out)
    for (char c : o) REQUIRE(c == 0x22);
  // Malformed: an index outside the bucket, a torn seal.
  Scatter bad;
  bad.build(2, 120, 20, 6);
  bad.setBlock(1, 2, {1.0f, 2.0f}, {3, 120});
  out = runScatter(*e, bad, ms, true, &v, {0x33});
  CHECK(v.kind == VerdictKind::kMalformed);
  CHECK(v.malformedRank == 1);
  for (auto& o : out)
    for (char c : o) REQUIRE(c == 0x33);
  bad.build(2, 120, 20, 6);
  bad.recv[mgs::block::sealOffset(20)] ^= 1;  // rank 0's seal
  runScatter(*e, bad, ms, true, &v, {0x33});
  CHECK(v.kind == VerdictKind::kMalformed);
  CHECK(v.malformedRank == 0);
}

TEST_CASE("device bucket: zero host syncs and no allocation on the enqueue path in steady state", "[gpu][bucket]") {
  std::unique_ptr<DeviceBucketEngine> e;
  REQUIRE(DeviceBucketEngine::create(0, nullptr, &e).ok());
  compress::SelectorOptions o;
  o.density = 0.001;
  std::unique_ptr<GpuSelector> sel;
  REQUIRE(GpuSelector::create("gaussiank", o, &sel).ok());
  const size_t n1 = 1 << 20, n2 = 4096, n = n1 + n2;
  Dev g1(n1 * 4), g2(n2 * 2), out1(n1 * 4), out2(n2 * 2), res(n * 4), acc(n * 4);
  g1.put(gaussian(n1, 11).data(), n1 * 4);
  g2.put(encode(gaussian(n2, 12), MGS_FLOAT16).data(), n2 * 2);
  res.put(gaussian(n, 13, 1e-4f).data(), n * 4);
  cudaEvent_t ready;
  REQUIRE(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventRecord(ready, nullptr) == cudaSuccess);
  std::vector<BucketMember> ms(2);
  ms[0] = {"a", g1.p, out1.p, MGS_FLOAT32, n1, 1.0, 1.0, ready, nullptr};
  ms[1] = {"b", g2.p, out2.p, MGS_FLOAT16, n2, 0.5, 0.25, nullptr, nullptr};  // no event: recorded on its stream
  const size_t cap = sel->maxCount(n);
  size_t wb = 0;
  REQUIRE(sel->workspaceBytes(n, &wb).ok());
  Dev ws(wb), block(mgs::block::allgatherBytes(cap));
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  auto step = [&](uint64_t s, PendingVerdict* pv) {
    LocalStageArgs a;
    a.members = &ms;
    a.d_residual = res.as<float>();
    a.d_acc = acc.as<float>();
    a.d_block = block.p;
    a.cap = cap;
    a.d_workspace = ws.p;
    a.workspaceBytes = wb;
    a.step = s;
    REQUIRE(e->enqueueLocal(*sel, a).ok());
    ScatterArgs sa;
    sa.members = &ms;
    sa.d_recv = block.p;  // P = 1: the rank's own block is what it receives
    sa.P = 1;
    sa.cap = cap;
    REQUIRE(e->enqueueScatter(sa, pv).ok());
  };
  // Round 0 warms up (pool slabs, descriptor ring, pinned verdict words, with
  // 8 buckets in flight); round 1 must then sync and allocate nothing.
  uint64_t syncs = 0, allocs = 0;
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      syncs = hostSyncs();
      allocs = e->pool().allocations();
    }
    std::vector<PendingVerdict> pending(8);
    for (uint64_t s = 0; s < 8; ++s) step(8 * round + s, &pending[s]);
    if (round == 1) {
      CHECK(hostSyncs() == syncs);
      CHECK(e->pool().allocations() == allocs);
    }
    for (auto& pv : pending) {
      waitVerdict(pv);
      BucketVerdict v;
      REQUIRE(pv.verdict(&v).ok());
      CHECK(v.kind == VerdictKind::kOk);
    }
  }
  cudaEventDestroy(ready);
}

}  // namespace mgs::cuda

const char* const mgs::test::kGpuTestsWhat = "the device bucket tests";
