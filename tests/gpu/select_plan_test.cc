// CPU-side logic of the GPU selector, tested without a GPU.
//
// emulate() runs the GPU selector's algorithm on the host, step for step as
// cuda/select_kernels.cu orders it, with the same decision functions the
// kernels call (select_plan.h, ThresholdSearch::step on a HistSummary) and
// the CPU passes standing in for the kernels: sample floor, one candidate
// list of plan.candCap entries (the GPU has no per-thread regions), search on
// the list or full passes, compaction. It must select exactly what the CPU
// selector selects, bit for bit: this checks the port's plan (candidate
// sizing, floors, start windows, dgc/randomk parameters, the non-finite
// policy, the fallback) everywhere a GPU is not at hand. What it cannot
// check: the kernels themselves (tests/gpu/compress_gpu_test.cc, GPU only).
#include <algorithm>
#include <vector>

#include <catch2/catch.hpp>

#include "select_emulation.h"

namespace mgs::cuda {
namespace {

using compress::SelectorKind;
using compress::SelectorOptions;
namespace cpu = compress::cpu;

using emulation::oracle;
using emulation::requireSame;
using emulation::Result;

// The passes one launch after another and the compaction in index order
// (launch_emulation_test.cc interleaves the kernels' blocks instead).
Result emulate(SelectorKind kind, const SelectorOptions& o, const std::vector<float>& x, bool inPlace,
               std::vector<float> r, uint64_t step, size_t capLimit = 0) {
  emulation::Front f = emulation::emulateFront(kind, o, x, inPlace, std::move(r), step, capLimit);
  if (f.finished) return f.early;
  const SelectPlan& p = f.p;
  const size_t n = f.r.size();
  const int chunks = cpu::chunksFor(n);
  Result out;
  out.values.resize(std::max<size_t>(n, 1));
  out.indices.resize(std::max<size_t>(n, 1));
  compress::ThresholdSearch search = f.search;
  bool fromCand = f.fromCand;
  out.usedList = fromCand;
  cpu::Candidates cand = f.candidates();
  // passKernel x passLaunches
  const cpu::KeySource keys = f.keys();
  std::vector<uint32_t> hist(static_cast<size_t>(compress::kHistBins + 1) * cpu::kMaxChunks);
  std::vector<uint64_t> total(compress::kHistBins + 1);
  for (int pass = 0; pass < p.passLaunches && !search.done(); ++pass) {
    if (passUsesCandidates(fromCand, search.window(), f.tc)) {
      cpu::candidateHistogram(cand, search.window(), total.data());
    } else {
      fromCand = false;
      out.fellBack = true;
      cpu::histogram(keys, n, search.window(), chunks, 1, hist.data());
      std::fill(total.begin(), total.end(), 0);
      for (int c = 0; c < chunks; ++c)
        for (uint32_t b = 0; b <= compress::kHistBins; ++b) total[b] += hist[c * (compress::kHistBins + 1) + b];
    }
    search.step(compress::summarizeHistogram(total.data(), search.config().k));
  }
  REQUIRE(search.done());  // the launch budget always suffices
  // compactKernel
  const compress::Selection& sel = search.selection();
  if (fromCand)
    out.count = cpu::compactCandidates(cand, sel, f.r.data(), out.values.data(), out.indices.data());
  else if (sel.count)
    cpu::compact(keys, n, sel, chunks, 1, hist.data(), f.r.data(), out.values.data(), out.indices.data());
  if (!fromCand) out.count = sel.count;
  out.residual = f.r;
  return out;
}

const SelectorKind kKinds[] = {SelectorKind::kTopk, SelectorKind::kGaussiank, SelectorKind::kLdte,
                               SelectorKind::kDgc,  SelectorKind::kRandomk,   SelectorKind::kNone};

}  // namespace

TEST_CASE("gpu plan: the emulated GPU algorithm selects what the CPU selects", "[gpu][plan]") {
  using compress::test::Dist;
  int viaList = 0, viaFull = 0;
  for (const Dist d : {Dist::kNormal, Dist::kLaplace, Dist::kStudentT3}) {
    for (const size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{70001}, size_t{300007}}) {
      const auto x = compress::test::makeData(d, n, 11 + n);
      const auto r0 = compress::test::makeData(Dist::kNormal, n, 29 + n, 1e-4f);
      for (const double rho : {0.001, 0.01, 0.3}) {
        for (const SelectorKind kind : kKinds) {
          for (const bool inPlace : {false, true}) {
            CAPTURE(compress::test::distName(d), n, rho, compress::selectorName(kind), inPlace);
            SelectorOptions o;
            o.density = rho;
            o.seed = 3;
            const Result g = emulate(kind, o, x, inPlace, r0, 5);
            requireSame(g, oracle(kind, o, x, inPlace, r0, 5));
            viaList += g.usedList && !g.fellBack;
            viaFull += g.fellBack;
          }
        }
      }
    }
  }
  // Both GPU paths were exercised: the one-pass list and the full passes.
  CHECK(viaList > 100);
  CHECK(viaFull > 10);
  WARN("searches on the list alone: " << viaList << ", with full passes: " << viaFull);
}

TEST_CASE("gpu plan: exact trim and k = n", "[gpu][plan]") {
  const auto x = compress::test::makeData(compress::test::Dist::kStudentT3, 50000, 3);
  const std::vector<float> r0(x.size(), 0.0f);
  SelectorOptions o;
  o.exactTrim = true;
  for (const SelectorKind kind : {SelectorKind::kGaussiank, SelectorKind::kLdte}) {
    const Result g = emulate(kind, o, x, false, r0, 1);
    REQUIRE(g.count == compress::kForDensity(x.size(), o.density));
    requireSame(g, oracle(kind, o, x, false, r0, 1));
  }
  o.density = 1.0;
  const Result all = emulate(SelectorKind::kTopk, o, x, false, r0, 1);
  REQUIRE(all.count == x.size());
  requireSame(all, oracle(SelectorKind::kTopk, o, x, false, r0, 1));
}

TEST_CASE("gpu plan: an overflowing candidate list falls back to full passes, same set", "[gpu][plan]") {
  const auto x = compress::test::makeData(compress::test::Dist::kLaplace, 200003, 8);
  const auto r0 = compress::test::makeData(compress::test::Dist::kNormal, 200003, 9, 1e-4f);
  for (const SelectorKind kind : {SelectorKind::kTopk, SelectorKind::kLdte, SelectorKind::kRandomk}) {
    CAPTURE(compress::selectorName(kind));
    SelectorOptions o;
    o.density = 0.01;
    const Result g = emulate(kind, o, x, false, r0, 2, /*capLimit=*/100);
    REQUIRE_FALSE(g.usedList);
    REQUIRE(g.fellBack);
    requireSame(g, oracle(kind, o, x, false, r0, 2));
  }
}

TEST_CASE("gpu plan: non-finite input follows the policy", "[gpu][plan]") {
  auto x = compress::test::makeData(compress::test::Dist::kNormal, 100000, 4);
  x[17] = std::numeric_limits<float>::quiet_NaN();
  x[90000] = -std::numeric_limits<float>::infinity();
  const auto r0 = compress::test::makeData(compress::test::Dist::kNormal, 100000, 5, 1e-4f);
  for (const auto policy :
       {compress::NonFinitePolicy::kError, compress::NonFinitePolicy::kSkip, compress::NonFinitePolicy::kZero}) {
    for (const SelectorKind kind : kKinds) {
      for (const bool inPlace : {false, true}) {
        CAPTURE(static_cast<int>(policy), compress::selectorName(kind), inPlace);
        SelectorOptions o;
        o.nonFinite = policy;
        const Result g = emulate(kind, o, x, inPlace, r0, 7);
        REQUIRE(g.residual[17] == 0.0f);
        requireSame(g, oracle(kind, o, x, inPlace, r0, 7));
      }
    }
  }
}

TEST_CASE("gpu plan: device-side moments and start keys equal the CPU's", "[gpu][plan]") {
  std::mt19937_64 g(1);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int t = 0; t < 2000; ++t) {
    compress::AccStats s;
    s.sum = u(g) * 100;
    s.sumAbs = std::fabs(u(g)) * 1000;
    s.sumSq = std::fabs(u(g)) * 10 + s.sum * s.sum / 1e6;
    s.nonFinite = t % 3;
    const size_t n = 1000000 + t;
    const compress::Moments a = planMoments(s, n), b = compress::moments(s, n);
    REQUIRE(a.mean == b.mean);
    REQUIRE(a.stddev == b.stddev);
    REQUIRE(a.meanAbs == b.meanAbs);
    for (const SelectorKind kind : {SelectorKind::kGaussiank, SelectorKind::kLdte, SelectorKind::kTopk}) {
      SelectorOptions o;
      o.density = t % 2 ? 0.01 : 0.001;
      const SelectPlan p = makeSelectPlan(kind, o, n, 0);
      REQUIRE(planStartKey(p, a) == compress::startKey(kind, o, n, p.k, b));
    }
  }
}

TEST_CASE("gpu plan: the workspace layout is disjoint, aligned and grows with n", "[gpu][plan]") {
  size_t prev = 0;
  for (const SelectorKind kind : kKinds) {
    for (const size_t n : {size_t{1}, size_t{4095}, size_t{4097}, size_t{1} << 20, size_t{25600000}}) {
      CAPTURE(compress::selectorName(kind), n);
      SelectorOptions o;
      o.density = 0.01;
      const SelectPlan p = makeSelectPlan(kind, o, n, 0);
      const size_t b32 = 8 * (tilesFor(n) + 32), b64 = 16 * (tilesFor(std::max<size_t>(n, p.candCap)) + 32);
      const SelectLayout l = makeSelectLayout(p, 333, b32, b64);
      REQUIRE(l.fusedTiles == (n + kTileSize - 1) / kTileSize);
      REQUIRE(l.compactTiles * kTileSize >= std::max<size_t>(n, p.candCap));
      struct Region {
        size_t at, bytes;
      };
      const Region rs[] = {{l.state, 333},
                           {l.hist, 4 * (compress::kHistBins + 1)},
                           {l.partials, sizeof(TileStats) * l.fusedTiles},
                           {l.sample, 4 * std::max<size_t>(p.sampled, p.dgcCapacity)},
                           {l.tiles32, b32},
                           {l.tiles64, b64},
                           {l.candValues, 4 * p.candCap},
                           {l.candIndices, 4 * p.candCap}};
      for (size_t i = 0; i < std::size(rs); ++i) {
        REQUIRE(rs[i].at % kLayoutAlign == 0);
        REQUIRE(rs[i].at + rs[i].bytes <= l.total);
        for (size_t j = i + 1; j < std::size(rs); ++j)
          REQUIRE((rs[i].at + rs[i].bytes <= rs[j].at || rs[j].at + rs[j].bytes <= rs[i].at));
      }
      if (kind == SelectorKind::kTopk) {
        REQUIRE(l.total >= prev);
        prev = l.total;
      }
      if (p.sampleFloor) REQUIRE(p.sampled == std::min<size_t>(n, cpu::kSampleMax));
      if (!p.dense && kind != SelectorKind::kNone) REQUIRE(p.passLaunches == p.cfg.maxPasses);
    }
  }
}

TEST_CASE("gpu plan: launch grids stay within the device and cover the work", "[gpu][plan]") {
  LaunchLimits h100;  // what an H100 reports for these kernels (132 SMs)
  h100.cooperative = true;
  h100.sms = 132;
  h100.passResident = 4 * 132;
  h100.compactResident = 5 * 132;
  LaunchLimits noCoop = h100;
  noCoop.cooperative = false;
  LaunchLimits small;  // a share of a device (MPS), one block of each at a time per SM
  small.cooperative = true;
  small.sms = 4;
  small.passResident = 4;
  small.compactResident = 4;
  for (const SelectorKind kind : kKinds)
    for (const size_t n : {size_t{1}, size_t{5000}, size_t{1} << 20, size_t{25600000}})
      for (const double rho : {0.001, 0.01, 0.3}) {
        SelectorOptions o;
        o.density = rho;
        const SelectPlan p = makeSelectPlan(kind, o, n, 0);
        const SelectLayout l = makeSelectLayout(p, 256, 1024, 1024);
        CAPTURE(compress::selectorName(kind), n, rho);
        for (const LaunchLimits& lim : {h100, noCoop, small}) {
          const SelectGrids per = selectGrids(p, l, lim, /*perPass=*/true);
          const SelectGrids g = selectGrids(p, l, lim, /*perPass=*/false);
          // The shapes that ran on an H100: a launch per pass, a compaction block per tile.
          REQUIRE(per.coopBlocks == 0);
          REQUIRE(per.compactBlocks == std::max<size_t>(l.compactTiles, 1));
          REQUIRE(per.passBlocks == g.passBlocks);
          REQUIRE(g.passBlocks >= 1);
          REQUIRE(g.passBlocks <= 1024);
          if (p.candCap > 0 && l.fusedTiles >= 256) REQUIRE(g.passBlocks >= 256);  // a fallback's full passes
          // The cooperative grid fits on the device at once, beside other work.
          if (!lim.cooperative) REQUIRE(g.coopBlocks == 0);
          if (lim.cooperative) {
            REQUIRE(g.coopBlocks >= 1);
            REQUIRE(g.coopBlocks <= g.passBlocks);
            REQUIRE(g.coopBlocks <= lim.passResident);
            REQUIRE(g.coopBlocks <= 2 * lim.sms);
          }
          // The compaction: resident at once (its blocks wait on each other's
          // tiles through the look-back), never more than the tiles there are,
          // and a block per tile of the candidate list where that fits.
          REQUIRE(g.compactBlocks >= 1);
          REQUIRE(g.compactBlocks <= std::max<size_t>(l.compactTiles, 1));
          REQUIRE(g.compactBlocks <= lim.compactResident);
          const size_t want = std::min<size_t>(
              {p.candCap > 0 ? tilesFor(p.candCap) : lim.compactResident, lim.compactResident, l.compactTiles});
          REQUIRE(g.compactBlocks >= std::max<size_t>(want, 1));
        }
      }
  // The figures behind the choice, at n = 25.6 M on an H100: 256 pass blocks
  // with a list (was 1024 without), a cooperative grid of 256 (2 per SM would
  // allow 264), a compaction grid of 132 at k = 25,600 against 6,250 tiles.
  SelectorOptions o;
  o.density = 0.001;
  const SelectPlan p = makeSelectPlan(SelectorKind::kGaussiank, o, 25600000, 0);
  const SelectLayout l = makeSelectLayout(p, 256, 1024, 1024);
  const SelectGrids g = selectGrids(p, l, h100, false);
  REQUIRE(l.compactTiles == 6250);
  REQUIRE(g.passBlocks == 256);
  REQUIRE(g.coopBlocks == 256);
  REQUIRE(g.compactBlocks == 132);
}

}  // namespace mgs::cuda
