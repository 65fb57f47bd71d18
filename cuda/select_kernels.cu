// The one-pass GPU selector's kernels (design: select_plan.h). Ran on an H100
// (gpu/compress against the CPU oracle, 2026-11-26); the decisions they take
// are the shared functions of select_plan.h and threshold_search.h, also
// tested on the CPU.
//
// Order on the stream (all asynchronous; the host learns nothing):
//   initKernel     tile status of both look-back scans, state, histogram
//   sampleKernel   keys of acc at the CPU's sample positions  } magnitude
//   floorKernel    tc = the want-th largest sample key        } selectors
//   fusedKernel    acc -> r, tile statistics, ordered candidates key >= tc
//   dgcSampleKernel (dgc) keys of its strided sample
//   planKernel     fixed-order statistics, non-finite policy, first window
//   passLoopKernel up to cfg.maxPasses histogram passes in one cooperative
//                  launch: one histogram of the window over the list (or the
//                  buffer) per pass, the last block to finish runs
//                  ThresholdSearch::step, a grid-wide barrier, the next pass;
//                  it ends when the search is done. Where a cooperative launch
//                  is not available: passKernel x cfg.maxPasses, one launch per
//                  pass (the remaining launches return at once)
//   compactKernel  ordered (value, index) output, r zeroed at the sent entries;
//                  a grid sized to the candidate list whose blocks take tiles
//                  in order from a counter until the items are covered
//   finishKernel   count, failure code and info
// The one-launch passes and the counter-driven compaction have not run on a
// GPU yet (docs/architecture.md, "GPU parts"); the per-pass launches and a
// one-block-per-tile grid, which did, stay selectable: MGS_GPU_LAUNCHES=per-pass
// (SelectPlan::perPassLaunches) in production, setPerPassLaunchesForTesting in
// tests/gpu and bench/compress, which compare both bitwise and time them in one
// run. tests/gpu/launch_emulation_test.cc runs both protocols on the CPU under
// random block interleavings.
// Every reduction whose result feeds a decision is done in a fixed order, so
// a call is deterministic on one device.
#include "select_kernels.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include <cub/agent/single_pass_scan_operators.cuh>
#include <cub/block/block_exchange.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/std/functional>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/status.h"
#include "block_select.cuh"
#include "compress/cpu_passes.h"
#include "select_search.cuh"
#include "select_state.cuh"

namespace mgs::cuda::kernels {
namespace {

// The floor's first radix digit (block_select.cuh: 11 bits from bit 20).
constexpr int kFloorBins = 2048;
constexpr int kFloorShift0 = 20;
constexpr int kStatsBatch = 4;  // planKernel: tile statistics loaded per thread before use
static_assert(kFloorBins <= kBins, "the floor's first round borrows the pass histogram");

// Gradient sources: acc = src(i) + r[i]; in place there is none.
struct SrcF32 {
  const float* x;
  __device__ __forceinline__ float operator()(uint64_t i) const { return x[i]; }
};
struct SrcF16 {
  const __half* x;
  __device__ __forceinline__ float operator()(uint64_t i) const { return __half2float(x[i]); }
};
struct SrcBF16 {
  const __nv_bfloat16* x;
  __device__ __forceinline__ float operator()(uint64_t i) const { return __bfloat162float(x[i]); }
};

struct StatsOp {
  __device__ __forceinline__ TileStats operator()(const TileStats& a, const TileStats& b) const {
    return TileStats{a.sum + b.sum, a.sumSq + b.sumSq, a.sumAbs + b.sumAbs, fmaxf(a.maxAbs, b.maxAbs),
                     a.nonFinite + b.nonFinite};
  }
};

__global__ void initKernel(State* st, uint32_t* hist, Tiles32 t32, int n32, Tiles64 t64, int n64, SelectPlan p) {
  t32.InitializeStatus(n32);
  t64.InitializeStatus(n64);
  if (blockIdx.x != 0) return;
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) hist[b] = 0;
  if (threadIdx.x == 0) {
    *st = State{};
    st->tc = p.sampleFloor ? 0u : p.fixedTc;  // randomk: fixed floor; no list: 0
  }
}

// Keys of acc at the CPU's sample positions, and the first digit round of the
// floor's radix select (the top 11 bits of every key, non-finite ones as 0)
// counted here by every block into hist[0, 2048): one block counting 65536
// keys into a few hot bins took most of the floor's time on an H100.
template <typename Src, bool kInPlace>
__global__ void __launch_bounds__(kT)
    sampleKernel(Src src, const float* r, SelectPlan p, uint32_t* keys, State* st, uint32_t* hist) {
  __shared__ uint32_t h[kFloorBins];
  for (int b = threadIdx.x; b < kFloorBins; b += kT) h[b] = 0;
  __syncthreads();
  const uint64_t s = blockIdx.x * static_cast<uint64_t>(kT) + threadIdx.x;
  if (s < p.sampled) {
    uint64_t i = s;
    if (p.n > kSampleMax) i = s / kSampleBlock * (p.n / (kSampleMax / kSampleBlock)) + s % kSampleBlock;
    const float a = kInPlace ? 0.0f + r[i] : src(i) + r[i];
    const uint32_t k = magnitudeKey(a);
    const bool fin = k < kInfKey;
    const uint32_t key = fin ? k : 0u;
    keys[s] = key;
    atomicAdd(&h[(key >> kFloorShift0) & (kFloorBins - 1)], 1u);
    if (!fin) atomicAdd(&st->sampleBad, 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kFloorBins; b += kT)
    if (h[b]) atomicAdd(&hist[b], h[b]);
}

__global__ void __launch_bounds__(kWide) floorKernel(SelectPlan p, uint32_t* keys, State* st, uint32_t* hist) {
  __shared__ uint32_t counts[2048];
  __shared__ WideSuffix::Storage sfx;
  // The first digit round's counts (sampleKernel), taken over and cleared:
  // the histogram passes expect hist to start at zero.
  for (int b = threadIdx.x; b < kFloorBins; b += kWide) {
    counts[b] = hist[b];
    hist[b] = 0;
  }
  __syncthreads();
  const uint64_t finite = p.sampled - st->sampleBad;
  const uint64_t want = candidateWant(p, finite);
  if (want > finite) return;  // tc stays 0: no list, the search runs full passes
  const uint32_t key = blockKthLargest(keys, p.sampled, want, counts, sfx, true);
  if (threadIdx.x == 0) st->tc = key > 1 ? key : 1;
}

// One tile: acc (written to r unless in place; non-finite entries become 0 in
// r), the tile's statistics, and its candidates appended in index order at
// the offset the look-back scan gives.
template <typename Src, bool kInPlace>
__global__ void __launch_bounds__(kT) fusedKernel(Src src, float* __restrict__ r, SelectPlan p, State* st,
                                                  Tiles32 tiles, TileStats* partials, float* candV, uint32_t* candI) {
  using Exchange = cub::BlockExchange<float, kT, kI>;
  using Scan = cub::BlockScan<uint32_t, kT>;
  using Prefix = cub::TilePrefixCallbackOp<uint32_t, ::cuda::std::plus<uint32_t>, Tiles32>;
  using Reduce = cub::BlockReduce<TileStats, kT>;
  __shared__ union {
    typename Exchange::TempStorage exchange;
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } tmp;
  __shared__ typename Prefix::TempStorage prefixTmp;

  const int tile = blockIdx.x;
  const uint64_t tile0 = static_cast<uint64_t>(tile) * kTileSize;
  const uint32_t tc = st->tc;
  const bool random = isKind(p, SelectorKind::kRandomk);
  TileStats s{0, 0, 0, 0.0f, 0};
  float a[kI];
  // Striped loads and stores (coalesced); statistics in double per thread.
  // All of the tile's loads are issued before its first store: with a store
  // to r between them the compiler cannot hoist the next gradient load (the
  // source may alias r), and each item waited out a full memory latency.
  float x[kI];
#pragma unroll
  for (int j = 0; j < kI; ++j) {
    const uint64_t i = tile0 + static_cast<uint64_t>(j) * kT + threadIdx.x;
    a[j] = 0.0f;
    x[j] = 0.0f;
    if (i >= p.n) continue;
    a[j] = r[i];
    if (!kInPlace) x[j] = src(i);
  }
#pragma unroll
  for (int j = 0; j < kI; ++j) {
    const uint64_t i = tile0 + static_cast<uint64_t>(j) * kT + threadIdx.x;
    if (i >= p.n) continue;
    float v = kInPlace ? a[j] : x[j] + a[j];  // one fp32 add, as on the CPU
    if (isfinite(v)) {
      const double d = v;
      s.sum += d;
      s.sumSq += d * d;
      s.sumAbs += fabs(d);
      s.maxAbs = fmaxf(s.maxAbs, fabsf(v));
      if (!kInPlace) r[i] = v;
    } else {
      ++s.nonFinite;
      r[i] = 0.0f;  // the CPU's zeroNonFinite, fused; a magnitude candidate never is non-finite
      v = random ? 0.0f : v;
    }
    a[j] = v;
  }
  if (tc != 0) {
    Exchange(tmp.exchange).StripedToBlocked(a);  // thread t: items t*kI .. t*kI+kI-1
    __syncthreads();
    const uint64_t b0 = tile0 + static_cast<uint64_t>(threadIdx.x) * kI;
    uint32_t flags = 0;
#pragma unroll
    for (int j = 0; j < kI; ++j) {
      const uint64_t i = b0 + j;
      if (i >= p.n) continue;
      const uint32_t key = random ? randomKey(p.seed, i) : magnitudeKey(a[j]);
      const bool c = random ? key >= tc : (key >= tc && key < kInfKey);
      flags |= (c ? 1u : 0u) << j;
    }
    const uint32_t count = __popc(flags);
    uint32_t off = 0;
    if (tile == 0) {
      uint32_t agg = 0;
      Scan(tmp.scan).ExclusiveSum(count, off, agg);
      if (threadIdx.x == 0) tiles.SetInclusive(0, agg);
    } else {
      Prefix op(tiles, prefixTmp, ::cuda::std::plus<uint32_t>{}, tile);
      Scan(tmp.scan).ExclusiveSum(count, off, op);  // off includes the tiles before
    }
    if (tile == static_cast<int>(gridDim.x) - 1 && threadIdx.x == kT - 1) st->numCand = off + count;
#pragma unroll
    for (int j = 0; j < kI; ++j) {
      if (!(flags >> j & 1u)) continue;
      if (off < p.candCap) {
        candV[off] = a[j];
        candI[off] = static_cast<uint32_t>(b0 + j);
      }
      ++off;
    }
    __syncthreads();
  }
  const TileStats t = Reduce(tmp.reduce).Reduce(s, StatsOp{});
  if (threadIdx.x == 0) partials[tile] = t;
}

__global__ void dgcSampleKernel(const float* r, SelectPlan p, uint32_t* keys) {
  const uint64_t j = blockIdx.x * static_cast<uint64_t>(kT) + threadIdx.x;
  if (j < p.dgcCount) keys[j] = magnitudeKey(r[p.dgcStart + j * p.dgcStride]);
}

// Statistics reduced in a fixed order (thread t: tiles t, t+1024, ... then a
// block reduction), the non-finite policy, and the search's first window.
__global__ void __launch_bounds__(kWide)
    planKernel(SelectPlan p, State* st, const TileStats* partials, int tiles, const uint32_t* dgcKeys) {
  using Reduce = cub::BlockReduce<TileStats, kWide>;
  __shared__ typename Reduce::TempStorage red;
  __shared__ uint32_t counts[2048];
  __shared__ WideSuffix::Storage sfx;
  __shared__ int go;
  TileStats s{0, 0, 0, 0.0f, 0};
  // The same order as one tile at a time (thread t: t, t + kWide, ...), with
  // kStatsBatch partials in flight per thread.
  for (int t0 = threadIdx.x; t0 < tiles; t0 += kWide * kStatsBatch) {
    TileStats v[kStatsBatch];
#pragma unroll
    for (int u = 0; u < kStatsBatch; ++u) {
      const int t = t0 + kWide * u;
      if (t < tiles) v[u] = partials[t];
    }
#pragma unroll
    for (int u = 0; u < kStatsBatch; ++u)
      if (t0 + kWide * u < tiles) s = StatsOp{}(s, v[u]);
  }
  const TileStats tot = Reduce(red).Reduce(s, StatsOp{});
  if (threadIdx.x == 0) {
    compress::AccStats a;
    a.sum = tot.sum;
    a.sumSq = tot.sumSq;
    a.sumAbs = tot.sumAbs;
    a.maxAbs = tot.maxAbs;
    a.nonFinite = tot.nonFinite;
    st->stats = a;
    st->moments = planMoments(a, p.n);
    const auto policy = static_cast<compress::NonFinitePolicy>(p.nonFinitePolicy);
    if (a.nonFinite > 0 && policy != compress::NonFinitePolicy::kZero) {
      st->skip = 1;
      if (policy == compress::NonFinitePolicy::kError) st->failure = static_cast<int32_t>(Code::kNumeric);
    }
    go = !st->skip && !p.dense;
  }
  __syncthreads();
  if (!go) return;
  uint32_t dgcKey = 0;
  if (isKind(p, SelectorKind::kDgc)) dgcKey = blockKthLargest(dgcKeys, p.dgcCount, p.dgcKSample, counts, sfx);
  if (threadIdx.x == 0) {
    st->search = planSearch(p, st->stats.maxAbs, st->moments, st->tc, dgcKey);
    st->fromCand = st->tc != 0 && st->numCand <= p.candCap;
  }
}

__global__ void takeAllKernel(float* r, uint64_t n, float* values, uint32_t* indices, State* st) {
  if (st->skip) return;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    values[i] = r[i];
    indices[i] = static_cast<uint32_t>(i);
    r[i] = 0.0f;
  }
}

__global__ void finishKernel(SelectPlan p, State* st, uint32_t* d_count, int32_t* d_failure, DeviceSelectInfo* info) {
  const State& s = *st;
  uint64_t count = 0;
  int32_t failure = s.failure;
  const compress::Selection sel = s.search.selection();
  if (!s.skip) {
    if (p.dense) {
      count = p.n;
    } else if (!s.search.done()) {
      failure = static_cast<int32_t>(Code::kInternal);  // the pass budget cannot run out
    } else if (sel.count > 0) {
      // What was written (and zeroed in r) is what the block carries, so that a
      // broken invariant loses nothing; it still fails the step.
      count = s.written;
      if (s.written != sel.count) failure = static_cast<int32_t>(Code::kInternal);
    }
  }
  *d_count = static_cast<uint32_t>(count);
  if (d_failure) *d_failure = failure;
  if (!info) return;
  DeviceSelectInfo o{};
  o.count = count;
  o.k = p.k;
  o.nonFinite = s.stats.nonFinite;
  o.mean = s.moments.mean;
  o.stddev = s.moments.stddev;
  o.meanAbs = s.moments.meanAbs;
  o.maxAbs = s.stats.maxAbs;
  o.failure = failure;
  o.exact = 1;
  o.inBand = 1;
  o.passes = 1 + s.fullPasses + (p.dense && !s.skip ? 1 : 0);
  if (!s.skip && !p.dense && s.search.done()) {
    o.inBand = s.search.inBand();
    o.exact = s.search.exact();
    if (!s.fromCand && sel.count > 0) ++o.passes;  // compaction over the buffer
    if (!isKind(p, SelectorKind::kRandomk) && sel.count > 0)
      o.threshold = compress::keyToMagnitude(sel.hasTie ? sel.keyTie : static_cast<uint32_t>(sel.keyAll));
  }
  *info = o;
}

unsigned blocksFor(uint64_t items, unsigned threads) {
  return static_cast<unsigned>(std::max<uint64_t>(1, (items + threads - 1) / threads));
}

std::atomic<bool> perPassLaunches{false};

// What the launch shapes need from the device (select_plan.h), asked once per
// device: no stream work, so safe while a stream is being captured.
int queryLimits(int dev, LaunchLimits* out) {
  int coop = 0, sms = 0, passPerSm = 0, compactPerSm = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev)) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) return e;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&passPerSm, passLoopKernel, kT, 0)) return e;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&compactPerSm, compactKernel, kT, 0)) return e;
  out->cooperative = coop != 0 && passPerSm > 0;
  out->sms = static_cast<unsigned>(std::max(sms, 1));
  out->passResident = static_cast<unsigned>(std::max(passPerSm, 0) * std::max(sms, 0));
  out->compactResident = static_cast<unsigned>(std::max(compactPerSm, 1) * std::max(sms, 1));
  return 0;
}

std::mutex limitsMu;
std::map<int, LaunchLimits> limitsCache;

// A device that refused the cooperative launch (for example an MPS client
// with a share of the multiprocessors) takes a launch per pass from then on.
void noCooperativeLaunch() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return;
  std::lock_guard<std::mutex> lock(limitsMu);
  limitsCache[dev].cooperative = false;
}

int launchLimits(LaunchLimits* out) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lock(limitsMu);
  if (e == cudaSuccess) {
    auto it = limitsCache.find(dev);
    if (it != limitsCache.end()) {
      *out = it->second;
      return 0;
    }
    LaunchLimits l;
    e = static_cast<cudaError_t>(queryLimits(dev, &l));
    if (e == cudaSuccess) limitsCache[dev] = l;
    *out = l;
  }
  if (e != cudaSuccess) (void)cudaGetLastError();  // a failed query must not surface at a later launch check
  return e;
}

template <typename Src, bool kInPlace>
int launchFront(Src src, const SelectPlan& p, const SelectLayout& l, char* ws, float* r, Tiles32 t32, cudaStream_t s) {
  auto* st = reinterpret_cast<State*>(ws + l.state);
  auto* keys = reinterpret_cast<uint32_t*>(ws + l.sample);
  if (p.sampleFloor) {
    auto* hist = reinterpret_cast<uint32_t*>(ws + l.hist);
    sampleKernel<Src, kInPlace><<<blocksFor(p.sampled, kT), kT, 0, s>>>(src, r, p, keys, st, hist);
    if (cudaError_t e = cudaGetLastError()) return e;
    floorKernel<<<1, kWide, 0, s>>>(p, keys, st, hist);
    if (cudaError_t e = cudaGetLastError()) return e;
  }
  fusedKernel<Src, kInPlace><<<static_cast<unsigned>(l.fusedTiles), kT, 0, s>>>(
      src, r, p, st, t32, reinterpret_cast<TileStats*>(ws + l.partials), reinterpret_cast<float*>(ws + l.candValues),
      reinterpret_cast<uint32_t*>(ws + l.candIndices));
  return cudaGetLastError();
}

}  // namespace

size_t selectStateBytes() { return sizeof(State); }

void setPerPassLaunchesForTesting(bool on) { perPassLaunches.store(on); }

int prepareSelectLaunches() {
  LaunchLimits unused;
  return launchLimits(&unused);
}

int selectTileBytes(size_t fusedTiles, size_t compactTiles, size_t* bytes32, size_t* bytes64) {
  if (cudaError_t e = Tiles32::AllocationSize(static_cast<int>(fusedTiles), *bytes32)) return e;
  return Tiles64::AllocationSize(static_cast<int>(compactTiles), *bytes64);
}

int enqueueSelect(const SelectPlan& p, const SelectLayout& l, void* workspace, const SelectBuffers& b, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  char* ws = static_cast<char*>(workspace);
  auto* st = reinterpret_cast<State*>(ws + l.state);
  auto* hist = reinterpret_cast<uint32_t*>(ws + l.hist);
  auto* candV = reinterpret_cast<float*>(ws + l.candValues);
  auto* candI = reinterpret_cast<uint32_t*>(ws + l.candIndices);
  size_t bytes32 = 0, bytes64 = 0;
  if (int e = selectTileBytes(l.fusedTiles, l.compactTiles, &bytes32, &bytes64)) return e;
  Tiles32 t32;
  Tiles64 t64;
  if (cudaError_t e = t32.Init(static_cast<int>(l.fusedTiles), ws + l.tiles32, bytes32)) return e;
  if (cudaError_t e = t64.Init(static_cast<int>(l.compactTiles), ws + l.tiles64, bytes64)) return e;

  initKernel<<<blocksFor(std::max(l.fusedTiles, l.compactTiles), kT), kT, 0, s>>>(
      st, hist, t32, static_cast<int>(l.fusedTiles), t64, static_cast<int>(l.compactTiles), p);
  if (cudaError_t e = cudaGetLastError()) return e;
  int e = 0;
  if (b.x == nullptr) {
    e = launchFront<SrcF32, true>(SrcF32{nullptr}, p, l, ws, b.r, t32, s);
  } else if (b.dtype == MGS_FLOAT32) {
    e = launchFront<SrcF32, false>(SrcF32{static_cast<const float*>(b.x)}, p, l, ws, b.r, t32, s);
  } else if (b.dtype == MGS_FLOAT16) {
    e = launchFront<SrcF16, false>(SrcF16{static_cast<const __half*>(b.x)}, p, l, ws, b.r, t32, s);
  } else if (b.dtype == MGS_BFLOAT16) {
    e = launchFront<SrcBF16, false>(SrcBF16{static_cast<const __nv_bfloat16*>(b.x)}, p, l, ws, b.r, t32, s);
  } else {
    return cudaErrorInvalidValue;
  }
  if (e) return e;
  auto* sampleKeys = reinterpret_cast<uint32_t*>(ws + l.sample);
  if (p.kind == static_cast<int>(SelectorKind::kDgc) && !p.dense) {
    dgcSampleKernel<<<blocksFor(p.dgcCount, kT), kT, 0, s>>>(b.r, p, sampleKeys);
    if (cudaError_t err = cudaGetLastError()) return err;
  }
  planKernel<<<1, kWide, 0, s>>>(p, st, reinterpret_cast<TileStats*>(ws + l.partials), static_cast<int>(l.fusedTiles),
                                 sampleKeys);
  if (cudaError_t err = cudaGetLastError()) return err;
  if (p.dense) {
    takeAllKernel<<<blocksFor(std::min<uint64_t>(p.n, 1u << 22), kT), kT, 0, s>>>(b.r, p.n, b.outValues, b.outIndices,
                                                                                  st);
    if (cudaError_t err = cudaGetLastError()) return err;
  } else {
    LaunchLimits lim;
    if (int err = launchLimits(&lim)) return err;
    const SelectGrids g = selectGrids(p, l, lim, perPassLaunches.load(std::memory_order_relaxed));
    bool perPass = g.coopBlocks == 0;
    if (!perPass) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(g.coopBlocks);
      cfg.blockDim = dim3(kT);
      cfg.stream = s;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeCooperative;
      attr[0].val.cooperative = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      const float* rc = b.r;
      const cudaError_t err = cudaLaunchKernelEx(&cfg, passLoopKernel, p, st, hist, rc,
                                                 static_cast<const float*>(candV), static_cast<const uint32_t*>(candI));
      if (err == cudaErrorCooperativeLaunchTooLarge || err == cudaErrorNotSupported) {
        (void)cudaGetLastError();  // nothing was enqueued: take the launches per pass instead
        noCooperativeLaunch();
        perPass = true;
      } else if (err != cudaSuccess) {
        return err;
      }
    }
    if (perPass) {
      for (int pass = 0; pass < p.passLaunches; ++pass) {
        passKernel<<<g.passBlocks, kT, 0, s>>>(p, st, hist, b.r, candV, candI);
        if (cudaError_t err = cudaGetLastError()) return err;
      }
    }
    compactKernel<<<g.compactBlocks, kT, 0, s>>>(p, st, b.r, candV, candI, t64, b.outValues, b.outIndices);
    if (cudaError_t err = cudaGetLastError()) return err;
  }
  finishKernel<<<1, 1, 0, s>>>(p, st, b.d_count, b.d_failure, b.d_info);
  return cudaGetLastError();
}

}  // namespace mgs::cuda::kernels
