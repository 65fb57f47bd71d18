#include "compress/selector_plan.h"

#include <algorithm>
#include <cmath>

namespace mgs::compress {

Moments moments(const AccStats& s, size_t n) {
  Moments m;
  const size_t finite = n - s.nonFinite;
  if (finite == 0) return m;
  m.mean = s.sum / finite;
  m.meanAbs = s.sumAbs / finite;
  if (finite > 1) {
    // Sums in double from fp32 inputs: the cancellation here loses at most
    // ~1e-16 * sumSq, far below what moves the threshold's octave.
    const double var = (s.sumSq - s.sum * m.mean) / static_cast<double>(finite - 1);
    m.stddev = var > 0 ? std::sqrt(var) : 0.0;
  }
  return m;
}

SearchConfig searchConfig(SelectorKind kind, const SelectorOptions& o, size_t k) {
  SearchConfig c;
  c.k = k;
  c.kHigh = k;
  c.acceptLow = k;
  c.maxPasses = std::max(o.maxPasses, 1);
  switch (kind) {
    case SelectorKind::kGaussiank:
    case SelectorKind::kLdte:
      if (!o.exactTrim) c.kHigh = std::max(k, static_cast<size_t>(std::floor((1.0 + o.bandEps) * k)));
      break;
    case SelectorKind::kDgc:
      // synxlin/DGC: accept [0.8k, k]; lower the threshold by 0.8 up to 10
      // times; above k, the exact top-k among the candidates.
      c.acceptLow = static_cast<size_t>(std::ceil(0.8 * k));
      c.lowerFactor = 0.8;
      c.maxPasses = 10 + 4;
      break;
    case SelectorKind::kRandomk:
      c.magnitudeKeys = false;
      c.lowerFactor = 0.5;
      c.maxPasses = 40;
      break;
    default:
      break;
  }
  // Exact modes must reach one-key bins: 3 refinements after the moves down.
  if (c.kHigh == k && c.maxPasses < 6) c.maxPasses = 6;
  return c;
}

uint32_t startKey(SelectorKind kind, const SelectorOptions& o, size_t n, size_t k, const Moments& m) {
  double t;
  if (kind == SelectorKind::kGaussiank) {
    t = m.mean + normalQuantileAbs(o.density / 2) * m.stddev;
  } else {
    t = m.meanAbs * std::log(static_cast<double>(n) / static_cast<double>(k));
  }
  return thresholdKey(t / 8);
}

uint32_t randomStartKey(size_t n, size_t k) {
  const double frac = std::max(0.0, 1.0 - 2.0 * static_cast<double>(k) / static_cast<double>(n));
  return static_cast<uint32_t>(std::min(4294967295.0, frac * 4294967296.0));
}

uint64_t stepSeed(uint64_t seed, uint64_t step) {
  return (seed ^ 0xD1B54A32D192ED03ull) * 0x9E3779B97F4A7C15ull + step;
}

namespace {
void stridePlan(size_t n, double density, size_t* stride, size_t* minSamples) {
  const size_t pct = static_cast<size_t>(std::ceil(n * 0.01));
  const size_t cpr = static_cast<size_t>(std::ceil(2.0 / density));
  const size_t want = std::max(pct, cpr);
  *minSamples = want;
  if (n <= cpr) {
    *stride = 1;
    return;
  }
  long s = static_cast<long>(((n + want - 1) / want + 31) / 32 * 32 + 1);
  while (s > 1 && n / static_cast<size_t>(s) < want) s -= 8;
  *stride = static_cast<size_t>(std::max(s, 1L));
}
}  // namespace

DgcSample dgcSample(size_t n, double density, uint64_t seed, uint64_t step) {
  DgcSample d;
  if (n == 0) return d;
  size_t want;
  stridePlan(n, density, &d.stride, &want);
  d.start = d.stride > 1 ? randomKey(stepSeed(seed, step), 0) % d.stride : 0;
  d.count = (n - d.start + d.stride - 1) / d.stride;
  d.kSample = std::clamp<size_t>(static_cast<size_t>(std::ceil(d.count * density)), 1, d.count);
  return d;
}

size_t dgcSampleCapacity(size_t n, double density) {
  if (n == 0) return 0;
  size_t stride, want;
  stridePlan(n, density, &stride, &want);
  return (n + stride - 1) / stride;
}

}  // namespace mgs::compress
