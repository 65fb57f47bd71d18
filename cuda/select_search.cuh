// The GPU selector's threshold search passes and its ordered compaction
// (device code; included by select_kernels.cu only, so the kernels stay one
// translation unit). The per-pass kernel and a block per compaction tile ran
// on an H100; the cooperative pass loop and the counter-driven compaction
// (2026-11-27) have not run on a GPU yet (select_kernels.cu, header).
#pragma once

#include <cstdint>

#include <cooperative_groups.h>
#include <cub/agent/single_pass_scan_operators.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/std/functional>

#include "block_select.cuh"
#include "select_state.cuh"

namespace mgs::cuda::kernels {
namespace {

using PassSuffix = Suffix<kT, (kBins + kT - 1) / kT>;

// One histogram pass; false (and nothing done) once the search is done, so
// every block of the grid takes the same branch. Blocks add their shared
// histograms into `hist`; the last block to finish (ticket) summarises it,
// steps the search and clears `hist` and the ticket for the next pass.
__device__ __forceinline__ bool passStep(const SelectPlan& p, State* st, uint32_t* hist, const float* r,
                                         const float* candV, const uint32_t* candI) {
  __shared__ uint32_t h[kBins];
  __shared__ PassSuffix::Storage sfx;
  // Raw storage: a __shared__ variable cannot have a constructor.
  __shared__ alignas(compress::ThresholdSearch) unsigned char searchRaw[sizeof(compress::ThresholdSearch)];
  __shared__ bool useCand, last;
  auto& search = *reinterpret_cast<compress::ThresholdSearch*>(searchRaw);
  if (st->skip || p.dense) return false;
  if (threadIdx.x == 0) {
    search = st->search;
    useCand = passUsesCandidates(st->fromCand, search.window(), st->tc);
  }
  __syncthreads();
  if (search.done()) return false;
  const compress::Window w = search.window();
  for (int b = threadIdx.x; b < kBins; b += kT) h[b] = 0;
  __syncthreads();
  const uint64_t items = useCand ? st->numCand : p.n;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kT;
  for (uint64_t j = blockIdx.x * static_cast<uint64_t>(kT) + threadIdx.x; j < items; j += stride) {
    const uint32_t key = useCand ? selectKey(p, candI[j], [&] { return candV[j]; })
                                 : selectKey(p, static_cast<uint32_t>(j), [&] { return r[j]; });
    const int b = compress::binOf(key, w);
    if (b >= 0) atomicAdd(&h[b], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kT)
    if (h[b]) atomicAdd(&hist[b], h[b]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&st->ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return true;
  __threadfence();
  for (int b = threadIdx.x; b < kBins; b += kT) {
    h[b] = atomicExch(&hist[b], 0u);  // read the total and clear it for the next pass
  }
  __syncthreads();
  PassSuffix::run(h, kBins, sfx);
  const int pb = PassSuffix::first(kBins, search.config().k, 1, sfx);
  if (threadIdx.x == 0) {
    compress::HistSummary sum;
    sum.cumTop = sfx.S[0];
    sum.cum0 = sfx.S[kBins - 1];
    if (pb >= 1) {
      sum.bin = static_cast<uint32_t>(kHistBins - pb);
      sum.cumBin = sfx.S[pb];
      sum.cumNext = sfx.S[pb - 1];
    }
    search.step(sum);
    st->search = search;
    if (!useCand) {
      ++st->fullPasses;
      st->fromCand = 0;
    }
    atomicExch(&st->ticket, 0u);
    __threadfence();
  }
  return true;
}

// One launch per pass: the launches after the search is done return at once
// (each still costs 3.6-4.3 us on an H100, which is why passLoopKernel exists).
__global__ void __launch_bounds__(kT)
    passKernel(SelectPlan p, State* st, uint32_t* hist, const float* r, const float* candV, const uint32_t* candI) {
  passStep(p, st, hist, r, candV, candI);
}

// Every pass in one cooperative launch (all blocks resident): a grid-wide
// barrier between passes makes the last block's search step visible to all.
// passStep's answer is the same in every block, so all of them leave the loop
// together and no block waits at a barrier the others skip.
__global__ void __launch_bounds__(kT)
    passLoopKernel(SelectPlan p, State* st, uint32_t* hist, const float* r, const float* candV, const uint32_t* candI) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int pass = 0; pass < p.passLaunches; ++pass) {
    if (!passStep(p, st, hist, r, candV, candI)) return;
    grid.sync();
  }
}

// Ordered compaction over the candidate list (or the buffer after a full-pass
// fallback): scan of (taken above keyAll, ties) packed in 64 bits; a tie is
// sent while fewer than `quota` ties precede it, so the output is "key >=
// keyAll plus the first quota ties in index order", ascending by index.
// A block takes tiles from st->compactNext until they cover the items, so the
// grid need not have a block per tile of the buffer (the host sizes it for the
// candidate list; a full-buffer fallback loops). Tiles are taken in order by
// running blocks, so a tile's look-back only ever waits on a block that runs.
template <typename Scan, typename Prefix>
__device__ __forceinline__ void compactTile(const SelectPlan& p, State* st, float* r, const float* candV,
                                            const uint32_t* candI, Tiles64& tiles, float* outV, uint32_t* outI,
                                            const compress::Selection& sel, bool cand, uint64_t items, int needed,
                                            int tile, typename Scan::TempStorage& scanTmp,
                                            typename Prefix::TempStorage& prefixTmp) {
  const uint64_t b0 = static_cast<uint64_t>(tile) * kTileSize + static_cast<uint64_t>(threadIdx.x) * kI;
  uint32_t idx[kI];
  uint32_t cls = 0;  // 2 bits per item: 1 = above keyAll, 2 = tie
  unsigned long long packed = 0;
#pragma unroll
  for (int j = 0; j < kI; ++j) {
    idx[j] = 0;
    const uint64_t q = b0 + j;
    if (q >= items) continue;
    const uint32_t i = cand ? candI[q] : static_cast<uint32_t>(q);
    idx[j] = i;
    const uint32_t c = compactClass(selectKey(p, i, [&] { return cand ? candV[q] : r[i]; }), sel);
    cls |= c << (2 * j);
    packed += compactCount(c);
  }
  unsigned long long off = 0;
  if (tile == 0) {
    unsigned long long agg = 0;
    Scan(scanTmp).ExclusiveSum(packed, off, agg);
    if (threadIdx.x == 0) tiles.SetInclusive(0, agg);
  } else {
    Prefix op(tiles, prefixTmp, ::cuda::std::plus<unsigned long long>{}, tile);
    Scan(scanTmp).ExclusiveSum(packed, off, op);
  }
  uint64_t above = off >> 32, ties = off & 0xffffffffull;
  const uint64_t quota = sel.hasTie ? sel.quota : 0;
#pragma unroll
  for (int j = 0; j < kI; ++j) {
    const uint32_t c = cls >> (2 * j) & 3u;
    uint64_t pos = 0;
    if (c == 0 || !compactSlot(c, quota, above, ties, &pos)) continue;
    const uint32_t i = idx[j];
    outV[pos] = r[i];  // r, not the candidate copy: as compress::cpu::compactCandidates
    outI[pos] = i;
    r[i] = 0.0f;
  }
  if (tile == needed - 1 && threadIdx.x == kT - 1) st->written = compactWritten(above, ties, quota);
}

__global__ void __launch_bounds__(kT) compactKernel(SelectPlan p, State* st, float* r, const float* candV,
                                                    const uint32_t* candI, Tiles64 tiles, float* outV, uint32_t* outI) {
  using Scan = cub::BlockScan<unsigned long long, kT>;
  using Prefix = cub::TilePrefixCallbackOp<unsigned long long, ::cuda::std::plus<unsigned long long>, Tiles64>;
  __shared__ typename Scan::TempStorage scanTmp;
  __shared__ typename Prefix::TempStorage prefixTmp;
  __shared__ int tileOf;
  if (st->skip || p.dense || !st->search.done()) return;
  const bool cand = st->fromCand;
  const uint64_t items = cand ? st->numCand : p.n;
  const int needed = static_cast<int>(tilesFor(items));
  if (static_cast<int>(blockIdx.x) >= needed) return;  // never takes a tile
  const compress::Selection sel = st->search.selection();
  if (sel.count == 0) return;
  for (;;) {
    if (threadIdx.x == 0) tileOf = static_cast<int>(atomicAdd(&st->compactNext, 1u));
    __syncthreads();
    const int tile = tileOf;
    if (tile >= needed) return;  // the same value in every thread of the block
    compactTile<Scan, Prefix>(p, st, r, candV, candI, tiles, outV, outI, sel, cand, items, needed, tile, scanTmp,
                              prefixTmp);
    __syncthreads();  // tileOf and the scan storage are reused by the next tile
  }
}

}  // namespace
}  // namespace mgs::cuda::kernels
