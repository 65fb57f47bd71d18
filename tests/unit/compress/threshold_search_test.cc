// The host-side threshold search on its own: driven with histograms computed
// here from a plain key array, its selection must match brute force. The CPU
// and GPU paths feed it the same histograms, so this is what makes them agree.
#include <algorithm>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "compress/threshold_search.h"

namespace mgs::compress {
namespace {

Selection drive(const std::vector<uint32_t>& keys, ThresholdSearch s, int* passes) {
  std::vector<uint64_t> h(kHistBins + 1);
  while (!s.done()) {
    std::fill(h.begin(), h.end(), 0);
    for (uint32_t k : keys) {
      const int b = binOf(k, s.window());
      if (b >= 0) ++h[b];
    }
    s.consume(h.data());
  }
  *passes = s.passes();
  return s.selection();
}

size_t countAtLeast(const std::vector<uint32_t>& keys, uint64_t t) {
  return std::count_if(keys.begin(), keys.end(), [&](uint32_t k) { return k >= t; });
}

}  // namespace

TEST_CASE("threshold search: exact mode finds the k-th largest key", "[compress][search]") {
  std::mt19937 g(1);
  std::lognormal_distribution<float> mag(0, 2);
  std::vector<uint32_t> keys(200000);
  for (auto& k : keys) k = magnitudeKey(mag(g));
  const size_t k = GENERATE(size_t{1}, size_t{37}, size_t{2000}, size_t{199999});
  SearchConfig c;
  c.k = c.kHigh = c.acceptLow = k;
  const uint64_t top = uint64_t{*std::max_element(keys.begin(), keys.end())} + 1;
  int passes = 0;
  const Selection sel = drive(keys, ThresholdSearch(c, top, thresholdKey(1.0), true), &passes);
  std::vector<uint32_t> sorted = keys;
  std::sort(sorted.begin(), sorted.end(), std::greater<uint32_t>());
  const uint32_t kth = sorted[k - 1];
  REQUIRE(sel.count == k);
  // Everything strictly above the k-th key is taken in bulk, the k-th key's
  // tie block is cut by quota (or taken whole when it fits exactly).
  if (sel.hasTie) {
    REQUIRE(sel.keyTie == kth);
    REQUIRE(sel.keyAll == uint64_t{kth} + 1);
    REQUIRE(countAtLeast(keys, sel.keyAll) + sel.quota == k);
  } else {
    REQUIRE(countAtLeast(keys, sel.keyAll) == k);
  }
  REQUIRE(passes <= 6);
}

TEST_CASE("threshold search: band mode stops inside the band", "[compress][search]") {
  std::mt19937 g(2);
  std::exponential_distribution<float> mag(1);
  std::vector<uint32_t> keys(500000);
  for (auto& k : keys) k = magnitudeKey(mag(g));
  SearchConfig c;
  c.k = c.acceptLow = 500;
  c.kHigh = 550;
  const uint64_t top = uint64_t{*std::max_element(keys.begin(), keys.end())} + 1;
  // A start far too low and one far too high both end in the band.
  for (double start : {1e-3, 0.5, 6.9, 50.0}) {
    CAPTURE(start);
    int passes = 0;
    const Selection sel = drive(keys, ThresholdSearch(c, top, thresholdKey(start), true), &passes);
    REQUIRE(sel.count >= 500);
    REQUIRE(sel.count <= 550);
    REQUIRE(countAtLeast(keys, sel.keyAll) == sel.count);
  }
}

TEST_CASE("threshold search: estimates that differ by rounding give the same selection", "[compress][search]") {
  std::mt19937 g(3);
  std::student_t_distribution<float> t3(3);
  std::vector<uint32_t> keys(100000);
  for (auto& k : keys) k = magnitudeKey(t3(g));
  SearchConfig c;
  c.k = c.acceptLow = 100;
  c.kHigh = 110;
  const uint64_t top = uint64_t{*std::max_element(keys.begin(), keys.end())} + 1;
  int p1 = 0, p2 = 0;
  // 1.3 and 1.3 * (1 + 1e-6): what CPU and GPU statistics may differ by.
  const Selection a = drive(keys, ThresholdSearch(c, top, thresholdKey(1.3 / 8), true), &p1);
  const Selection b = drive(keys, ThresholdSearch(c, top, thresholdKey(1.3 * (1 + 1e-6) / 8), true), &p2);
  REQUIRE(a.keyAll == b.keyAll);
  REQUIRE(a.count == b.count);
}

TEST_CASE("threshold search: too few keys and empty input", "[compress][search]") {
  std::vector<uint32_t> keys(1000, 0);
  keys[5] = magnitudeKey(2.0f);
  keys[9] = magnitudeKey(1e-30f);
  SearchConfig c;
  c.k = c.acceptLow = c.kHigh = 10;
  int passes = 0;
  const uint64_t top = uint64_t{magnitudeKey(2.0f)} + 1;
  c.maxPasses = 64;
  const Selection s = drive(keys, ThresholdSearch(c, top, thresholdKey(0.1), true), &passes);
  REQUIRE(s.count == 2);  // every nonzero key, zeros never
  REQUIRE(countAtLeast(keys, s.keyAll) == 2);
  const ThresholdSearch empty(c, 1, 1, true);  // top <= 1: an all-zero buffer
  REQUIRE(empty.done());
  REQUIRE(empty.selection().count == 0);
}

}  // namespace mgs::compress
