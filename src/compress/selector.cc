#include "compress/selector.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/check.h"
#include "compress/cpu_passes.h"
#include "compress/selector_plan.h"

namespace mgs::compress {
namespace {

struct NameKind {
  const char* name;
  SelectorKind kind;
};
constexpr NameKind kNames[] = {{"none", SelectorKind::kNone},       {"topk", SelectorKind::kTopk},
                               {"gaussiank", SelectorKind::kGaussiank}, {"ldte", SelectorKind::kLdte},
                               {"dgc", SelectorKind::kDgc},         {"randomk", SelectorKind::kRandomk}};

constexpr size_t kAlign = 64;
size_t alignUp(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
size_t histBytes(int chunks) { return alignUp(sizeof(uint32_t) * (kHistBins + 1) * chunks); }

// The whole search on the CPU: histogram passes until the search finishes.
void runSearch(ThresholdSearch* search, const cpu::KeySource& keys, size_t n, int chunks,
               int threads, uint32_t* hist) {
  std::vector<uint64_t> total(kHistBins + 1);
  while (!search->done()) {
    cpu::histogram(keys, n, search->window(), chunks, threads, hist);
    std::fill(total.begin(), total.end(), 0);
    for (int c = 0; c < chunks; ++c)
      for (uint32_t b = 0; b <= kHistBins; ++b) total[b] += hist[c * (kHistBins + 1) + b];
    search->consume(total.data());
  }
}

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

Status Selector::create(const std::string& name, const SelectorOptions& options,
                        std::unique_ptr<Selector>* out) {
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

Selector::Selector(SelectorKind kind, const SelectorOptions& options)
    : kind_(kind), options_(options) {
  int t = options.numThreads;
#ifdef _OPENMP
  if (t <= 0) t = omp_get_max_threads();
#endif
  threads_ = std::max(t, 1);
}

size_t Selector::maxCount(size_t n) const {
  if (kind_ == SelectorKind::kNone) return n;
  const size_t k = kForDensity(n, options_.density);
  return std::min(n, searchConfig(kind_, options_, k).kHigh);
}

size_t Selector::workspaceBytes(size_t n) const {
  size_t b = histBytes(cpu::kMaxChunks);
  if (kind_ == SelectorKind::kDgc) b += alignUp(sizeof(uint32_t) * dgcSampleCapacity(n, options_.density));
  return b;
}

Status checkSelectArgs(const SelectArgs& a, SelectResult* result) {
  MGS_ENSURE(result != nullptr, kInvalidArgument, "select: result is null");
  *result = SelectResult{};
  MGS_ENSURE(a.n < (size_t{1} << 32), kInvalidArgument,
             "select '" << a.name << "': n = " << a.n << " does not fit uint32 indices");
  MGS_ENSURE(a.dtype == MGS_FLOAT32 || a.dtype == MGS_FLOAT16 || a.dtype == MGS_BFLOAT16,
             kInvalidArgument, "select '" << a.name << "': dtype " << dtypeName(a.dtype)
                                          << " is not float32/float16/bfloat16");
  return Status::OK();
}

Status Selector::select(const SelectArgs& a, SelectResult* result) const {
  MGS_RETURN_IF_ERROR(checkSelectArgs(a, result));
  const size_t n = a.n;
  if (n == 0) {
    result->inBand = true;
    return Status::OK();
  }
  MGS_ENSURE(a.x && a.residual && a.outValues && a.outIndices, kInvalidArgument,
             "select '" << a.name << "': null buffer");
  MGS_ENSURE(a.workspace != nullptr && a.workspaceBytes >= workspaceBytes(n), kInvalidArgument,
             "select '" << a.name << "': workspace " << a.workspaceBytes << " < "
                        << workspaceBytes(n) << " bytes");
  const int chunks = cpu::chunksFor(n);
  const size_t k = kForDensity(n, options_.density);
  result->k = k;

  const cpu::BufferStats bs = cpu::accumulate(a.x, a.dtype, a.residual, n, chunks, threads_);
  AccStats st{bs.sum, bs.sumSq, bs.sumAbs, bs.maxAbs, bs.nonFinite};
  const Moments m = moments(st, n);
  result->mean = m.mean;
  result->stddev = m.stddev;
  result->meanAbs = m.meanAbs;
  result->maxAbs = bs.maxAbs;
  result->nonFinite = bs.nonFinite;
  result->passes = 1;
  if (bs.nonFinite > 0) {
    cpu::zeroNonFinite(a.residual, n, chunks, threads_);
    ++result->passes;
    MGS_ENSURE(options_.nonFinite != NonFinitePolicy::kError, kNumeric,
               "non-finite gradient in '" << a.name << "': " << bs.nonFinite << " of " << n
                                          << " values are NaN or Inf (dropped from the residual)");
    if (options_.nonFinite == NonFinitePolicy::kSkip) return Status::OK();
  }

  if (kind_ == SelectorKind::kNone || k >= n) {
    cpu::takeAll(a.residual, n, chunks, threads_, a.outValues, a.outIndices);
    result->count = n;
    result->inBand = true;
    ++result->passes;
    return Status::OK();
  }

  auto* hist = static_cast<uint32_t*>(a.workspace);
  const SearchConfig cfg = searchConfig(kind_, options_, k);
  cpu::KeySource keys{cpu::KeyKind::kMagnitude, a.residual, 0};
  const uint64_t top = uint64_t{magnitudeKey(bs.maxAbs)} + (bs.maxAbs > 0 ? 1 : 0);
  uint32_t lo = 1;
  bool roundLo = true;
  if (kind_ == SelectorKind::kRandomk) {
    keys = cpu::KeySource{cpu::KeyKind::kRandom, nullptr, stepSeed(options_.seed, a.step)};
    lo = randomStartKey(n, k);
  } else if (kind_ == SelectorKind::kDgc) {
    const DgcSample ds = dgcSample(n, options_.density, options_.seed, a.step);
    auto* sample = reinterpret_cast<uint32_t*>(static_cast<char*>(a.workspace) + histBytes(cpu::kMaxChunks));
    for (size_t j = 0; j < ds.count; ++j) sample[j] = magnitudeKey(a.residual[ds.start + j * ds.stride]);
    std::nth_element(sample, sample + (ds.kSample - 1), sample + ds.count, std::greater<uint32_t>());
    lo = std::max<uint32_t>(sample[ds.kSample - 1], 1);
    roundLo = false;
  } else {
    lo = startKey(kind_, options_, n, k, m);
  }
  ThresholdSearch search(cfg, kind_ == SelectorKind::kRandomk ? (uint64_t{1} << 32) : top, lo,
                         roundLo);
  runSearch(&search, keys, n, chunks, threads_, hist);
  const Selection& sel = search.selection();
  cpu::compact(keys, n, sel, chunks, threads_, hist, a.residual, a.outValues, a.outIndices);
  result->count = sel.count;
  result->passes += search.passes() + 1;
  result->inBand = search.inBand();
  result->exact = search.exact();
  if (kind_ != SelectorKind::kRandomk && sel.count > 0)
    result->threshold = keyToMagnitude(sel.hasTie ? sel.keyTie : static_cast<uint32_t>(sel.keyAll));
  return Status::OK();
}

}  // namespace mgs::compress
