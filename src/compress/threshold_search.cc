#include "compress/threshold_search.h"

#include <algorithm>
#include <cmath>

namespace mgs::compress {
namespace {
constexpr uint64_t kOctave = uint64_t{1} << 23;
}

ThresholdSearch::ThresholdSearch(const SearchConfig& config, uint64_t top, uint32_t lo,
                                 bool roundLo)
    : cfg_(config), top_(top) {
  if (top <= 1) {
    finish(Selection{}, true);
    sel_.count = 0;
    return;
  }
  uint64_t l = lo;
  if (l >= top) l = top - 1;
  if (roundLo) l -= l % kOctave;
  if (l < 1) l = 1;
  setWindow(l, top);
}

void ThresholdSearch::setWindow(uint64_t lo, uint64_t hi) {
  uint32_t shift = 0;
  while ((uint64_t{kHistBins} << shift) < hi - lo) ++shift;
  window_.lo = static_cast<uint32_t>(lo);
  window_.shift = shift;
}

void ThresholdSearch::finish(const Selection& s, bool inBand) {
  sel_ = s;
  inBand_ = inBand;
  done_ = true;
}

void ThresholdSearch::consume(const uint64_t* hist) {
  ++passes_;
  // cum[b] = number of keys >= lo + b*2^shift.
  uint64_t cum[kHistBins + 1];
  uint64_t run = 0;
  for (int b = kHistBins; b >= 0; --b) cum[b] = (run += hist[b]);
  const uint64_t lo = window_.lo;
  const uint32_t shift = window_.shift;
  auto edge = [&](uint64_t b) { return lo + (b << shift); };

  if (cum[0] < cfg_.k) {
    // Too few keys at or above the window: accept (dgc's lower bound, or no
    // smaller keys exist, or out of passes) or move the window down.
    if (cum[0] >= cfg_.acceptLow || lo <= 1 || passes_ >= cfg_.maxPasses) {
      Selection s;
      s.keyAll = lo;
      s.binAll = 0;
      s.count = cum[0];
      finish(s, cum[0] >= cfg_.acceptLow);
      return;
    }
    uint64_t next;
    if (cfg_.magnitudeKeys) {
      next = thresholdKey(static_cast<double>(keyToMagnitude(static_cast<uint32_t>(lo))) *
                          cfg_.lowerFactor);
    } else {
      next = static_cast<uint64_t>(static_cast<double>(lo) * cfg_.lowerFactor);
    }
    next = std::max<uint64_t>(1, std::min(next, lo - 1));
    if (lo > cfg_.stopKey && next < cfg_.stopKey) next = cfg_.stopKey;
    setWindow(next, lo);
    return;
  }
  if (cum[kHistBins] >= cfg_.k) {  // only if `top` was wrong; move up rather than mis-refine
    setWindow(edge(kHistBins), std::max(top_, edge(kHistBins) + 1));
    return;
  }
  uint32_t b = kHistBins - 1;
  while (cum[b] < cfg_.k) --b;  // cum[0] >= k, so this stops
  if (cum[b] <= cfg_.kHigh) {
    Selection s;
    s.keyAll = edge(b);
    s.binAll = b;
    s.count = cum[b];
    finish(s, true);
    return;
  }
  if (shift == 0 || passes_ >= cfg_.maxPasses) {
    // One key value (a tie block), or out of passes: take the keys above the
    // bin and fill up to k from the bin in index order.
    Selection s;
    s.keyAll = edge(b + 1);
    s.binAll = b + 1;
    s.keyTie = static_cast<uint32_t>(edge(b));
    s.binTie = b;
    s.hasTie = true;
    s.quota = cfg_.k - cum[b + 1];
    s.count = cfg_.k;
    exact_ = shift == 0;
    finish(s, true);
    return;
  }
  setWindow(edge(b), edge(b + 1));
}

uint32_t roundDownToOctave(uint32_t lo) {
  const uint32_t l = lo - static_cast<uint32_t>(lo % kOctave);
  return l < 1 ? 1 : l;
}

uint32_t thresholdKey(double t) {
  if (!(t > 0)) return 1;
  const float f = t > 3.4e38 ? INFINITY : static_cast<float>(t);
  return std::max<uint32_t>(1, magnitudeKey(f));
}

double normalQuantileAbs(double p) {
  // Acklam's algorithm for the lower-tail quantile, then one Halley step.
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                             -2.759285104469687e+02, 1.383577518672690e+02,
                             -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                             -1.556989798598866e+02, 6.680131188771972e+01,
                             -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                             -2.400758277161838e+00, -2.549732539343734e+00,
                             4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                             2.445134137142996e+00, 3.754408661907416e+00};
  p = std::min(std::max(p, 1e-300), 1.0 - 1e-16);
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - 0.02425) {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  x = x - u / (1 + x * u / 2);
  return std::fabs(x);
}

}  // namespace mgs::compress
