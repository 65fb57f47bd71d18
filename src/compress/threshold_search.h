// Threshold search shared by the CPU and CUDA selectors.
//
// Every selector ranks entries by a uint32 key (for magnitude selectors the
// IEEE bit pattern of |x|, which is monotone for non-negative floats; for
// randomk a counter hash) and selects "key >= K", plus, when a block of equal
// (or same-bin) keys straddles k, the first `quota` of that block in index
// order. The search is a multi-way bisection: each pass histograms the keys
// of one window into kHistBins bins (plus one bin for everything above), the
// host picks the bin where the count from the top crosses k, and either stops
// (count within the band) or narrows the window to that bin. Three passes
// resolve all 32 key bits, so the exact top-k needs no sort.
//
// This file is pure host logic with no threads and no CUDA types: the CPU and
// GPU paths feed it the same histograms and therefore reach the same
// threshold, which is what the GPU tests check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MGS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MGS_HOST_DEVICE inline
#endif

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
  size_t k = 1;          // target count
  size_t kHigh = 1;      // accept counts in [acceptLow, kHigh]; kHigh == k means exact
  size_t acceptLow = 1;  // a window whose total is >= acceptLow (but < k) is accepted as is
  int maxPasses = 8;     // histogram passes before the fallback
  double lowerFactor = 1.0 / 256.0;  // how far a window moves down when it holds < acceptLow
  bool magnitudeKeys = true;         // keys are float bit patterns (else: plain integers)
  // A move down from a window whose lo is above stopKey goes no lower than
  // stopKey (the CPU's candidate floor, so that an estimate that was too high
  // lands on the keys it holds); later moves are unaffected. 0: off.
  uint32_t stopKey = 0;
};

class ThresholdSearch {
 public:
  // `top` is one past the largest key present (magnitude: key(max|x|)+1;
  // randomk: 2^32). The first window spans [lo, top). With roundLo, lo is
  // rounded down to a multiple of 2^23 (an octave for magnitude keys) so that
  // estimates that differ only by rounding (CPU vs GPU statistics) give the
  // same window and hence the same threshold. top <= 1 finishes at once
  // with nothing selected (an all-zero buffer).
  ThresholdSearch(const SearchConfig& config, uint64_t top, uint32_t lo, bool roundLo);

  bool done() const { return done_; }
  const Window& window() const { return window_; }
  // Feed the histogram (kHistBins + 1 counts, summed over chunks) of window().
  void consume(const uint64_t* hist);
  const Selection& selection() const { return sel_; }
  int passes() const { return passes_; }
  bool inBand() const { return inBand_; }
  // True unless the pass budget ran out with a partly selected bin wider than one key.
  bool exact() const { return exact_; }

 private:
  void setWindow(uint64_t lo, uint64_t hi);
  void finish(const Selection& s, bool inBand);

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
uint32_t roundDownToOctave(uint32_t lo);

// Key of the float magnitude `t` (t <= 0 or NaN give 1, +Inf gives key(+Inf)).
uint32_t thresholdKey(double t);

// |Phi^-1(p)| for p in (0, 1): Acklam's rational approximation refined with
// one Halley step in double (relative error < 1e-12).
double normalQuantileAbs(double p);

}  // namespace mgs::compress
