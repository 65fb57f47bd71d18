#include "select_plan.h"

#include <algorithm>
#include <cmath>

#include "compress/cpu_passes.h"

namespace mgs::cuda {
namespace {
size_t alignUp(size_t b) { return (b + kLayoutAlign - 1) / kLayoutAlign * kLayoutAlign; }
}  // namespace

SelectPlan makeSelectPlan(compress::SelectorKind kind, const compress::SelectorOptions& o, size_t n, uint64_t step) {
  using compress::SelectorKind;
  SelectPlan p;
  p.kind = static_cast<int>(kind);
  p.nonFinitePolicy = static_cast<int>(o.nonFinite);
  p.n = n;
  p.k = compress::kForDensity(n, o.density);
  p.dense = kind == SelectorKind::kNone || p.k >= n;
  p.cfg = compress::searchConfig(kind, o, p.k);
  p.passLaunches = p.cfg.maxPasses;
  p.perPassLaunches = o.gpuPerPassLaunches;
  if (n == 0 || p.dense) return p;
  p.quantile = compress::normalQuantileAbs(o.density / 2);
  p.logNK = std::log(static_cast<double>(n) / static_cast<double>(p.k));
  if (kind == SelectorKind::kRandomk) {
    p.seed = compress::stepSeed(o.seed, step);
    p.randomLo = compress::randomStartKey(n, p.k);
  }
  if (kind == SelectorKind::kDgc) {
    const compress::DgcSample ds = compress::dgcSample(n, o.density, o.seed, step);
    p.dgcStart = ds.start;
    p.dgcStride = ds.stride;
    p.dgcCount = ds.count;
    p.dgcKSample = ds.kSample;
    p.dgcCapacity = compress::dgcSampleCapacity(n, o.density);
  }
  // The candidate list, decided like the CPU's candidateCapacity (density only).
  constexpr size_t kBig = size_t{1} << 30;
  const double highShare =
      static_cast<double>(compress::searchConfig(kind, o, kBig).kHigh) / static_cast<double>(kBig) * o.density;
  if (kCandSlack * highShare > 0.25) return p;
  p.candCap = kCandSlack * p.cfg.kHigh + 4096;
  p.candShare = static_cast<double>(kCandTarget * p.cfg.kHigh) / static_cast<double>(n);
  if (kind == SelectorKind::kRandomk) {
    p.fixedTc = static_cast<uint32_t>(std::max(2.0, std::floor(4294967296.0 * (1.0 - p.candShare))));
  } else {
    p.sampleFloor = true;
    p.sampled = std::min<size_t>(n, compress::cpu::kSampleMax);
  }
  return p;
}

SelectLayout makeSelectLayout(const SelectPlan& p, size_t stateBytes, size_t tileBytes32, size_t tileBytes64) {
  SelectLayout l;
  l.fusedTiles = tilesFor(p.n);
  l.compactTiles = tilesFor(std::max<size_t>(p.n, p.candCap));
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += alignUp(std::max<size_t>(bytes, 1));
    return at;
  };
  l.state = take(stateBytes);
  l.hist = take(sizeof(uint32_t) * (compress::kHistBins + 1));
  l.partials = take(sizeof(TileStats) * std::max<size_t>(l.fusedTiles, 1));
  l.sample = take(sizeof(uint32_t) * std::max<size_t>(p.sampled, p.dgcCapacity));
  l.tiles32 = take(tileBytes32);
  l.tiles64 = take(tileBytes64);
  l.candValues = take(sizeof(float) * p.candCap);
  l.candIndices = take(sizeof(uint32_t) * p.candCap);
  l.total = off;
  return l;
}

SelectGrids selectGrids(const SelectPlan& p, const SelectLayout& l, const LaunchLimits& lim, bool forcePerPass) {
  SelectGrids g;
  const bool perPass = forcePerPass || p.perPassLaunches;
  // The passes' loop is grid-strided, so any number of blocks is correct.
  // Sized for the candidate list where there is one: with a launch per pass,
  // the launches after the search is done still run, and 1024 blocks cost
  // ~4 us each on an H100 even when they return at once; a fallback to full
  // passes runs on at least 256 blocks.
  size_t pass = std::min<size_t>(1024, l.fusedTiles);
  if (p.candCap > 0)
    pass = std::min<size_t>(pass, std::max<size_t>(256, (p.candCap + kTileThreads * 8 - 1) / (kTileThreads * 8)));
  g.passBlocks = static_cast<unsigned>(std::max<size_t>(pass, 1));
  // A cooperative grid starts only when all of it fits: at most two blocks
  // per multiprocessor, so it fits beside what else runs (NCCL's kernels,
  // other ranks' selections on a shared GPU).
  if (!perPass && lim.cooperative && lim.passResident > 0 && lim.sms > 0)
    g.coopBlocks = std::min({g.passBlocks, lim.passResident, 2 * lim.sms});
  // The compaction: a block per tile of the candidate list, at least one per
  // multiprocessor, at most what is resident at once, never more than the
  // buffer's tiles; blocks loop over tiles, so a full-buffer fallback is
  // covered too.
  size_t compact = l.compactTiles;
  if (!perPass) {
    const size_t resident = std::max<size_t>(lim.compactResident, 1);
    compact = p.candCap > 0 ? tilesFor(p.candCap) : resident;
    compact = std::min(std::max<size_t>(compact, lim.sms), resident);
    compact = std::min(compact, l.compactTiles);
  }
  g.compactBlocks = static_cast<unsigned>(std::max<size_t>(compact, 1));
  return g;
}

}  // namespace mgs::cuda
