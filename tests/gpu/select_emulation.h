// The GPU selector's algorithm emulated on the host, shared by the CPU tests
// of the GPU parts (select_plan_test.cc, launch_emulation_test.cc).
//
// emulateFront() runs what the kernels do before the histogram passes, step
// for step as cuda/select_kernels.cu orders them, with the CPU passes standing
// in for the kernels: sample floor (sampleKernel, floorKernel), the fused
// pass with one ordered candidate list of plan.candCap entries (fusedKernel;
// the GPU has no per-thread regions), statistics, the non-finite policy and
// the search's first window (planKernel). What follows (passes, compaction)
// is emulated by each test in its own way; oracle() is the CPU selector.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "compress/cpu_passes.h"
#include "compress/selector.h"
#include "compress/selector_plan.h"
#include "select_plan.h"
#include "../unit/compress/test_util.h"

namespace mgs::cuda::emulation {

using compress::SelectorKind;
using compress::SelectorOptions;
namespace cpu = compress::cpu;

struct Result {
  Status status;
  size_t count = 0;
  std::vector<float> values, residual;
  std::vector<uint32_t> indices;
  bool usedList = false, fellBack = false;
};

// The device state when the histogram passes start.
struct Front {
  SelectPlan p;
  std::vector<float> r;  // acc, non-finite entries zeroed (fusedKernel writes it to r)
  uint32_t tc = 0;       // candidate floor; 0: no list
  size_t cap = 0;        // entries the list holds
  std::vector<float> candValues;
  std::vector<uint32_t> candIndices;
  size_t numCand = 0;  // candidates found (may exceed cap: overflow)
  bool fromCand = false;
  compress::ThresholdSearch search;
  // Set when the passes do not run: skip (non-finite policy) or dense.
  bool finished = false;
  Result early;
  cpu::KeySource keys() const {
    if (p.kind == static_cast<int>(SelectorKind::kRandomk)) return cpu::KeySource{cpu::KeyKind::kRandom, nullptr, p.seed};
    return cpu::KeySource{cpu::KeyKind::kMagnitude, r.data(), 0};
  }
  cpu::Candidates candidates() {
    cpu::Candidates c;
    c.values = candValues.data();
    c.indices = candIndices.data();
    c.cap = cap;
    c.regions = 1;
    c.count = &numCand;
    c.random = p.kind == static_cast<int>(SelectorKind::kRandomk);
    c.seed = p.seed;
    return c;
  }
};

// capLimit: a smaller candidate list than the plan's (forces the GPU's
// overflow fallback); 0 = the plan's.
inline Front emulateFront(SelectorKind kind, const SelectorOptions& o, const std::vector<float>& x, bool inPlace,
                          std::vector<float> r, uint64_t step, size_t capLimit = 0) {
  const size_t n = r.size();
  Front f;
  f.p = makeSelectPlan(kind, o, n, step);
  const SelectPlan& p = f.p;
  const int chunks = cpu::chunksFor(n);
  const void* xp = inPlace ? nullptr : x.data();
  if (inPlace)
    for (size_t i = 0; i < n; ++i) r[i] = x[i] + r[i];
  // sampleKernel + floorKernel
  uint32_t tc = p.sampleFloor ? 0 : p.fixedTc;
  if (p.sampleFloor) {
    std::vector<uint32_t> keys(p.sampled);
    const size_t finite = cpu::sampleKeys(xp, MGS_FLOAT32, r.data(), n, 1, keys.data());
    const uint64_t want = candidateWant(p, finite);
    if (want <= finite) tc = std::max<uint32_t>(cpu::kthLargestKey(keys.data(), p.sampled, want), 1);
  }
  f.tc = tc;
  // fusedKernel: one ordered list
  f.cap = capLimit ? std::min<size_t>(capLimit, p.candCap) : p.candCap;
  f.candValues.resize(std::max<size_t>(f.cap, 1));
  f.candIndices.resize(std::max<size_t>(f.cap, 1));
  cpu::Candidates cand = f.candidates();
  const cpu::BufferStats bs = tc ? cpu::accumulateCandidates(xp, MGS_FLOAT32, r.data(), n, chunks, 1, tc, &cand)
                                 : cpu::accumulate(xp, MGS_FLOAT32, r.data(), n, chunks, 1);
  if (bs.nonFinite) cpu::zeroNonFinite(r.data(), n, chunks, 1);
  // planKernel
  compress::AccStats st{bs.sum, bs.sumSq, bs.sumAbs, bs.maxAbs, bs.nonFinite};
  const compress::Moments m = planMoments(st, n);
  Result& out = f.early;
  out.residual = r;
  if (bs.nonFinite && o.nonFinite != compress::NonFinitePolicy::kZero) {
    if (o.nonFinite == compress::NonFinitePolicy::kError) out.status = Status(Code::kNumeric, "nf");
    f.finished = true;
    f.r = std::move(r);
    return f;
  }
  if (p.dense) {
    out.values.resize(std::max<size_t>(n, 1));
    out.indices.resize(std::max<size_t>(n, 1));
    cpu::takeAll(r.data(), n, chunks, 1, out.values.data(), out.indices.data());
    out.count = n;
    out.residual = r;
    f.finished = true;
    f.r = std::move(r);
    return f;
  }
  uint32_t dgcKey = 0;
  if (kind == SelectorKind::kDgc) {
    std::vector<uint32_t> keys(p.dgcCount);
    for (size_t j = 0; j < p.dgcCount; ++j) keys[j] = compress::magnitudeKey(r[p.dgcStart + j * p.dgcStride]);
    std::nth_element(keys.begin(), keys.begin() + (p.dgcKSample - 1), keys.end(), std::greater<uint32_t>());
    dgcKey = keys[p.dgcKSample - 1];
  }
  f.search = planSearch(p, bs.maxAbs, m, tc, dgcKey);
  f.fromCand = tc != 0 && f.numCand <= f.cap;
  f.r = std::move(r);
  return f;
}

inline Result oracle(SelectorKind kind, const SelectorOptions& o, const std::vector<float>& x, bool inPlace,
                     std::vector<float> r, uint64_t step) {
  std::unique_ptr<compress::Selector> s;
  REQUIRE(compress::Selector::create(compress::selectorName(kind), o, &s).ok());
  const size_t n = r.size();
  Result out;
  if (inPlace)
    for (size_t i = 0; i < n; ++i) r[i] = x[i] + r[i];
  out.values.resize(std::max<size_t>(n, 1));
  out.indices.resize(std::max<size_t>(n, 1));
  std::vector<std::max_align_t> ws(s->workspaceBytes(n) / sizeof(std::max_align_t) + 1);
  compress::SelectArgs a;
  a.x = inPlace ? nullptr : x.data();
  a.residual = r.data();
  a.n = n;
  a.outValues = out.values.data();
  a.outIndices = out.indices.data();
  a.workspace = ws.data();
  a.workspaceBytes = ws.size() * sizeof(std::max_align_t);
  a.step = step;
  compress::SelectResult res;
  out.status = s->select(a, &res);
  out.count = res.count;
  out.residual = r;
  return out;
}

// Bit for bit: status, count, the selected (index, value) pairs in order, and
// the residual left behind.
inline void requireSame(const Result& g, const Result& c) {
  REQUIRE(g.status.code() == c.status.code());
  REQUIRE(g.count == c.count);
  for (size_t j = 0; j < c.count; ++j) {
    REQUIRE(g.indices[j] == c.indices[j]);
    REQUIRE(compress::test::bits(g.values[j]) == compress::test::bits(c.values[j]));
  }
  REQUIRE(g.residual.size() == c.residual.size());
  for (size_t i = 0; i < c.residual.size(); ++i)
    REQUIRE(compress::test::bits(g.residual[i]) == compress::test::bits(c.residual[i]));
}

}  // namespace mgs::cuda::emulation
