#include "gpu_selector.h"

#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>

#include "common/check.h"
#include "compress_kernels.h"
#include "compress/selector_plan.h"
#include "compress/threshold_search.h"

namespace mgs::cuda {
namespace {

using compress::kHistBins;
namespace k = kernels;

constexpr size_t kAlign = 256;
size_t alignUp(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

#define MGS_CUDA_OK(expr, what)                                                              \
  do {                                                                                       \
    const int _e = (expr);                                                                   \
    MGS_ENSURE(_e == 0, kCuda,                                                               \
               what << ": " << cudaGetErrorString(static_cast<cudaError_t>(_e))              \
                    << ::mgs::detail::where(__FILE__, __LINE__));                            \
  } while (0)

// Carves the device workspace; the same layout for the size query and the call.
struct Layout {
  size_t temp = 0, partials = 0, stats = 0, hist = 0, numSel = 0, ranks = 0, sampleIn = 0,
         sampleOut = 0, total = 0, tempBytes = 0;
};
Status layoutFor(size_t n, size_t sampleCap, Layout* l) {
  MGS_CUDA_OK(k::compressTempBytes(n, sampleCap, &l->tempBytes), "CUB size query");
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += alignUp(std::max<size_t>(bytes, 1));
    return at;
  };
  l->temp = take(l->tempBytes);
  l->partials = take(sizeof(k::DeviceStats) * k::statsPartials(n));
  l->stats = take(sizeof(k::DeviceStats));
  l->hist = take(sizeof(unsigned) * (kHistBins + 1));
  l->numSel = take(sizeof(uint32_t));
  l->ranks = take(sizeof(uint32_t) * n);
  l->sampleIn = take(sizeof(uint32_t) * sampleCap);
  l->sampleOut = take(sizeof(uint32_t) * sampleCap);
  l->total = off;
  return Status::OK();
}

}  // namespace

Status GpuSelector::create(const std::string& name, const compress::SelectorOptions& options,
                           std::unique_ptr<GpuSelector>* out) {
  std::unique_ptr<compress::Selector> cpu;  // validates name and options the same way
  MGS_RETURN_IF_ERROR(compress::Selector::create(name, options, &cpu));
  out->reset(new GpuSelector(cpu->kind(), options));
  return Status::OK();
}

size_t GpuSelector::maxCount(size_t n) const {
  return compress::Selector(kind_, options_).maxCount(n);
}

Status GpuSelector::workspaceBytes(size_t n, size_t* bytes) const {
  Layout l;
  const size_t cap = kind_ == compress::SelectorKind::kDgc
                         ? compress::dgcSampleCapacity(n, options_.density) : 0;
  MGS_RETURN_IF_ERROR(layoutFor(n, cap, &l));
  *bytes = l.total;
  return Status::OK();
}

Status GpuSelector::select(const compress::SelectArgs& a, compress::SelectResult* result,
                           void* stream) const {
  using compress::SelectorKind;
  MGS_RETURN_IF_ERROR(compress::checkSelectArgs(a, result));
  const size_t n = a.n;
  if (n == 0) {
    result->inBand = true;
    return Status::OK();
  }
  MGS_ENSURE(a.x && a.residual && a.outValues && a.outIndices && a.workspace, kInvalidArgument,
             "select '" << a.name << "': null buffer");
  Layout l;
  const size_t cap = kind_ == SelectorKind::kDgc ? compress::dgcSampleCapacity(n, options_.density) : 0;
  MGS_RETURN_IF_ERROR(layoutFor(n, cap, &l));
  MGS_ENSURE(a.workspaceBytes >= l.total, kInvalidArgument,
             "select '" << a.name << "': workspace " << a.workspaceBytes << " < " << l.total);
  char* ws = static_cast<char*>(a.workspace);
  void* temp = ws + l.temp;
  auto* stats = reinterpret_cast<k::DeviceStats*>(ws + l.stats);
  auto* hist = reinterpret_cast<unsigned*>(ws + l.hist);
  const auto s = static_cast<cudaStream_t>(stream);
  const size_t kk = compress::kForDensity(n, options_.density);
  result->k = kk;

  // Pass 1: acc and its statistics; they reach the host (sync 1).
  MGS_CUDA_OK(k::accumulateStats(a.x, a.dtype, a.residual, n,
                                 reinterpret_cast<k::DeviceStats*>(ws + l.partials), stats, temp,
                                 l.tempBytes, stream),
              "accumulateStats");
  k::DeviceStats hs;
  MGS_CUDA_OK(cudaMemcpyAsync(&hs, stats, sizeof(hs), cudaMemcpyDeviceToHost, s), "stats copy");
  MGS_CUDA_OK(cudaStreamSynchronize(s), "stats sync");
  ++result->hostSyncs;
  const compress::AccStats st{hs.sum, hs.sumSq, hs.sumAbs, hs.maxAbs, hs.nonFinite};
  const compress::Moments m = compress::moments(st, n);
  result->mean = m.mean;
  result->stddev = m.stddev;
  result->meanAbs = m.meanAbs;
  result->maxAbs = hs.maxAbs;
  result->nonFinite = hs.nonFinite;
  result->passes = 1;
  if (hs.nonFinite > 0) {
    MGS_CUDA_OK(k::zeroNonFinite(a.residual, n, stream), "zeroNonFinite");
    ++result->passes;
    MGS_ENSURE(options_.nonFinite != compress::NonFinitePolicy::kError, kNumeric,
               "non-finite gradient in '" << a.name << "': " << hs.nonFinite << " of " << n
                                          << " values are NaN or Inf (dropped from the residual)");
    if (options_.nonFinite == compress::NonFinitePolicy::kSkip) return Status::OK();
  }
  if (kind_ == SelectorKind::kNone || kk >= n) {
    MGS_CUDA_OK(k::takeAll(a.residual, n, a.outValues, a.outIndices, stream), "takeAll");
    result->count = n;
    result->inBand = true;
    ++result->passes;
    return Status::OK();
  }

  const compress::SearchConfig cfg = compress::searchConfig(kind_, options_, kk);
  k::Keys keys = k::Keys::kMagnitude;
  uint64_t seed = 0;
  uint64_t top = uint64_t{compress::magnitudeKey(hs.maxAbs)} + (hs.maxAbs > 0 ? 1 : 0);
  uint32_t lo = 1;
  bool roundLo = true;
  if (kind_ == SelectorKind::kRandomk) {
    keys = k::Keys::kRandom;
    seed = compress::stepSeed(options_.seed, a.step);
    top = uint64_t{1} << 32;
    lo = compress::randomStartKey(n, kk);
  } else if (kind_ == SelectorKind::kDgc) {
    const compress::DgcSample ds = compress::dgcSample(n, options_.density, options_.seed, a.step);
    auto* sorted = reinterpret_cast<uint32_t*>(ws + l.sampleOut);
    MGS_CUDA_OK(k::sampleKeysDescending(a.residual, ds.start, ds.stride, ds.count,
                                        reinterpret_cast<uint32_t*>(ws + l.sampleIn), sorted, temp,
                                        l.tempBytes, stream),
                "dgc sample");
    uint32_t key = 0;
    MGS_CUDA_OK(cudaMemcpyAsync(&key, sorted + (ds.kSample - 1), sizeof(key),
                                cudaMemcpyDeviceToHost, s),
                "dgc threshold copy");
    MGS_CUDA_OK(cudaStreamSynchronize(s), "dgc sync");
    ++result->hostSyncs;
    lo = std::max<uint32_t>(key, 1);
    roundLo = false;
  } else {
    lo = compress::startKey(kind_, options_, n, kk, m);
  }

  // Search passes: one histogram to the host each (one sync each).
  compress::ThresholdSearch search(cfg, top, lo, roundLo);
  unsigned h32[kHistBins + 1];
  uint64_t h64[kHistBins + 1];
  while (!search.done()) {
    const compress::Window w = search.window();
    MGS_CUDA_OK(k::histogram(keys, a.residual, seed, n, w.lo, w.shift, hist, temp, l.tempBytes,
                             stream),
                "histogram");
    MGS_CUDA_OK(cudaMemcpyAsync(h32, hist, sizeof(h32), cudaMemcpyDeviceToHost, s), "hist copy");
    MGS_CUDA_OK(cudaStreamSynchronize(s), "hist sync");
    ++result->hostSyncs;
    std::copy(h32, h32 + kHistBins + 1, h64);
    search.consume(h64);
  }
  const compress::Selection& sel = search.selection();
  const k::Rule rule{sel.keyAll, sel.keyTie, sel.hasTie ? 1 : 0, sel.quota};
  MGS_CUDA_OK(k::compact(keys, a.residual, seed, n, rule, sel.count,
                         reinterpret_cast<uint32_t*>(ws + l.ranks),
                         reinterpret_cast<uint32_t*>(ws + l.numSel), a.outValues, a.outIndices,
                         temp, l.tempBytes, stream),
              "compact");
  result->count = sel.count;
  result->passes += search.passes() + 1 + (sel.hasTie ? 1 : 0);
  result->inBand = search.inBand();
  result->exact = search.exact();
  if (kind_ != SelectorKind::kRandomk && sel.count > 0)
    result->threshold = compress::keyToMagnitude(sel.hasTie ? sel.keyTie
                                                            : static_cast<uint32_t>(sel.keyAll));
  return Status::OK();
}

Status scatterAddWorkspaceBytes(size_t total, size_t* bytes) {
  size_t temp = 0;
  MGS_CUDA_OK(k::scatterAddTempBytes(total, &temp), "CUB size query");
  *bytes = alignUp(temp) + alignUp(total * sizeof(uint32_t)) + alignUp(total * sizeof(float));
  return Status::OK();
}

Status scatterAdd(const float* d_values, const uint32_t* d_indices, size_t total, size_t n,
                  float scale, float* d_out, void* d_workspace, size_t workspaceBytes,
                  void* stream) {
  size_t need = 0, temp = 0;
  MGS_RETURN_IF_ERROR(scatterAddWorkspaceBytes(total, &need));
  MGS_ENSURE(workspaceBytes >= need, kInvalidArgument,
             "scatterAdd: workspace " << workspaceBytes << " < " << need);
  MGS_CUDA_OK(k::scatterAddTempBytes(total, &temp), "CUB size query");
  char* ws = static_cast<char*>(d_workspace);
  MGS_CUDA_OK(k::scatterAdd(d_values, d_indices, total, n, scale, d_out, ws + alignUp(temp), ws,
                            temp, stream),
              "scatterAdd");
  return Status::OK();
}

int visibleDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

}  // namespace mgs::cuda
