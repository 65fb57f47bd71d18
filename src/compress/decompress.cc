#include "compress/decompress.h"

#include <algorithm>
#include <vector>

#include "common/check.h"
#include "common/parallel.h"

namespace mgs::compress {

Status scatterAddParts(const RankPairs* ranks, size_t numRanks, const ScatterOutput& out, uint64_t* touched,
                       int threads) {
  MGS_ENSURE(out.numParts == 0 || (out.parts && out.offsets && out.scales), kInvalidArgument,
             "scatterAdd: null output parts");
  const size_t n = out.numParts ? out.offsets[out.numParts] : 0;
  for (size_t m = 0; m < out.numParts; ++m)
    MGS_ENSURE(out.offsets[m] == out.offsets[m + 1] || out.parts[m] != nullptr, kInvalidArgument,
               "scatterAdd: null output");
  for (size_t r = 0; r < numRanks; ++r) {
    const RankPairs& p = ranks[r];
    MGS_ENSURE(p.count == 0 || (p.values && p.indices), kInvalidArgument, "scatterAdd: null pairs");
    for (size_t j = 0; j < p.count; ++j)
      MGS_ENSURE(p.indices[j] < n, kInvalidArgument,
                 "scatterAdd: rank " << r << " pair " << j << " has index " << p.indices[j] << " >= n = " << n);
  }
  std::vector<uint64_t> own;
  if (!touched) {
    own.assign((n + 63) / 64, 0);
    touched = own.data();
  }
  const size_t* off = out.offsets;
  const size_t parts = out.numParts;
  // The part holding bucket index i (offsets ascending; empty parts skipped).
  auto partOf = [&](size_t i) { return static_cast<size_t>(std::upper_bound(off + 1, off + parts + 1, i) - off - 1); };
  const size_t words = (n + 63) / 64;
  const int slices = static_cast<int>(std::min<size_t>(std::max(threads, 1), std::max<size_t>(words / 64, 1)));
  // Each slice of index space is owned by one task, which scans all pairs in
  // rank order: no atomics, the same order as one thread.
  parallelFor(slices, threads, [&](int s) {
    const size_t wb = words / slices * s + std::min<size_t>(s, words % slices);
    const size_t we = words / slices * (s + 1) + std::min<size_t>(s + 1, words % slices);
    const size_t b = wb * 64, e = std::min(we * 64, n);
    for (size_t m = partOf(b); b < e && m < parts && off[m] < e; ++m) {
      const size_t lo = std::max(off[m], b), hi = std::min(off[m + 1], e);
      if (lo < hi) std::fill(out.parts[m] + (lo - off[m]), out.parts[m] + (hi - off[m]), 0.0f);
    }
    for (size_t r = 0; r < numRanks; ++r) {
      const RankPairs& p = ranks[r];
      for (size_t j = 0; j < p.count; ++j) {
        const uint32_t i = p.indices[j];
        if (i < b || i >= e) continue;
        const size_t m = partOf(i);
        out.parts[m][i - off[m]] += p.values[j];
        touched[i >> 6] |= uint64_t{1} << (i & 63);
      }
    }
    // Scale each touched entry once, clearing its bit: a duplicate index
    // finds it clear, and the bitmap is left zeroed for the next call.
    for (size_t r = 0; r < numRanks; ++r) {
      const RankPairs& p = ranks[r];
      for (size_t j = 0; j < p.count; ++j) {
        const uint32_t i = p.indices[j];
        if (i < b || i >= e) continue;
        const uint64_t bit = uint64_t{1} << (i & 63);
        if (!(touched[i >> 6] & bit)) continue;
        touched[i >> 6] &= ~bit;
        const size_t m = partOf(i);
        if (out.scales[m] != 1.0f) out.parts[m][i - off[m]] *= out.scales[m];
      }
    }
  });
  return Status::OK();
}

Status scatterAdd(const float* values, const uint32_t* indices, const size_t* counts, size_t ranks, size_t n,
                  float scale, float* out, int threads) {
  MGS_ENSURE(n == 0 || out != nullptr, kInvalidArgument, "scatterAdd: null output");
  std::vector<RankPairs> pairs(ranks);
  size_t at = 0;
  for (size_t r = 0; r < ranks; ++r) {
    pairs[r].count = counts[r];
    pairs[r].values = values ? values + at : nullptr;
    pairs[r].indices = indices ? indices + at : nullptr;
    at += counts[r];
  }
  const size_t offsets[2] = {0, n};
  ScatterOutput o;
  o.parts = &out;
  o.offsets = offsets;
  o.scales = &scale;
  o.numParts = 1;
  return scatterAddParts(pairs.data(), ranks, o, nullptr, threads);
}

}  // namespace mgs::compress
