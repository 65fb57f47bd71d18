// Block-wide helpers of the GPU selector (device code; included by
// select_kernels.cu only, so the kernels stay one translation unit): suffix
// sums of a shared histogram and a one-block radix select. Ran on an H100
// (the batched loads of blockKthLargest, 2026-11-27, have not: see
// docs/architecture.md, "GPU parts").
#pragma once

#include <cstdint>

#include <cub/block/block_scan.cuh>

namespace mgs::cuda::kernels {
namespace {

constexpr int kWide = 1024;  // threads of the one-block kernels
constexpr int kBatch = 8;    // loads a thread of a one-block kernel issues before using them

// Suffix sums of a shared histogram: S[p] = sum of counts[b] for b >= nb-1-p
// (p: position from the top), then the first p >= pmin with S[p] >= target.
template <int kThreads, int kItems>
struct Suffix {
  using Scan = cub::BlockScan<unsigned long long, kThreads>;
  struct Storage {
    typename Scan::TempStorage scan;
    unsigned long long S[kThreads * kItems];
    int found;
  };
  __device__ static void run(const uint32_t* counts, int nb, Storage& st) {
    unsigned long long v[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int p = threadIdx.x * kItems + j;
      v[j] = p < nb ? counts[nb - 1 - p] : 0ull;
    }
    Scan(st.scan).InclusiveSum(v, v);
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int p = threadIdx.x * kItems + j;
      if (p < nb) st.S[p] = v[j];
    }
    __syncthreads();
  }
  __device__ static int first(int nb, unsigned long long target, int pmin, Storage& st) {
    if (threadIdx.x == 0) st.found = -1;
    __syncthreads();
    for (int p = pmin + threadIdx.x; p < nb; p += kThreads)
      if (st.S[p] >= target && (p == pmin || st.S[p - 1] < target)) st.found = p;  // unique
    __syncthreads();
    const int f = st.found;
    __syncthreads();
    return f;
  }
};
using WideSuffix = Suffix<kWide, 3>;  // up to 3072 bins

// The want-th largest of keys[0, s) (keys < 2^31, 1 <= want <= s) by three
// digit rounds of a radix select, as compress::cpu::kthLargestKey finds it.
// With firstGiven, counts already holds the first round's 2048 counts (keys
// counted by their bits 30..20 elsewhere) and that round reads no key.
__device__ uint32_t blockKthLargest(const uint32_t* keys, uint64_t s, uint64_t want, uint32_t* counts,
                                    WideSuffix::Storage& sfx, bool firstGiven = false) {
  const int shifts[3] = {20, 9, 0}, widths[3] = {11, 11, 9};
  uint32_t prefix = 0, hiMask = 0;
  for (int round = 0; round < 3; ++round) {
    const int nb = 1 << widths[round];
    const uint32_t dmask = static_cast<uint32_t>(nb - 1);
    if (round > 0 || !firstGiven) {
      for (int b = threadIdx.x; b < nb; b += kWide) counts[b] = 0;
      __syncthreads();
      // kBatch keys in flight per thread before the first shared atomic: one
      // load at a time left every key a full L2 latency (64 per thread for a
      // sample of 65536), which was most of the floor's 52 us on an H100.
      for (uint64_t j0 = threadIdx.x; j0 < s; j0 += uint64_t{kWide} * kBatch) {
        uint32_t k[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const uint64_t j = j0 + uint64_t{kWide} * u;
          k[u] = j < s ? keys[j] : 0u;
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const uint64_t j = j0 + uint64_t{kWide} * u;
          if (j < s && (k[u] & hiMask) == prefix) atomicAdd(&counts[(k[u] >> shifts[round]) & dmask], 1u);
        }
      }
    }
    __syncthreads();
    WideSuffix::run(counts, nb, sfx);
    const int p = WideSuffix::first(nb, want, 0, sfx);  // exists: the counts sum to >= want
    const uint64_t above = p > 0 ? sfx.S[p - 1] : 0;
    want -= above;
    prefix |= static_cast<uint32_t>(nb - 1 - p) << shifts[round];
    hiMask |= dmask << shifts[round];
    __syncthreads();
  }
  return prefix;
}

}  // namespace
}  // namespace mgs::cuda::kernels
