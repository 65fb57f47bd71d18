// The selectors on a CUDA device. Plain host header (no CUDA types; streams
// are void*). Same contract as compress::Selector (src/compress/selector.h),
// with device pointers in SelectArgs and the workspace in device memory:
//   acc = float(x) + residual (x == nullptr: in place, the residual holds acc);
//   out_values/out_indices = the selected entries (ascending index);
//   residual = acc with the sent entries (and non-finite entries) zeroed.
// Same names, options, candidate floor and threshold search (the search code
// itself is shared: threshold_search.h runs on the device), so the GPU
// selects the same entries as the CPU oracle; the one documented difference:
// gaussiank/ldte may start one octave apart when the GPU's and CPU's sums
// round across a power of two, and then stop at another count in the band.
//
// enqueue() makes NO host synchronisation and no allocation: it enqueues the
// kernels of cuda/select_kernels.cu on `stream` and returns; the count, the
// failure code and DeviceSelectInfo are written on the device. select() is
// the synchronous convenience (tests, benchmarks): one host sync per call.
//
// Ran on an H100 (docs/compressors.md, "GPU status"): gpu/compress against the
// CPU oracle; logic also tested on the CPU (tests/gpu/select_plan_test.cc).
// Thread-safety: immutable after create(); one call per workspace at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "compress/selector.h"
#include "select_plan.h"

namespace mgs::cuda {

struct DeviceSelectOutputs {
  uint32_t* d_count = nullptr;         // required: device word, the selected count
  int32_t* d_failure = nullptr;        // optional: 0 or an mgs::Code (kNumeric, kInternal)
  DeviceSelectInfo* d_info = nullptr;  // optional
};

class GpuSelector {
 public:
  static Status create(const std::string& name, const compress::SelectorOptions& options,
                       std::unique_ptr<GpuSelector>* out);

  compress::SelectorKind kind() const { return kind_; }
  const compress::SelectorOptions& options() const { return options_; }
  size_t maxCount(size_t n) const;
  // Device workspace for buffers of up to n elements (256-byte aligned base).
  Status workspaceBytes(size_t n, size_t* bytes) const;
  // Asynchronous, zero host syncs. Errors returned here are argument errors
  // found on the host and launch failures; data errors (non-finite input)
  // arrive in *out.d_failure.
  Status enqueue(const compress::SelectArgs& args, const DeviceSelectOutputs& out, void* stream) const;
  // enqueue() + copy of the info + stream sync; non-finite input under
  // NonFinitePolicy::kError becomes Status kNumeric as on the CPU.
  Status select(const compress::SelectArgs& args, compress::SelectResult* result, void* stream) const;

 private:
  GpuSelector(compress::SelectorKind kind, const compress::SelectorOptions& options) : kind_(kind), options_(options) {}
  Status layout(size_t n, uint64_t step, SelectPlan* plan, SelectLayout* l) const;
  compress::SelectorKind kind_;
  compress::SelectorOptions options_;
};

// Sparse decompression on the device, bitwise equal to compress::scatterAdd:
// pairs of all ranks concatenated in rank order -> d_out[0..n) scaled.
// Indices >= n are ignored. Workspace: scatterAddWorkspaceBytes(total).
Status scatterAddWorkspaceBytes(size_t total, size_t* bytes);
Status scatterAdd(const float* d_values, const uint32_t* d_indices, size_t total, size_t n, float scale, float* d_out,
                  void* d_workspace, size_t workspaceBytes, void* stream);

// Number of visible CUDA devices (0 without a driver or device).
int visibleDevices();

}  // namespace mgs::cuda
