#include "gpu_selector.h"

#include <algorithm>

#include <cuda_runtime_api.h>

#include "common/check.h"
#include "compress_kernels.h"
#include "common/cuda_check.h"
#include "select_kernels.h"

namespace mgs::cuda {
namespace {

namespace k = kernels;
size_t alignUp(size_t b) { return (b + kLayoutAlign - 1) / kLayoutAlign * kLayoutAlign; }

// select()'s device words (count, failure, info) after the selector's layout.
struct SyncTail {
  uint32_t count;
  int32_t failure;
  DeviceSelectInfo info;
};
constexpr size_t kTailBytes = (sizeof(SyncTail) + kLayoutAlign - 1) / kLayoutAlign * kLayoutAlign;

}  // namespace

Status GpuSelector::create(const std::string& name, const compress::SelectorOptions& options,
                           std::unique_ptr<GpuSelector>* out) {
  std::unique_ptr<compress::Selector> cpu;  // validates name and options the same way
  MGS_RETURN_IF_ERROR(compress::Selector::create(name, options, &cpu));
  out->reset(new GpuSelector(cpu->kind(), options));
  // The launch shapes' device query, here rather than in a first enqueue()
  // that may be inside a stream capture; enqueue() asks again (cached) and
  // reports a failure there.
  if (visibleDevices() > 0) (void)k::prepareSelectLaunches();
  return Status::OK();
}

size_t GpuSelector::maxCount(size_t n) const { return compress::Selector(kind_, options_).maxCount(n); }

Status GpuSelector::layout(size_t n, uint64_t step, SelectPlan* plan, SelectLayout* l) const {
  *plan = makeSelectPlan(kind_, options_, n, step);
  const size_t fused = tilesFor(n);
  const size_t compact = tilesFor(std::max<size_t>(n, plan->candCap));
  size_t b32 = 0, b64 = 0;
  MGS_CUDA_CHECK(k::selectTileBytes(fused, compact, &b32, &b64));
  *l = makeSelectLayout(*plan, k::selectStateBytes(), b32, b64);
  return Status::OK();
}

Status GpuSelector::workspaceBytes(size_t n, size_t* bytes) const {
  SelectPlan p;
  SelectLayout l;
  MGS_RETURN_IF_ERROR(layout(n, 0, &p, &l));
  *bytes = l.total + kTailBytes;
  return Status::OK();
}

Status GpuSelector::enqueue(const compress::SelectArgs& a, const DeviceSelectOutputs& out, void* stream) const {
  compress::SelectResult unused;
  MGS_RETURN_IF_ERROR(compress::checkSelectArgs(a, &unused));
  MGS_ENSURE(a.parts.count == 0, kInvalidArgument,
             "select '" << a.name << "': gradient parts are read by the CPU selector only (fuse them first)");
  MGS_ENSURE(out.d_count != nullptr, kInvalidArgument, "select '" << a.name << "': no device word for the count");
  if (a.n == 0) {
    // Nothing to select; the device words still say so (no host sync).
    MGS_CUDA_CHECK(cudaMemsetAsync(out.d_count, 0, sizeof(uint32_t), static_cast<cudaStream_t>(stream)));
    if (out.d_failure)
      MGS_CUDA_CHECK(cudaMemsetAsync(out.d_failure, 0, sizeof(int32_t), static_cast<cudaStream_t>(stream)));
    if (out.d_info) {
      DeviceSelectInfo z{};
      z.inBand = z.exact = 1;
      // Pageable source: the copy is staged by the driver before this returns.
      MGS_CUDA_CHECK(
          cudaMemcpyAsync(out.d_info, &z, sizeof(z), cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
    }
    return Status::OK();
  }
  MGS_ENSURE(a.residual && a.outValues && a.outIndices && a.workspace, kInvalidArgument,
             "select '" << a.name << "': null device buffer");
  MGS_ENSURE(a.x != a.residual, kInvalidArgument,
             "select '" << a.name << "': x aliases the residual (pass x = nullptr for in place)");
  SelectPlan p;
  SelectLayout l;
  MGS_RETURN_IF_ERROR(layout(a.n, a.step, &p, &l));
  MGS_ENSURE(a.workspaceBytes >= l.total, kInvalidArgument,
             "select '" << a.name << "': workspace " << a.workspaceBytes << " < " << l.total << " bytes");
  MGS_ENSURE(reinterpret_cast<uintptr_t>(a.workspace) % kLayoutAlign == 0, kInvalidArgument,
             "select '" << a.name << "': workspace not " << kLayoutAlign << "-byte aligned");
  k::SelectBuffers b;
  b.x = a.x;
  b.dtype = a.dtype;
  b.r = a.residual;
  b.outValues = a.outValues;
  b.outIndices = a.outIndices;
  b.d_count = out.d_count;
  b.d_failure = out.d_failure;
  b.d_info = out.d_info;
  MGS_CUDA_CHECK(k::enqueueSelect(p, l, a.workspace, b, stream));
  return Status::OK();
}

Status GpuSelector::select(const compress::SelectArgs& a, compress::SelectResult* result, void* stream) const {
  MGS_RETURN_IF_ERROR(compress::checkSelectArgs(a, result));
  MGS_ENSURE(a.parts.count == 0, kInvalidArgument,
             "select '" << a.name << "': gradient parts are read by the CPU selector only (fuse them first)");
  SelectPlan p;
  SelectLayout l;
  MGS_RETURN_IF_ERROR(layout(a.n, a.step, &p, &l));
  MGS_ENSURE(a.workspace != nullptr && a.workspaceBytes >= l.total + kTailBytes, kInvalidArgument,
             "select '" << a.name << "': workspace " << a.workspaceBytes << " < " << l.total + kTailBytes << " bytes");
  auto* tail = reinterpret_cast<SyncTail*>(static_cast<char*>(a.workspace) + l.total);
  compress::SelectArgs inner = a;
  inner.workspaceBytes = l.total;
  MGS_RETURN_IF_ERROR(enqueue(inner, DeviceSelectOutputs{&tail->count, &tail->failure, &tail->info}, stream));
  SyncTail h{};
  const auto s = static_cast<cudaStream_t>(stream);
  MGS_CUDA_CHECK(cudaMemcpyAsync(&h, tail, sizeof(h), cudaMemcpyDeviceToHost, s));
  MGS_CUDA_CHECK(cudaStreamSynchronize(s));
  result->hostSyncs = 1;
  result->count = h.count;
  result->k = h.info.k;
  result->threshold = h.info.threshold;
  result->passes = h.info.passes;
  result->inBand = h.info.inBand != 0;
  result->exact = h.info.exact != 0;
  result->nonFinite = h.info.nonFinite;
  result->mean = h.info.mean;
  result->stddev = h.info.stddev;
  result->meanAbs = h.info.meanAbs;
  result->maxAbs = h.info.maxAbs;
  if (a.n == 0) return Status::OK();
  MGS_ENSURE(h.failure != static_cast<int32_t>(Code::kNumeric), kNumeric,
             "non-finite gradient in '" << a.name << "': " << h.info.nonFinite << " of " << a.n
                                        << " values are NaN or Inf (dropped from the residual)");
  MGS_ENSURE(h.failure == 0, kInternal,
             "select '" << a.name << "': device selector failed (code " << h.failure << ", count " << h.count << ")");
  return Status::OK();
}

Status scatterAddWorkspaceBytes(size_t total, size_t* bytes) {
  size_t temp = 0;
  MGS_CUDA_CHECK(k::scatterAddTempBytes(total, &temp));
  *bytes = alignUp(temp) + alignUp(total * sizeof(uint32_t)) + alignUp(total * sizeof(float));
  return Status::OK();
}

Status scatterAdd(const float* d_values, const uint32_t* d_indices, size_t total, size_t n, float scale, float* d_out,
                  void* d_workspace, size_t workspaceBytes, void* stream) {
  size_t need = 0, temp = 0;
  MGS_RETURN_IF_ERROR(scatterAddWorkspaceBytes(total, &need));
  MGS_ENSURE(workspaceBytes >= need, kInvalidArgument, "scatterAdd: workspace " << workspaceBytes << " < " << need);
  MGS_CUDA_CHECK(k::scatterAddTempBytes(total, &temp));
  char* ws = static_cast<char*>(d_workspace);
  MGS_CUDA_CHECK(k::scatterAdd(d_values, d_indices, total, n, scale, d_out, ws + alignUp(temp), ws, temp, stream));
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
