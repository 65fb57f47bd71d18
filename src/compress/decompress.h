// Sparse aggregation (algorithms.md section 9.1): the (value, index) pairs of
// P ranks are added into a zeroed dense output and scaled, e.g. by 1/P for
// the average. This is the one scatter-add of mgs: the sparse pipeline's
// allgather (src/core/scatter_stage.cc) and every test and benchmark use it.
//
// Duplicates (the same index from several ranks) add. Every output element
// is summed in rank order starting from +0.0f, then every element some pair
// touched is multiplied by its part's scale once (when the scale is not 1);
// elements no pair touched stay +0.0f. So the result is bitwise reproducible
// on every rank, independent of the thread count, and identical to the CUDA
// path (cuda/compress_kernels.h, which writes sum * scale at touched indices
// of a zeroed output).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace mgs::compress {

// One rank's pairs.
struct RankPairs {
  const float* values = nullptr;
  const uint32_t* indices = nullptr;
  size_t count = 0;
};

// The dense output, possibly split in parts (a fused bucket's members): the
// elements [offsets[m], offsets[m + 1]) of index space go to parts[m][0 ..),
// scaled by scales[m]. offsets has parts + 1 ascending entries from 0; the
// last is n.
struct ScatterOutput {
  float* const* parts = nullptr;
  const size_t* offsets = nullptr;
  const float* scales = nullptr;
  size_t numParts = 0;
};

// out = scale * (sum over ranks, in order, of their pairs), as described
// above. `touched`: (n + 63) / 64 zeroed words of scratch, left zeroed
// (callers on the hot path reuse it; null allocates one). Errors:
// kInvalidArgument for an index >= n or null buffers with pairs, before
// anything is written. Runs on up to `threads` threads, each owning a slice
// of index space (a multiple of 64 elements, so no bitmap word is shared).
Status scatterAddParts(const RankPairs* ranks, size_t numRanks, const ScatterOutput& out, uint64_t* touched,
                       int threads = 1);

// The single-output form: values/indices hold sum(counts) pairs,
// concatenated in rank order as an allgatherv delivers them; counts has
// `ranks` entries.
Status scatterAdd(const float* values, const uint32_t* indices, const size_t* counts, size_t ranks, size_t n,
                  float scale, float* out, int threads = 1);

}  // namespace mgs::compress
