#include "compress/selector.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "common/check.h"
#include "common/threads.h"
#include "compress/cpu_passes.h"
#include "compress/selector_plan.h"

namespace mgs::compress {
namespace {

struct NameKind {
  const char* name;
  SelectorKind kind;
};
constexpr NameKind kNames[] = {
    {"none", SelectorKind::kNone}, {"topk", SelectorKind::kTopk}, {"gaussiank", SelectorKind::kGaussiank},
    {"ldte", SelectorKind::kLdte}, {"dgc", SelectorKind::kDgc},   {"randomk", SelectorKind::kRandomk}};

constexpr size_t kAlign = 64;
size_t alignUp(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
size_t histBytes(int chunks) { return alignUp(sizeof(uint32_t) * (kHistBins + 1) * chunks); }

static_assert(cpu::kSampleMax * sizeof(uint32_t) <= sizeof(uint32_t) * (kHistBins + 1) * cpu::kMaxChunks,
              "the sample keys reuse the histogram workspace");

// One full-buffer histogram pass of the search's window, summed over chunks.
void fullHistogram(const ThresholdSearch& search, const cpu::KeySource& keys, size_t n, int chunks, int threads,
                   uint32_t* hist, uint64_t* total) {
  cpu::histogram(keys, n, search.window(), chunks, threads, hist);
  std::fill(total, total + kHistBins + 1, uint64_t{0});
  for (int c = 0; c < chunks; ++c)
    for (uint32_t b = 0; b <= kHistBins; ++b) total[b] += hist[c * (kHistBins + 1) + b];
}

// Candidate list sizing: the sample aims at ~kCandTarget * kHigh entries with
// key >= tc; a thread's region holds kCandSlack * kHigh + 4096 (all of them
// even when one thread's range holds every candidate), shrunk to 2/threads of
// that (+4096) on many threads so that the workspace stays ~2x one list.
constexpr size_t kCandTarget = 3;
constexpr size_t kCandSlack = 8;
constexpr size_t kCandMinSample = 16;

}  // namespace

Status parseSelectorKind(const std::string& name, SelectorKind* kind) {
  for (const auto& nk : kNames) {
    if (name == nk.name) {
      *kind = nk.kind;
      return Status::OK();
    }
  }
  return Status(Code::kInvalidArgument,
                "unknown compressor '" + name + "' (none, topk, gaussiank, ldte, dgc, randomk)");
}

const char* selectorName(SelectorKind kind) {
  for (const auto& nk : kNames)
    if (nk.kind == kind) return nk.name;
  return "invalid";
}

size_t kForDensity(size_t n, double density) {
  if (n == 0) return 0;
  const double f = std::floor(density * static_cast<double>(n));
  if (!(f >= 1)) return 1;
  return f >= static_cast<double>(n) ? n : static_cast<size_t>(f);
}

Status Selector::create(const std::string& name, const SelectorOptions& options, std::unique_ptr<Selector>* out) {
  SelectorKind kind;
  MGS_RETURN_IF_ERROR(parseSelectorKind(name, &kind));
  MGS_ENSURE(options.density > 0 && options.density <= 1, kInvalidArgument,
             "density must be in (0, 1], got " << options.density);
  MGS_ENSURE(options.bandEps >= 0 && options.bandEps <= 10, kInvalidArgument,
             "bandEps must be in [0, 10], got " << options.bandEps);
  MGS_ENSURE(options.maxPasses >= 1 && options.maxPasses <= 64, kInvalidArgument,
             "maxPasses must be in [1, 64], got " << options.maxPasses);
  out->reset(new Selector(kind, options));
  return Status::OK();
}

Selector::Selector(SelectorKind kind, const SelectorOptions& options) : kind_(kind), options_(options) {
  int t = options.numThreads;
  if (t <= 0) t = std::clamp(availableCores(), 1, kMaxAutoThreads);
  threads_ = std::max(t, 1);
}

size_t Selector::maxCount(size_t n) const {
  if (kind_ == SelectorKind::kNone) return n;
  const size_t k = kForDensity(n, options_.density);
  return std::min(n, searchConfig(kind_, options_, k).kHigh);
}

size_t Selector::candidateCapacity(size_t n) const {
  if (kind_ == SelectorKind::kNone || n == 0) return 0;
  // Dense (the candidates would not pay): decided on the density alone, so
  // that the capacity, like workspaceBytes(n), never shrinks as n grows.
  constexpr size_t kBig = size_t{1} << 30;
  const double highShare =
      static_cast<double>(searchConfig(kind_, options_, kBig).kHigh) / static_cast<double>(kBig) * options_.density;
  if (kCandSlack * highShare > 0.25) return 0;
  const size_t kHigh = searchConfig(kind_, options_, kForDensity(n, options_.density)).kHigh;
  const size_t all = kCandSlack * kHigh + 4096;
  return std::min(all, 2 * all / static_cast<size_t>(threads_) + 4096);
}

size_t Selector::workspaceBytes(size_t n) const {
  size_t b = histBytes(cpu::kMaxChunks);
  if (kind_ == SelectorKind::kDgc) b += alignUp(sizeof(uint32_t) * dgcSampleCapacity(n, options_.density));
  if (const size_t cap = candidateCapacity(n)) {
    b += alignUp(sizeof(size_t) * threads_);
    b += 2 * alignUp(sizeof(float) * cap * threads_);
  }
  return b;
}

Status checkSelectArgs(const SelectArgs& a, SelectResult* result) {
  MGS_ENSURE(result != nullptr, kInvalidArgument, "select: result is null");
  *result = SelectResult{};
  MGS_ENSURE(a.n < (size_t{1} << 32), kInvalidArgument,
             "select '" << a.name << "': n = " << a.n << " does not fit uint32 indices");
  MGS_ENSURE(a.dtype == MGS_FLOAT32 || a.dtype == MGS_FLOAT16 || a.dtype == MGS_BFLOAT16, kInvalidArgument,
             "select '" << a.name << "': dtype " << dtypeName(a.dtype) << " is not float32/float16/bfloat16");
  return Status::OK();
}

Status Selector::select(const SelectArgs& a, SelectResult* result) const {
  MGS_RETURN_IF_ERROR(checkSelectArgs(a, result));
  const size_t n = a.n;
  if (n == 0) {
    result->inBand = true;
    return Status::OK();
  }
  MGS_ENSURE(a.residual && a.outValues && a.outIndices, kInvalidArgument, "select '" << a.name << "': null buffer");
  MGS_ENSURE(a.workspace != nullptr && a.workspaceBytes >= workspaceBytes(n), kInvalidArgument,
             "select '" << a.name << "': workspace " << a.workspaceBytes << " < " << workspaceBytes(n) << " bytes");
  // The gradient: x as one part, the parts, or none (in place).
  GradientPart one;
  GradientParts xs = a.parts;
  if (a.parts.count > 0) {
    MGS_ENSURE(a.x == nullptr, kInvalidArgument, "select '" << a.name << "': both x and parts given");
    size_t total = 0;
    for (size_t j = 0; j < a.parts.count; ++j) {
      const GradientPart& p = a.parts.parts[j];
      MGS_ENSURE(p.dtype == MGS_FLOAT32 || p.dtype == MGS_FLOAT16 || p.dtype == MGS_BFLOAT16, kInvalidArgument,
                 "select '" << a.name << "': part " << j << " has dtype " << dtypeName(p.dtype)
                            << ", not float32/float16/bfloat16");
      MGS_ENSURE(p.data != nullptr || p.n == 0, kInvalidArgument, "select '" << a.name << "': part " << j << " is null");
      total += p.n;
    }
    MGS_ENSURE(total == n, kInvalidArgument,
               "select '" << a.name << "': the parts hold " << total << " values, n = " << n);
  } else if (a.x != nullptr) {
    one.data = a.x;
    one.dtype = a.dtype;
    one.n = n;
    xs = GradientParts{&one, 1};
  }
  // Where the old residual is read (SelectArgs::residualIn); acc goes to a.residual.
  const float* rin = xs.count > 0 && a.residualIn != nullptr ? a.residualIn : a.residual;
  const int chunks = cpu::chunksFor(n);
  const size_t k = kForDensity(n, options_.density);
  result->k = k;
  char* ws = static_cast<char*>(a.workspace);
  auto* hist = reinterpret_cast<uint32_t*>(ws);
  size_t wsOff = histBytes(cpu::kMaxChunks);
  uint32_t* dgcKeys = nullptr;
  if (kind_ == SelectorKind::kDgc) {
    dgcKeys = reinterpret_cast<uint32_t*>(ws + wsOff);
    wsOff += alignUp(sizeof(uint32_t) * dgcSampleCapacity(n, options_.density));
  }
  const SearchConfig cfgBase = searchConfig(kind_, options_, k);
  // Threads for this call: the budget, but one per kMinElementsPerThread
  // (a small buffer is not worth waking a team for). The candidate regions
  // keep the budget's layout; regions past the team stay empty.
  const int threads = threadsFor(n, threads_);

  // Candidate floor tc: magnitude selectors take it from a sample of acc
  // (nothing written): the key whose share of the sample is kCandTarget *
  // kHigh / n. randomk's keys are a hash of the index, uniform over 32 bits:
  // tc = 2^32 (1 - kCandTarget * k / n), no sample. 0 = no candidate list.
  uint32_t tc = 0;
  cpu::Candidates cand;
  const size_t cap = k < n ? candidateCapacity(n) : 0;
  if (cap > 0) {
    const double share = static_cast<double>(kCandTarget * cfgBase.kHigh) / static_cast<double>(n);
    if (kind_ == SelectorKind::kRandomk) {
      tc = static_cast<uint32_t>(std::max(2.0, std::floor(4294967296.0 * (1.0 - share))));
      cand.random = true;
      cand.seed = stepSeed(options_.seed, a.step);
    } else {
      auto* keys = hist;  // the histograms are not in use yet
      const size_t sampled = std::min(n, cpu::kSampleMax);
      const size_t finite = cpu::sampleKeys(xs, rin, n, threads, keys);
      const size_t want = std::max(kCandMinSample, static_cast<size_t>(std::ceil(share * finite)));
      if (want <= finite)  // then the want-th largest key is a finite entry's
        tc = std::max<uint32_t>(cpu::kthLargestKey(keys, sampled, want), 1);
    }
    if (tc) {
      cand.count = reinterpret_cast<size_t*>(ws + wsOff);
      wsOff += alignUp(sizeof(size_t) * threads_);
      cand.values = reinterpret_cast<float*>(ws + wsOff);
      wsOff += alignUp(sizeof(float) * cap * threads_);
      cand.indices = reinterpret_cast<uint32_t*>(ws + wsOff);
      const size_t limit = cpu::testCandidateCapLimit.load();
      cand.cap = limit ? std::min(cap, limit) : cap;
      cand.regions = threads_;
    }
  }

  // The one full pass: acc (unless in place), statistics, candidates.
  const float* rinArg = rin != a.residual ? rin : nullptr;
  const cpu::BufferStats bs = tc ? cpu::accumulateCandidates(xs, a.residual, n, chunks, threads, tc, &cand, rinArg)
                                 : cpu::accumulate(xs, a.residual, n, chunks, threads, rinArg);
  AccStats st{bs.sum, bs.sumSq, bs.sumAbs, bs.maxAbs, bs.nonFinite};
  const Moments m = moments(st, n);
  result->mean = m.mean;
  result->stddev = m.stddev;
  result->meanAbs = m.meanAbs;
  result->maxAbs = bs.maxAbs;
  result->nonFinite = bs.nonFinite;
  result->passes = 1;
  if (bs.nonFinite > 0) {
    cpu::zeroNonFinite(a.residual, n, chunks, threads);
    ++result->passes;
    MGS_ENSURE(options_.nonFinite != NonFinitePolicy::kError, kNumeric,
               "non-finite gradient in '" << a.name << "': " << bs.nonFinite << " of " << n
                                          << " values are NaN or Inf (dropped from the residual)");
    if (options_.nonFinite == NonFinitePolicy::kSkip) return Status::OK();
  }

  if (kind_ == SelectorKind::kNone || k >= n) {
    cpu::takeAll(a.residual, n, chunks, threads, a.outValues, a.outIndices);
    result->count = n;
    result->inBand = true;
    ++result->passes;
    return Status::OK();
  }

  SearchConfig cfg = cfgBase;
  cpu::KeySource keys{cpu::KeyKind::kMagnitude, a.residual, 0};
  const uint64_t top = uint64_t{magnitudeKey(bs.maxAbs)} + (bs.maxAbs > 0 ? 1 : 0);
  uint32_t lo = 1;
  bool roundLo = true;
  if (kind_ == SelectorKind::kRandomk) {
    keys = cpu::KeySource{cpu::KeyKind::kRandom, nullptr, stepSeed(options_.seed, a.step)};
    lo = randomStartKey(n, k);
  } else if (kind_ == SelectorKind::kDgc) {
    const DgcSample ds = dgcSample(n, options_.density, options_.seed, a.step);
    for (size_t j = 0; j < ds.count; ++j) dgcKeys[j] = magnitudeKey(a.residual[ds.start + j * ds.stride]);
    std::nth_element(dgcKeys, dgcKeys + (ds.kSample - 1), dgcKeys + ds.count, std::greater<uint32_t>());
    lo = std::max<uint32_t>(dgcKeys[ds.kSample - 1], 1);
    roundLo = false;
  } else {
    lo = startKey(kind_, options_, n, k, m);
  }
  const uint64_t searchTop = kind_ == SelectorKind::kRandomk ? (uint64_t{1} << 32) : top;
  if (tc && roundLo && searchTop > 1) {
    // The estimate's window as ThresholdSearch would round it, raised to the
    // candidate floor; a move down from above tc stops at tc first. (Not
    // dgc: its first window and its x0.8 steps are its definition.)
    lo = std::max(roundDownToOctave(static_cast<uint32_t>(std::min<uint64_t>(lo, searchTop - 1))), tc);
    roundLo = false;
    cfg.stopKey = tc;
  }
  // Histograms over the candidate list while the window lies at or above tc
  // (then they equal the full-buffer ones), else full passes over r = acc.
  // Either way the search sees the same histograms, so the selection is that
  // of the full-buffer search from the same lo: independent of the thread
  // count and of whether a candidate region overflowed.
  ThresholdSearch search(cfg, searchTop, lo, roundLo);
  bool fromCandidates = tc != 0 && !cand.overflow;
  int fullPasses = 0;
  std::vector<uint64_t> total(kHistBins + 1);
  while (!search.done()) {
    if (fromCandidates && search.window().lo >= tc) {
      cpu::candidateHistogram(cand, search.window(), total.data());
    } else {
      fromCandidates = false;
      fullHistogram(search, keys, n, chunks, threads, hist, total.data());
      ++fullPasses;
    }
    search.consume(total.data());
  }
  const Selection& sel = search.selection();
  if (fromCandidates) {
    const size_t written = cpu::compactCandidates(cand, sel, a.residual, a.outValues, a.outIndices);
    MGS_ENSURE(written == sel.count, kInternal,
               "select '" << a.name << "': candidate compaction wrote " << written << " of " << sel.count);
  } else {
    cpu::compact(keys, n, sel, chunks, threads, hist, a.residual, a.outValues, a.outIndices);
    ++fullPasses;
  }
  result->count = sel.count;
  result->passes += fullPasses;
  result->inBand = search.inBand();
  result->exact = search.exact();
  if (kind_ != SelectorKind::kRandomk && sel.count > 0)
    result->threshold = keyToMagnitude(sel.hasTie ? sel.keyTie : static_cast<uint32_t>(sel.keyAll));
  return Status::OK();
}

}  // namespace mgs::compress
