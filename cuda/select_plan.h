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
  bool perPassLaunches = false;  // SelectorOptions::gpuPerPassLaunches (MGS_GPU_LAUNCHES=per-pass)
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
// The shapes that ran on an H100 (a launch per pass, a compaction block per
// tile of the buffer) when p.perPassLaunches (MGS_GPU_LAUNCHES=per-pass) or
// forcePerPass (tests and benchmarks compare both shapes in one run).
struct SelectGrids {
  unsigned passBlocks = 1, coopBlocks = 0, compactBlocks = 1;
};
SelectGrids selectGrids(const SelectPlan& p, const SelectLayout& l, const LaunchLimits& lim, bool forcePerPass);

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

// ---- The launch protocol's per-item decisions ------------------------------
// Shared by the kernels (cuda/select_search.cuh) and their CPU emulation
// under random block interleavings (tests/gpu/launch_emulation_test.cc).

// The key of entry `index`; value() gives its accumulated value, read only
// by the magnitude selectors (randomk's key is its index's alone).
template <typename Value>
MGS_PLAN_FN uint32_t selectKey(const SelectPlan& p, uint32_t index, Value value) {
  return p.kind == static_cast<int>(compress::SelectorKind::kRandomk) ? compress::randomKey(p.seed, index)
                                                                      : compress::magnitudeKey(value());
}

// A histogram pass reads the candidate list (else the whole buffer) while
// the list holds every key of the search's window.
MGS_PLAN_FN bool passUsesCandidates(bool fromCand, const compress::Window& w, uint32_t tc) {
  return fromCand && w.lo >= tc;
}

// Compaction: 1 = above keyAll (always sent), 2 = a tie (sent while fewer
// than `quota` ties precede it), 0 = not selected.
MGS_PLAN_FN uint32_t compactClass(uint32_t key, const compress::Selection& sel) {
  if (key >= sel.keyAll) return 1u;
  if (sel.hasTie && key >= sel.keyTie) return 2u;
  return 0u;
}
// A tile's scan value counts both classes in one 64-bit word.
MGS_PLAN_FN unsigned long long compactCount(uint32_t cls) {
  return cls == 1u ? (1ull << 32) : cls == 2u ? 1ull : 0ull;
}
// Output slot of an item of class cls, given the items of each class before
// it (`above`, `ties`, both advanced); false: a tie past the quota, not sent.
// The output is "every key >= keyAll plus the first quota ties", by index.
MGS_PLAN_FN bool compactSlot(uint32_t cls, uint64_t quota, uint64_t& above, uint64_t& ties, uint64_t* pos) {
  if (cls == 1u) {
    *pos = above + (ties < quota ? ties : quota);
    ++above;
    return true;
  }
  const bool take = ties < quota;
  *pos = above + ties;
  ++ties;
  return take;
}
// Entries written once every item is placed.
MGS_PLAN_FN uint64_t compactWritten(uint64_t above, uint64_t ties, uint64_t quota) {
  return above + (ties < quota ? ties : quota);
}

}  // namespace mgs::cuda
