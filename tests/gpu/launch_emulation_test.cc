// The GPU selector's launch protocols on the CPU, block by block, under
// random interleavings of the blocks (seeded, so a failure replays).
//
// What runs on a GPU in parallel runs here as blocks that a scheduler
// advances one step at a time, in a random order, with only `resident`
// blocks started at once (others start in a random order as blocks exit):
//   passes      each block's histogram of its grid-strided items, added to
//               the global histogram in chunks, a ticket, the last block's
//               search step (read-and-clear, ThresholdSearch::step, state
//               written, ticket reset); then either a grid barrier and the
//               next pass (passLoopKernel: one cooperative launch) or the end
//               of the launch (passKernel: a launch per pass)
//   compaction  blocks take tiles from a counter (compactKernel), publish
//               their tile's count, look back over the tiles before it
//               (waiting while one has published nothing, as CUB's decoupled
//               look-back does), then place their items
// with the per-item decisions the kernels call (select_plan.h: selectKey,
// passUsesCandidates, compactClass, compactCount, compactSlot,
// compactWritten). The front (sample floor, fused pass, plan) is
// select_emulation.h's. Every interleaving must give, bit for bit, what the
// CPU selector gives (whose equality with the per-pass shapes ran on an H100),
// and the default shapes the same as the per-pass ones.
// What this cannot check: CUDA itself (memory ordering, the barrier, CUB's
// look-back); tests/gpu/compress_gpu_test.cc compares the shapes on a GPU.
#include <algorithm>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "select_emulation.h"

namespace mgs::cuda {
namespace {

using compress::SelectorKind;
using compress::SelectorOptions;
using emulation::Front;
using emulation::Result;

constexpr int kBins = compress::kHistBins + 1;

enum class Outcome { kRan, kWaiting, kExited };

// Runs blocks [0, count) of one launch; step(b) advances block b by one step.
// False when every started block waits on something no block can do: the
// launch would hang on a GPU.
template <typename Step>
bool runBlocks(std::mt19937_64& rng, unsigned count, unsigned resident, Step step) {
  std::vector<unsigned> pending(count);
  std::iota(pending.begin(), pending.end(), 0u);
  std::shuffle(pending.begin(), pending.end(), rng);  // start order: any
  std::vector<unsigned> running;
  std::vector<size_t> order;
  for (;;) {
    while (running.size() < std::max(resident, 1u) && !pending.empty()) {
      running.push_back(pending.back());
      pending.pop_back();
    }
    if (running.empty()) return true;
    order.resize(running.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    bool moved = false;
    for (const size_t at : order) {
      const Outcome o = step(running[at]);
      if (o == Outcome::kWaiting) continue;
      if (o == Outcome::kExited) running.erase(running.begin() + static_cast<std::ptrdiff_t>(at));
      moved = true;
      break;
    }
    if (!moved) return false;
  }
}

// ---- Histogram passes ---------------------------------------------------------
struct PassDevice {
  compress::ThresholdSearch search;
  bool fromCand = false;
  int fullPasses = 0;
  std::vector<uint32_t> hist = std::vector<uint32_t>(kBins, 0);
  uint32_t ticket = 0;
  unsigned arrived = 0, generation = 0;  // the grid barrier
};

struct PassBlock {
  enum Phase { kStart, kAdd, kTicket, kFinish, kArrive, kWait } phase = kStart;
  compress::ThresholdSearch search;
  bool useCand = false, last = false;
  std::vector<uint32_t> h;
  int cursor = 0, pass = 0, exitPass = -1;
  unsigned gen = 0;
};

class PassEmulation {
 public:
  PassEmulation(const Front& f, std::mt19937_64& rng) : f_(f), rng_(rng) {
    dev_.search = f.search;
    dev_.fromCand = f.fromCand;
  }

  // One step of block b of a grid of g; coop: the pass loop with barriers.
  Outcome step(PassBlock& blk, unsigned b, unsigned g, bool coop) {
    const SelectPlan& p = f_.p;
    switch (blk.phase) {
      case PassBlock::kStart: {
        if (blk.pass >= p.passLaunches) return exitAt(blk);
        blk.search = dev_.search;
        blk.useCand = passUsesCandidates(dev_.fromCand, blk.search.window(), f_.tc);
        if (blk.search.done()) return exitAt(blk);
        const compress::Window w = blk.search.window();
        blk.h.assign(kBins, 0);
        const uint64_t items = blk.useCand ? f_.numCand : p.n;
        const uint64_t stride = uint64_t{g} * kTileThreads;
        for (uint64_t j0 = uint64_t{b} * kTileThreads; j0 < items; j0 += stride)
          for (uint64_t j = j0; j < std::min<uint64_t>(j0 + kTileThreads, items); ++j) {
            const uint32_t key = blk.useCand ? selectKey(p, f_.candIndices[j], [&] { return f_.candValues[j]; })
                                             : selectKey(p, static_cast<uint32_t>(j), [&] { return f_.r[j]; });
            const int bin = compress::binOf(key, w);
            if (bin >= 0) ++blk.h[bin];
          }
        blk.cursor = 0;
        blk.phase = PassBlock::kAdd;
        return Outcome::kRan;
      }
      case PassBlock::kAdd: {  // atomicAdd of the shared histogram, a random share at a time
        const int end = std::min<int>(kBins, blk.cursor + 1 + static_cast<int>(rng_() % 700));
        for (int i = blk.cursor; i < end; ++i) dev_.hist[i] += blk.h[i];
        blk.cursor = end;
        if (blk.cursor == kBins) blk.phase = PassBlock::kTicket;
        return Outcome::kRan;
      }
      case PassBlock::kTicket:
        blk.last = dev_.ticket++ == g - 1;
        blk.phase = blk.last ? PassBlock::kFinish : coop ? PassBlock::kArrive : PassBlock::kStart;
        if (!blk.last && !coop) return exitAt(blk);
        return Outcome::kRan;
      case PassBlock::kFinish: {
        std::vector<uint64_t> total(kBins);
        for (int i = 0; i < kBins; ++i) total[i] = std::exchange(dev_.hist[i], 0u);
        blk.search.step(compress::summarizeHistogram(total.data(), blk.search.config().k));
        dev_.search = blk.search;
        if (!blk.useCand) {
          ++dev_.fullPasses;
          dev_.fromCand = false;
        }
        dev_.ticket = 0;
        ++finishes_;
        if (!coop) return exitAt(blk);
        blk.phase = PassBlock::kArrive;
        return Outcome::kRan;
      }
      case PassBlock::kArrive:
        blk.gen = dev_.generation;
        if (++dev_.arrived == g) {
          dev_.arrived = 0;
          ++dev_.generation;
        }
        blk.phase = PassBlock::kWait;
        return Outcome::kRan;
      case PassBlock::kWait:
        if (dev_.generation == blk.gen) return Outcome::kWaiting;
        ++blk.pass;
        blk.phase = PassBlock::kStart;
        return Outcome::kRan;
    }
    return Outcome::kExited;
  }

  // passLoopKernel: one cooperative launch of g blocks, all resident.
  void cooperative(unsigned g) {
    std::vector<PassBlock> blocks(g);
    REQUIRE(runBlocks(rng_, g, g, [&](unsigned b) { return step(blocks[b], b, g, true); }));
    // passStep's answer is the same in every block: all leave at one pass,
    // so none waits at a barrier that the others skipped.
    for (const PassBlock& blk : blocks) REQUIRE(blk.exitPass == blocks[0].exitPass);
  }

  // passKernel x passLaunches: g blocks each, `resident` at a time.
  void perPass(unsigned g, unsigned resident) {
    for (int launch = 0; launch < f_.p.passLaunches; ++launch) {
      std::vector<PassBlock> blocks(g);
      REQUIRE(runBlocks(rng_, g, resident, [&](unsigned b) { return step(blocks[b], b, g, false); }));
    }
  }

  const PassDevice& device() const { return dev_; }
  int finishes() const { return finishes_; }

 private:
  Outcome exitAt(PassBlock& blk) {
    blk.exitPass = blk.pass;
    return Outcome::kExited;
  }
  const Front& f_;
  std::mt19937_64& rng_;
  PassDevice dev_;
  int finishes_ = 0;
};

// ---- Compaction -------------------------------------------------------------------
struct TileStatus {
  enum Kind { kInvalid, kPartial, kInclusive } kind = kInvalid;
  unsigned long long value = 0;
};

struct CompactBlock {
  enum Phase { kTake, kPublish, kLookBack, kWrite } phase = kTake;
  int tile = -1, cursor = 0;
  unsigned long long agg = 0, excl = 0;
  std::vector<uint32_t> cls, idx;
};

struct CompactOutput {
  bool finished = false;  // false: the launch would hang
  std::vector<float> values, r;
  std::vector<uint32_t> indices;
  uint64_t written = 0;
};

// compactKernel with `blocks` blocks, `resident` at a time. byBlockIndex:
// tile = blockIdx instead of the counter (the emulation's own check: that
// order can wait on a block that has not started).
CompactOutput compact(const Front& f, const compress::Selection& sel, bool cand, unsigned blocks, unsigned resident,
                      std::mt19937_64& rng, bool byBlockIndex = false) {
  const SelectPlan& p = f.p;
  CompactOutput out;
  out.r = f.r;
  out.values.assign(std::max<size_t>(p.n, 1), 0.0f);
  out.indices.assign(std::max<size_t>(p.n, 1), 0u);
  const uint64_t items = cand ? f.numCand : p.n;
  const int needed = static_cast<int>(tilesFor(items));
  std::vector<TileStatus> status(std::max(needed, 1));
  uint32_t next = 0;
  const uint64_t quota = sel.hasTie ? sel.quota : 0;
  std::vector<CompactBlock> bs(blocks);
  auto step = [&](unsigned b) -> Outcome {
    CompactBlock& blk = bs[b];
    switch (blk.phase) {
      case CompactBlock::kTake: {
        if (static_cast<int>(b) >= needed) return Outcome::kExited;  // never takes a tile
        if (byBlockIndex) {
          if (blk.tile >= 0) return Outcome::kExited;
          blk.tile = static_cast<int>(b);
        } else {
          blk.tile = static_cast<int>(next++);
        }
        if (blk.tile >= needed) return Outcome::kExited;
        blk.cls.clear();
        blk.idx.clear();
        blk.agg = 0;
        const uint64_t q0 = uint64_t(blk.tile) * kTileSize;
        for (uint64_t q = q0; q < std::min<uint64_t>(q0 + kTileSize, items); ++q) {
          const uint32_t i = cand ? f.candIndices[q] : static_cast<uint32_t>(q);
          const uint32_t c = compactClass(selectKey(p, i, [&] { return cand ? f.candValues[q] : out.r[i]; }), sel);
          blk.cls.push_back(c);
          blk.idx.push_back(i);
          blk.agg += compactCount(c);
        }
        blk.phase = CompactBlock::kPublish;
        return Outcome::kRan;
      }
      case CompactBlock::kPublish:
        blk.excl = 0;
        if (blk.tile == 0) {
          status[0] = TileStatus{TileStatus::kInclusive, blk.agg};
          blk.phase = CompactBlock::kWrite;
        } else {
          status[blk.tile] = TileStatus{TileStatus::kPartial, blk.agg};
          blk.cursor = blk.tile - 1;
          blk.phase = CompactBlock::kLookBack;
        }
        return Outcome::kRan;
      case CompactBlock::kLookBack: {
        const TileStatus s = status[blk.cursor];
        if (s.kind == TileStatus::kInvalid) return Outcome::kWaiting;
        blk.excl += s.value;
        if (s.kind == TileStatus::kInclusive) {
          status[blk.tile] = TileStatus{TileStatus::kInclusive, blk.excl + blk.agg};
          blk.phase = CompactBlock::kWrite;
        } else {
          --blk.cursor;
        }
        return Outcome::kRan;
      }
      case CompactBlock::kWrite: {
        uint64_t above = blk.excl >> 32, ties = blk.excl & 0xffffffffull;
        for (size_t j = 0; j < blk.cls.size(); ++j) {
          uint64_t pos = 0;
          if (blk.cls[j] == 0 || !compactSlot(blk.cls[j], quota, above, ties, &pos)) continue;
          const uint32_t i = blk.idx[j];
          out.values[pos] = out.r[i];
          out.indices[pos] = i;
          out.r[i] = 0.0f;
        }
        if (blk.tile == needed - 1) out.written = compactWritten(above, ties, quota);
        blk.phase = CompactBlock::kTake;
        return Outcome::kRan;
      }
    }
    return Outcome::kExited;
  };
  out.finished = runBlocks(rng, blocks, resident, step);
  return out;
}

// ---- One select() call in either shape ---------------------------------------------------
struct Shape {
  bool coop;
  unsigned passBlocks, compactBlocks, passResident, compactResident;
};

Shape shapeFor(const SelectPlan& p, const LaunchLimits& lim, bool perPass) {
  const SelectLayout l = makeSelectLayout(p, 256, 1024, 1024);
  const SelectGrids g = selectGrids(p, l, lim, perPass);
  Shape s;
  s.coop = g.coopBlocks > 0;
  s.passBlocks = s.coop ? g.coopBlocks : g.passBlocks;
  s.compactBlocks = g.compactBlocks;
  s.passResident = s.coop ? g.coopBlocks : lim.passResident;
  s.compactResident = lim.compactResident;
  return s;
}

struct Run {
  Result result;
  int fullPasses = 0, finishes = 0;
  bool fromCand = false;
};

Run select(const Front& f, const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  PassEmulation passes(f, rng);
  if (shape.coop)
    passes.cooperative(shape.passBlocks);
  else
    passes.perPass(shape.passBlocks, shape.passResident);
  const PassDevice& dev = passes.device();
  REQUIRE(dev.search.done());  // finishKernel: else kInternal
  const compress::Selection sel = dev.search.selection();
  Run run;
  run.fullPasses = dev.fullPasses;
  run.finishes = passes.finishes();
  run.fromCand = dev.fromCand;
  Result& res = run.result;
  if (sel.count == 0) {  // compactKernel returns at once
    res.residual = f.r;
    res.values.assign(1, 0.0f);
    res.indices.assign(1, 0u);
    return run;
  }
  const CompactOutput c = compact(f, sel, dev.fromCand, shape.compactBlocks, shape.compactResident, rng);
  REQUIRE(c.finished);
  REQUIRE(c.written == sel.count);  // finishKernel: else kInternal
  res.count = c.written;
  res.values = c.values;
  res.indices = c.indices;
  res.residual = c.r;
  return run;
}

const SelectorKind kSparseKinds[] = {SelectorKind::kTopk, SelectorKind::kGaussiank, SelectorKind::kLdte,
                                     SelectorKind::kDgc, SelectorKind::kRandomk};

LaunchLimits h100Limits() {
  LaunchLimits l;
  l.cooperative = true;
  l.sms = 132;
  l.passResident = 4 * 132;
  l.compactResident = 5 * 132;
  return l;
}

// A small share of a device: few blocks, so each loops over many tiles and
// passes, and blocks start late.
LaunchLimits smallLimits() {
  LaunchLimits l;
  l.cooperative = true;
  l.sms = 2;
  l.passResident = 3;
  l.compactResident = 3;
  return l;
}

}  // namespace

TEST_CASE("gpu launch emulation: both shapes select the CPU's bits under any block interleaving", "[gpu][plan]") {
  using compress::test::Dist;
  const size_t n = (size_t{1} << 17) + 5;  // 33 tiles of the fused pass
  const auto x = compress::test::makeData(Dist::kStudentT3, n, 77);
  const auto r0 = compress::test::makeData(Dist::kNormal, n, 78, 1e-4f);
  const std::vector<float> same(n, 0.5f);  // equal magnitudes: the list overflows, full passes and compaction
  const std::vector<float> zero(n, 0.0f);
  struct Case {
    const char* name;
    const std::vector<float>* x;
    const std::vector<float>* r;
    double density;
  };
  const Case cases[] = {{"list, rho 0.001", &x, &r0, 0.001},
                        {"list, rho 0.01", &x, &r0, 0.01},
                        {"no list, rho 0.3", &x, &r0, 0.3},
                        {"overflowing list", &same, &zero, 0.01}};
  int coopRuns = 0, multiTileCompactions = 0, fullPassRuns = 0;
  for (const Case& c : cases)
    for (const SelectorKind kind : kSparseKinds)
      for (const bool inPlace : {false, true}) {
        SelectorOptions o;
        o.density = c.density;
        o.seed = 9;
        CAPTURE(c.name, compress::selectorName(kind), inPlace);
        const Front f = emulation::emulateFront(kind, o, *c.x, inPlace, *c.r, 4);
        REQUIRE_FALSE(f.finished);
        const Result want = emulation::oracle(kind, o, *c.x, inPlace, *c.r, 4);
        for (const LaunchLimits& lim : {h100Limits(), smallLimits()}) {
          const Shape def = shapeFor(f.p, lim, false), per = shapeFor(f.p, lim, true);
          REQUIRE_FALSE(per.coop);
          for (uint64_t seed = 1; seed <= 3; ++seed) {
            CAPTURE(lim.sms, seed, def.passBlocks, def.compactBlocks);
            const Run a = select(f, def, seed * 1000 + 1);
            const Run b = select(f, per, seed * 1000 + 2);
            emulation::requireSame(a.result, want);
            emulation::requireSame(b.result, want);
            // One search, whatever the shape: the same passes over the same items.
            REQUIRE(a.fullPasses == b.fullPasses);
            REQUIRE(a.finishes == b.finishes);
            REQUIRE(a.fromCand == b.fromCand);
            coopRuns += def.coop;
            fullPassRuns += a.fullPasses > 0;
            const uint64_t items = a.fromCand ? f.numCand : f.p.n;
            multiTileCompactions += tilesFor(items) > def.compactBlocks;
          }
        }
      }
  // The cases reached what they are for: cooperative grids, compactions
  // where blocks loop over more tiles than there are blocks, full passes.
  CHECK(coopRuns > 0);
  CHECK(multiTileCompactions > 0);
  CHECK(fullPassRuns > 0);
}

TEST_CASE("gpu launch emulation: MGS_GPU_LAUNCHES=per-pass reaches the plan and picks the per-pass grids",
          "[gpu][plan]") {
  SelectorOptions o;
  o.density = 0.001;
  o.gpuPerPassLaunches = true;
  const SelectPlan p = makeSelectPlan(SelectorKind::kGaussiank, o, 25600000, 0);
  REQUIRE(p.perPassLaunches);
  const SelectLayout l = makeSelectLayout(p, 256, 1024, 1024);
  const SelectGrids g = selectGrids(p, l, h100Limits(), /*forcePerPass=*/false);
  REQUIRE(g.coopBlocks == 0);
  REQUIRE(g.compactBlocks == l.compactTiles);
  o.gpuPerPassLaunches = false;
  const SelectPlan d = makeSelectPlan(SelectorKind::kGaussiank, o, 25600000, 0);
  REQUIRE_FALSE(d.perPassLaunches);
  REQUIRE(selectGrids(d, l, h100Limits(), false).coopBlocks > 0);
}

TEST_CASE("gpu launch emulation: the counter's tile order never waits on a block that has not started",
          "[gpu][plan]") {
  // A full-buffer compaction of 33 tiles by 33 blocks, 3 resident at a time,
  // started in a random order. Taking tile = blockIdx can leave every started
  // block looking back at a tile whose block has not started (the emulation
  // must see that hang, or it could not see one at all); taking tiles from
  // the counter never does.
  using compress::test::Dist;
  const size_t n = (size_t{1} << 17) + 5;
  const auto x = compress::test::makeData(Dist::kLaplace, n, 5);
  const std::vector<float> r0(n, 0.0f);
  SelectorOptions o;
  o.density = 0.3;
  const Front f = emulation::emulateFront(SelectorKind::kTopk, o, x, false, r0, 0);
  std::mt19937_64 rng(11);
  PassEmulation passes(f, rng);
  passes.perPass(33, 33);
  const compress::Selection sel = passes.device().search.selection();
  REQUIRE(sel.count > 0);
  const unsigned blocks = static_cast<unsigned>(tilesFor(n));
  REQUIRE(blocks == 33);
  int hangs = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 a(seed), b(seed);
    hangs += !compact(f, sel, false, blocks, 3, a, /*byBlockIndex=*/true).finished;
    const CompactOutput c = compact(f, sel, false, blocks, 3, b);
    REQUIRE(c.finished);
    REQUIRE(c.written == sel.count);
  }
  CHECK(hangs > 0);
}

}  // namespace mgs::cuda
