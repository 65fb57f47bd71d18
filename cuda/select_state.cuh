// The one-pass GPU selector's device state and shared constants (device
// code; included by select_kernels.cu only, through select_search.cuh, so the
// kernels stay one translation unit).
#pragma once

#include <cstdint>

#include <cub/agent/single_pass_scan_operators.cuh>

#include "compress/cpu_passes.h"
#include "select_plan.h"

namespace mgs::cuda::kernels {
namespace {

using compress::kHistBins;
using compress::magnitudeKey;
using compress::randomKey;
using compress::SelectorKind;

constexpr int kBins = kHistBins + 1;
constexpr uint32_t kInfKey = 0x7f800000u;
constexpr int kT = kTileThreads;
constexpr int kI = kTileItems;
constexpr uint64_t kSampleMax = compress::cpu::kSampleMax;
constexpr uint64_t kSampleBlock = compress::cpu::kSampleBlock;

using Tiles32 = cub::ScanTileState<uint32_t>;
using Tiles64 = cub::ScanTileState<unsigned long long>;

struct State {
  compress::ThresholdSearch search;
  compress::AccStats stats;
  compress::Moments moments;
  unsigned long long numCand, written;
  uint32_t tc, sampleBad, ticket, compactNext;
  int32_t skip, fromCand, failure, fullPasses;
};

__device__ __forceinline__ bool isKind(const SelectPlan& p, SelectorKind k) { return p.kind == static_cast<int>(k); }

}  // namespace
}  // namespace mgs::cuda::kernels
