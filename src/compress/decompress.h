// Sparse aggregation (algorithms.md section 9.1): the (value, index) pairs of
// P ranks, concatenated in rank order as an allgatherv delivers them, are
// added into a zeroed dense buffer and scaled, e.g. by 1/P for the average.
//
// Duplicates (the same index from several ranks) add. Every output element
// is summed in rank order starting from +0.0f, then multiplied by `scale`, so
// the result is bitwise reproducible on every rank and identical to the CUDA
// path (cuda/compress_kernels.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace mgs::compress {

// out[0..n) = scale * sum over ranks r (in order) of the pairs of rank r.
// values/indices hold sum(counts) pairs; counts has `ranks` entries.
// Errors: kInvalidArgument for an index >= n or null buffers with pairs.
// Runs on up to `threads` threads (each owns a slice of `out`, so no
// atomics); the result does not depend on the thread count.
Status scatterAdd(const float* values, const uint32_t* indices, const size_t* counts, size_t ranks, size_t n,
                  float scale, float* out, int threads = 1);

}  // namespace mgs::compress
