// Per-selector parameters shared by the CPU and CUDA paths: the search band,
// the first window's estimate (Gaussian or Laplace), dgc's sample and the
// randomk seed. Both paths call these with the same inputs, so they search
// the same windows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/selector.h"
#include "compress/threshold_search.h"

namespace mgs::compress {

// Statistics of acc over its finite entries (sums in double).
struct AccStats {
  double sum = 0, sumSq = 0, sumAbs = 0;
  float maxAbs = 0;
  size_t nonFinite = 0;
};

struct Moments {
  double mean = 0, stddev = 0, meanAbs = 0;  // stddev unbiased (n-1), like torch.std
};
Moments moments(const AccStats& s, size_t n);

SearchConfig searchConfig(SelectorKind kind, const SelectorOptions& o, size_t k);

// First window's low key for magnitude selectors: estimate / 8.
//   gaussiank: t = mean + |Phi^-1(rho/2)| * stddev   (GaussianK-SGD, algorithms.md 7.3)
//   ldte, topk: t = b * ln(n/k), b = mean|acc|       (Laplace MLE with mu = 0, 7.4)
uint32_t startKey(SelectorKind kind, const SelectorOptions& o, size_t n, size_t k, const Moments& m);
// randomk: the first window's low key, around 2^32 * (1 - 2k/n).
uint32_t randomStartKey(size_t n, size_t k);
// randomk's per-step seed (identical on every rank for the same seed and step).
uint64_t stepSeed(uint64_t seed, uint64_t step);

// dgc's strided sample (synxlin/DGC DGCCompressor.initialize; algorithms.md 7.5):
// acc[start + j*stride] for j < count; threshold = the kSample-th largest |.|.
struct DgcSample {
  size_t start = 0, stride = 1, count = 0, kSample = 0;
};
DgcSample dgcSample(size_t n, double density, uint64_t seed, uint64_t step);
// Largest count dgcSample can return for n (workspace sizing).
size_t dgcSampleCapacity(size_t n, double density);

}  // namespace mgs::compress
