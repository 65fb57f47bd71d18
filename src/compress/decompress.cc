#include "compress/decompress.h"

#include <algorithm>

#include "common/check.h"
#include "common/parallel.h"

namespace mgs::compress {

Status scatterAdd(const float* values, const uint32_t* indices, const size_t* counts, size_t ranks, size_t n,
                  float scale, float* out, int threads) {
  size_t total = 0;
  for (size_t r = 0; r < ranks; ++r) total += counts[r];
  MGS_ENSURE(n == 0 || out != nullptr, kInvalidArgument, "scatterAdd: null output");
  MGS_ENSURE(total == 0 || (values && indices), kInvalidArgument, "scatterAdd: null pairs");
  for (size_t j = 0; j < total; ++j)
    MGS_ENSURE(indices[j] < n, kInvalidArgument,
               "scatterAdd: pair " << j << " has index " << indices[j] << " >= n = " << n);
  const int slices = static_cast<int>(std::min<size_t>(std::max(threads, 1), std::max<size_t>(n / 4096, 1)));
  // Each slice of `out` is owned by one task, which scans all pairs in
  // concatenation (= rank) order: no atomics, same order as one thread.
  parallelFor(slices, threads, [&](int s) {
    const size_t b = n / slices * s + std::min<size_t>(s, n % slices);
    const size_t e = n / slices * (s + 1) + std::min<size_t>(s + 1, n % slices);
    std::fill(out + b, out + e, 0.0f);
    for (size_t j = 0; j < total; ++j) {
      const size_t i = indices[j];
      if (i >= b && i < e) out[i] += values[j];
    }
    if (scale != 1.0f)
      for (size_t i = b; i < e; ++i) out[i] *= scale;
  });
  return Status::OK();
}

}  // namespace mgs::compress
