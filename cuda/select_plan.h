// What the GPU selector decides without looking at the data, and the small
// decisions it takes on the device, as plain code that compiles for the host
// too. select_kernels.cu runs these functions on the device; the CPU tests
// (tests/gpu/select_plan_test.cc) run them on the host against the CPU
// selector, so the logic of the GPU port is checked where no GPU exists.
//
// The GPU path follows the CPU's one-pass design (src/compress/selector.cc):
//   sample of acc -> candidate floor tc -> one fused pass (acc, statistics,
//   ordered candidate list of key >= tc) -> threshold search on the list
//   (full-buffer passes only if the window goes below tc or the list
//   overflowed) -> ordered compaction.
// The GPU keeps one candidate list of candCap entries (no per-thread regions):
// its order comes from a decoupled look-back scan, so the list is ascending by
// index like the CPU's regions read in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <math.h>

#include "compress/selector.h"
#include "compress/selector_plan.h"
#include "compress/threshold_search.h"

namespace mgs::cuda {

// Tile of the fused pass and of the compaction: kTileThreads threads, each
// kTileItems consecutive elements (blocked, so a thread's items are in index order).
constexpr int kTileThreads = 256;
constexpr int kTileItems = 16;
constexpr size_t kTileSize = size_t{kTileThreads} * kTileItems;

// Candidate sizing as on the CPU (selector.cc): aim at kCandTarget * kHigh
// entries above tc; the list holds kCandSlack * kHigh + 4096; no list when
// kCandSlack * kHigh / n > 1/4 (decided on the density alone).
constexpr size_t kCandTarget = 3;
constexpr size_t kCandSlack = 8;
constexpr size_t kCandMinSample = 16;

struct SelectPlan {
  int kind = 0;             // compress::SelectorKind
  int nonFinitePolicy = 0;  // compress::NonFinitePolicy
  uint64_t n = 0, k = 0;
  bool dense = false;          // none, or k >= n: take everything
  compress::SearchConfig cfg;  // the selector's search band and budget
  double quantile = 0;         // gaussiank: |Phi^-1(rho/2)|
  double logNK = 0;            // ldte/topk: ln(n/k)
  uint64_t candCap = 0;        // entries of the candidate list; 0: no list
  double candShare = 0;        // kCandTarget * kHigh / n
  bool sampleFloor = false;    // tc from the sample (magnitude selectors with a list)
  uint64_t sampled = 0;        // sample size, min(n, kSampleMax)
  uint32_t fixedTc = 0;        // randomk: tc without a sample
  uint64_t seed = 0;           // randomk / dgc: stepSeed(options.seed, step)
  uint32_t randomLo = 0;       // randomk: first window
  uint64_t dgcStart = 0, dgcStride = 1, dgcCount = 0, dgcKSample = 0;
  uint64_t dgcCapacity = 0;  // largest dgcCount for this n (workspace)
  int passLaunches = 0;      // histogram pass launches (cfg.maxPasses)
};

// Host: everything data-independent for one select() on n elements.
SelectPlan makeSelectPlan(compress::SelectorKind kind, const compress::SelectorOptions& o, size_t n, uint64_t step);

// What a device-side select() leaves for whoever wants it (tests, benchmarks,
// the timeline): written by the last kernel of the call, read only after the
// stream has passed it. failure: 0, or an mgs::Code (kNumeric: non-finite
// input under NonFinitePolicy::kError; kInternal: a broken invariant).
struct DeviceSelectInfo {
  uint64_t count, k, nonFinite;
  double mean, stddev, meanAbs;
  float maxAbs, threshold;
  int32_t passes, inBand, exact, failure;
};

// Statistics of one tile (fused pass) before the fixed-order reduction.
struct TileStats {
  double sum, sumSq, sumAbs;
  float maxAbs;
  uint32_t nonFinite;
};

// Device workspace, carved the same way for the size query and the call.
struct SelectLayout {
  size_t state = 0, hist = 0, partials = 0, sample = 0, tiles32 = 0, tiles64 = 0, candValues = 0, candIndices = 0,
         total = 0;
  size_t fusedTiles = 0, compactTiles = 0;
};
// stateBytes: sizeof the kernels' state block; tileBytes32/64(t): CUB's tile
// status storage for t tiles (given as numbers so this stays host-testable).
SelectLayout makeSelectLayout(const SelectPlan& p, size_t stateBytes, size_t tileBytes32, size_t tileBytes64);
constexpr size_t kLayoutAlign = 256;

// What the launch shapes depend on, asked of the device once
// (select_kernels.cu): cooperative launches allowed, multiprocessors, and how
// many blocks of the pass-loop and compaction kernels are resident at once.
struct LaunchLimits {
  bool cooperative = false;
  unsigned sms = 0, passResident = 0, compactResident = 0;
};

// Grids of one select() call.
//   passBlocks:    a launch per histogram pass (the shape that ran on an H100;
//                  also the fallback where a cooperative launch is refused)
//   coopBlocks:    the one cooperative launch of every pass; 0 = none
//   compactBlocks: the compaction, whose blocks take tiles from a counter
// perPass: the shapes that ran on an H100 (a launch per pass, a compaction
// block per tile of the buffer), for tests and benchmarks.
struct SelectGrids {
  unsigned passBlocks = 1, coopBlocks = 0, compactBlocks = 1;
};
SelectGrids selectGrids(const SelectPlan& p, const SelectLayout& l, const LaunchLimits& lim, bool perPass);

#if defined(__CUDACC__)
#define MGS_PLAN_FN __host__ __device__ inline
#else
#define MGS_PLAN_FN inline
#endif

MGS_PLAN_FN size_t tilesFor(size_t items) { return (items + kTileSize - 1) / kTileSize; }

// The sample's share: want-th largest sample key is the floor (CPU: selector.cc).
MGS_PLAN_FN uint64_t candidateWant(const SelectPlan& p, uint64_t finite) {
  const double w = ceil(p.candShare * static_cast<double>(finite));
  const uint64_t want = static_cast<uint64_t>(w);
  return want > kCandMinSample ? want : kCandMinSample;
}

// compress::moments, op for op (IEEE division and sqrt: bitwise the same on the device).
MGS_PLAN_FN compress::Moments planMoments(const compress::AccStats& s, uint64_t n) {
  compress::Moments m;
  const uint64_t finite = n - s.nonFinite;
  if (finite == 0) return m;
  m.mean = s.sum / finite;
  m.meanAbs = s.sumAbs / finite;
  if (finite > 1) {
    const double var = (s.sumSq - s.sum * m.mean) / static_cast<double>(finite - 1);
    m.stddev = var > 0 ? sqrt(var) : 0.0;
  }
  return m;
}

// compress::startKey with the transcendental parts precomputed on the host.
MGS_PLAN_FN uint32_t planStartKey(const SelectPlan& p, const compress::Moments& m) {
  const double t = p.kind == static_cast<int>(compress::SelectorKind::kGaussiank) ? m.mean + p.quantile * m.stddev
                                                                                  : m.meanAbs * p.logNK;
  return compress::thresholdKey(t / 8);
}

// The search as the CPU selector starts it (selector.cc, after the fused
// pass): top from max|acc|, lo from the estimate (or dgc's sample key, or
// randomk's start), raised to the candidate floor tc when there is one.
MGS_PLAN_FN compress::ThresholdSearch planSearch(const SelectPlan& p, float maxAbs, const compress::Moments& m,
                                                 uint32_t tc, uint32_t dgcKey) {
  using compress::SelectorKind;
  compress::SearchConfig cfg = p.cfg;
  const uint64_t top = uint64_t{compress::magnitudeKey(maxAbs)} + (maxAbs > 0 ? 1 : 0);
  uint32_t lo = 1;
  bool roundLo = true;
  if (p.kind == static_cast<int>(SelectorKind::kRandomk)) {
    lo = p.randomLo;
  } else if (p.kind == static_cast<int>(SelectorKind::kDgc)) {
    lo = dgcKey > 1 ? dgcKey : 1;
    roundLo = false;
  } else {
    lo = planStartKey(p, m);
  }
  const uint64_t searchTop = p.kind == static_cast<int>(SelectorKind::kRandomk) ? (uint64_t{1} << 32) : top;
  if (tc && roundLo && searchTop > 1) {
    const uint64_t capped = lo < searchTop - 1 ? lo : searchTop - 1;
    const uint32_t r = compress::roundDownToOctave(static_cast<uint32_t>(capped));
    lo = r > tc ? r : tc;
    roundLo = false;
    cfg.stopKey = tc;
  }
  return compress::ThresholdSearch(cfg, searchTop, lo, roundLo);
}

}  // namespace mgs::cuda
