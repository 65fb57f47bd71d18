// Threshold search shared by the CPU and CUDA selectors.
//
// Every selector ranks entries by a uint32 key (for magnitude selectors the
// IEEE bit pattern of |x|, which is monotone for non-negative floats; for
// randomk a counter hash) and selects "key >= K", plus, when a block of equal
// (or same-bin) keys straddles k, the first `quota` of that block in index
// order. The search is a multi-way bisection: each pass histograms the keys
// of one window into kHistBins bins (plus one bin for everything above), the
// search picks the bin where the count from the top crosses k, and either stops
// (count within the band) or narrows the window to that bin. Three passes
// resolve all 32 key bits, so the exact top-k needs no sort.
//
// This file has no threads and no CUDA types. The search is header-inline and
// __host__ __device__ under nvcc: the CPU selector runs it on the host, the
// GPU selector (cuda/select_kernels.cu) runs the very same code in one thread
// of a block after a block-parallel HistSummary, so both reach the same
// threshold from the same histograms, which is what the GPU tests check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace mgs::compress {

constexpr int kHistBinBits = 11;
constexpr uint32_t kHistBins = 1u << kHistBinBits;  // a histogram has kHistBins + 1 counters

// Order-preserving key of |x| (NaN keys exceed +Inf; callers reject non-finite input first).
MGS_HOST_DEVICE uint32_t magnitudeKey(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x) & 0x7fffffffu;
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u & 0x7fffffffu;
#endif
}
MGS_HOST_DEVICE float keyToMagnitude(uint32_t key) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(key);
#else
  float f;
  std::memcpy(&f, &key, sizeof(f));
  return f;
#endif
}

// randomk keys: a counter-based hash of (seed, index), identical on every rank
// and device. For a fixed seed it is a bijection of the 32-bit index (odd
// multiplies, xor-shifts, xors), so keys never collide (but for the fold of
// 0 to 1: key 0 is never selected). 32-bit arithmetic keeps it vectorisable.
MGS_HOST_DEVICE uint32_t randomKey(uint64_t seed, uint64_t index) {
  uint32_t x = static_cast<uint32_t>(index) * 0x9E3779B1u + static_cast<uint32_t>(seed);
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x ^= static_cast<uint32_t>(seed >> 32);
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x == 0 ? 1u : x;
}

// Bins of one pass: bin b < kHistBins holds keys in [lo + b*2^shift, lo + (b+1)*2^shift),
// bin kHistBins holds every larger key, keys below lo are not counted.
struct Window {
  uint32_t lo = 1;
  uint32_t shift = 0;
};
MGS_HOST_DEVICE int binOf(uint32_t key, Window w) {
  if (key < w.lo) return -1;
  const uint32_t b = (key - w.lo) >> w.shift;
  return b < kHistBins ? static_cast<int>(b) : static_cast<int>(kHistBins);
}

// What a finished search selects: every key >= keyAll, and the first `quota`
// entries (index order) with key in [keyTie, keyAll) when hasTie.
struct Selection {
  uint64_t keyAll = 1;  // may be 2^32 (randomk: nothing above the tie block)
  uint32_t keyTie = 0;
  bool hasTie = false;
  size_t quota = 0;
  size_t count = 0;  // total selected
  // Bins of the last pass's window matching keyAll / keyTie, so the CPU can
  // derive per-chunk counts from per-chunk histograms without another pass.
  uint32_t binAll = 0;
  uint32_t binTie = 0;
};

struct SearchConfig {
  size_t k = 1;                      // target count
  size_t kHigh = 1;                  // accept counts in [acceptLow, kHigh]; kHigh == k means exact
  size_t acceptLow = 1;              // a window whose total is >= acceptLow (but < k) is accepted as is
  int maxPasses = 8;                 // histogram passes before the fallback
  double lowerFactor = 1.0 / 256.0;  // how far a window moves down when it holds < acceptLow
  bool magnitudeKeys = true;         // keys are float bit patterns (else: plain integers)
  // A move down from a window whose lo is above stopKey goes no lower than
  // stopKey (the CPU's candidate floor, so that an estimate that was too high
  // lands on the keys it holds); later moves are unaffected. 0: off.
  uint32_t stopKey = 0;
};

// What one histogram pass tells the search, summarised so that a device can
// compute it in parallel (suffix sums over the bins) and then take the same
// decision as the host: cum[b] = number of keys >= lo + b*2^shift.
//   cum0 = cum[0], cumTop = cum[kHistBins]; when cum0 >= k > cumTop:
//   bin = the largest b < kHistBins with cum[b] >= k, cumBin = cum[bin],
//   cumNext = cum[bin + 1].
struct HistSummary {
  uint64_t cum0 = 0, cumTop = 0, cumBin = 0, cumNext = 0;
  uint32_t bin = 0;
};

// Serial summary of one histogram (kHistBins + 1 counts) for target k.
inline HistSummary summarizeHistogram(const uint64_t* hist, uint64_t k) {
  HistSummary s;
  uint64_t run = 0;
  bool found = false;
  for (int b = kHistBins; b >= 0; --b) {
    const uint64_t prev = run;
    run += hist[b];
    if (b == static_cast<int>(kHistBins)) s.cumTop = run;
    if (!found && b < static_cast<int>(kHistBins) && run >= k) {
      found = true;
      s.bin = static_cast<uint32_t>(b);
      s.cumBin = run;
      s.cumNext = prev;
    }
  }
  s.cum0 = run;
  return s;
}

class ThresholdSearch {
 public:
  ThresholdSearch() = default;  // device state holders; use the constructor below
  // `top` is one past the largest key present (magnitude: key(max|x|)+1;
  // randomk: 2^32). The first window spans [lo, top). With roundLo, lo is
  // rounded down to a multiple of 2^23 (an octave for magnitude keys) so that
  // estimates that differ only by rounding (CPU vs GPU statistics) give the
  // same window and hence the same threshold. top <= 1 finishes at once
  // with nothing selected (an all-zero buffer).
  MGS_HOST_DEVICE ThresholdSearch(const SearchConfig& config, uint64_t top, uint32_t lo, bool roundLo);

  MGS_HOST_DEVICE bool done() const { return done_; }
  MGS_HOST_DEVICE const Window& window() const { return window_; }
  // Feed the histogram (kHistBins + 1 counts, summed over chunks) of window().
  void consume(const uint64_t* hist) { step(summarizeHistogram(hist, cfg_.k)); }
  // The same as consume() given the histogram's summary (the device path).
  MGS_HOST_DEVICE void step(const HistSummary& h);
  MGS_HOST_DEVICE const Selection& selection() const { return sel_; }
  MGS_HOST_DEVICE const SearchConfig& config() const { return cfg_; }
  MGS_HOST_DEVICE int passes() const { return passes_; }
  MGS_HOST_DEVICE bool inBand() const { return inBand_; }
  // True unless the pass budget ran out with a partly selected bin wider than one key.
  MGS_HOST_DEVICE bool exact() const { return exact_; }

 private:
  MGS_HOST_DEVICE void setWindow(uint64_t lo, uint64_t hi);
  MGS_HOST_DEVICE void finish(const Selection& s, bool inBand);

  SearchConfig cfg_;
  uint64_t top_ = 0;
  Window window_;
  Selection sel_;
  int passes_ = 0;
  bool done_ = false;
  bool inBand_ = false;
  bool exact_ = true;
};

// lo rounded down to a multiple of 2^23 (an octave for magnitude keys), at
// least 1: what ThresholdSearch does to lo with roundLo.
MGS_HOST_DEVICE uint32_t roundDownToOctave(uint32_t lo) {
  const uint32_t l = lo - (lo % (1u << 23));
  return l < 1 ? 1 : l;
}

// Key of the float magnitude `t` (t <= 0 or NaN give 1, +Inf gives key(+Inf)).
MGS_HOST_DEVICE uint32_t thresholdKey(double t) {
  if (!(t > 0)) return 1;
  const float f = t > 3.4e38 ? keyToMagnitude(0x7f800000u) : static_cast<float>(t);
  const uint32_t key = magnitudeKey(f);
  return key < 1 ? 1 : key;
}

// The search itself: host and device run this same code (the CPU selector,
// the GPU selector's device-side search, and tests).
MGS_HOST_DEVICE ThresholdSearch::ThresholdSearch(const SearchConfig& config, uint64_t top, uint32_t lo, bool roundLo)
    : cfg_(config), top_(top) {
  if (top <= 1) {
    finish(Selection{}, true);
    sel_.count = 0;
    return;
  }
  uint64_t l = lo;
  if (l >= top) l = top - 1;
  if (roundLo) l -= l % (uint64_t{1} << 23);
  if (l < 1) l = 1;
  setWindow(l, top);
}

MGS_HOST_DEVICE void ThresholdSearch::setWindow(uint64_t lo, uint64_t hi) {
  uint32_t shift = 0;
  while ((uint64_t{kHistBins} << shift) < hi - lo) ++shift;
  window_.lo = static_cast<uint32_t>(lo);
  window_.shift = shift;
}

MGS_HOST_DEVICE void ThresholdSearch::finish(const Selection& s, bool inBand) {
  sel_ = s;
  inBand_ = inBand;
  done_ = true;
}

MGS_HOST_DEVICE void ThresholdSearch::step(const HistSummary& h) {
  ++passes_;
  const uint64_t lo = window_.lo;
  const uint32_t shift = window_.shift;
  if (h.cum0 < cfg_.k) {
    // Too few keys at or above the window: accept (dgc's lower bound, or no
    // smaller keys exist, or out of passes) or move the window down.
    if (h.cum0 >= cfg_.acceptLow || lo <= 1 || passes_ >= cfg_.maxPasses) {
      Selection s;
      s.keyAll = lo;
      s.binAll = 0;
      s.count = h.cum0;
      finish(s, h.cum0 >= cfg_.acceptLow);
      return;
    }
    uint64_t next;
    if (cfg_.magnitudeKeys) {
      next = thresholdKey(static_cast<double>(keyToMagnitude(static_cast<uint32_t>(lo))) * cfg_.lowerFactor);
    } else {
      next = static_cast<uint64_t>(static_cast<double>(lo) * cfg_.lowerFactor);
    }
    if (next > lo - 1) next = lo - 1;
    if (next < 1) next = 1;
    if (lo > cfg_.stopKey && next < cfg_.stopKey) next = cfg_.stopKey;
    setWindow(next, lo);
    return;
  }
  const uint64_t edgeTop = lo + (uint64_t{kHistBins} << shift);
  if (h.cumTop >= cfg_.k) {  // only if `top` was wrong; move up rather than mis-refine
    setWindow(edgeTop, top_ > edgeTop + 1 ? top_ : edgeTop + 1);
    return;
  }
  const uint32_t b = h.bin;  // cum0 >= k > cumTop: the crossing bin exists
  const uint64_t edgeB = lo + (uint64_t{b} << shift);
  const uint64_t edgeB1 = lo + (uint64_t{b + 1} << shift);
  if (h.cumBin <= cfg_.kHigh) {
    Selection s;
    s.keyAll = edgeB;
    s.binAll = b;
    s.count = h.cumBin;
    finish(s, true);
    return;
  }
  if (shift == 0 || passes_ >= cfg_.maxPasses) {
    // One key value (a tie block), or out of passes: take the keys above the
    // bin and fill up to k from the bin in index order.
    Selection s;
    s.keyAll = edgeB1;
    s.binAll = b + 1;
    s.keyTie = static_cast<uint32_t>(edgeB);
    s.binTie = b;
    s.hasTie = true;
    s.quota = cfg_.k - h.cumNext;
    s.count = cfg_.k;
    exact_ = shift == 0;
    finish(s, true);
    return;
  }
  setWindow(edgeB, edgeB1);
}

// |Phi^-1(p)| for p in (0, 1): Acklam's rational approximation refined with
// one Halley step in double (relative error < 1e-12).
double normalQuantileAbs(double p);

}  // namespace mgs::compress
