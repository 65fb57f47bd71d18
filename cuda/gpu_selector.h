// The selectors on a CUDA device. Plain host header (no CUDA types; streams
// are void*). Same contract as compress::Selector (src/compress/selector.h),
// with device pointers in SelectArgs and the workspace in device memory:
//   acc = float(x) + residual; out_values/out_indices = the selected entries
//   (ascending index); residual = acc with the sent entries zeroed.
// Same names, same options and the same threshold search fed with the same
// histograms, so the GPU selects the same entries as the CPU (up to windows
// that differ when the CPU and GPU statistics straddle a power of two).
//
// Host synchronisation: select() copies to the host only what the search
// must branch on (the statistics, one histogram per search pass, dgc's
// sample threshold) and reports the number in SelectResult::hostSyncs. The
// compaction's count is known from the histogram, so it needs no copy.
// Thread-safety: immutable after create(); one call per stream at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "compress/selector.h"

namespace mgs::cuda {

class GpuSelector {
 public:
  static Status create(const std::string& name, const compress::SelectorOptions& options,
                       std::unique_ptr<GpuSelector>* out);

  compress::SelectorKind kind() const { return kind_; }
  size_t maxCount(size_t n) const;
  // Device workspace for buffers of up to n elements (256-byte aligned base).
  Status workspaceBytes(size_t n, size_t* bytes) const;
  // args: device pointers (x, residual, outValues, outIndices, workspace).
  // Returns when the outputs are enqueued on `stream` (the count is on the host).
  Status select(const compress::SelectArgs& args, compress::SelectResult* result,
                void* stream) const;

 private:
  GpuSelector(compress::SelectorKind kind, const compress::SelectorOptions& options)
      : kind_(kind), options_(options) {}
  compress::SelectorKind kind_;
  compress::SelectorOptions options_;
};

// Sparse decompression on the device, bitwise equal to compress::scatterAdd:
// pairs of all ranks concatenated in rank order -> d_out[0..n) scaled.
// Indices >= n are ignored. Workspace: scatterAddWorkspaceBytes(total).
Status scatterAddWorkspaceBytes(size_t total, size_t* bytes);
Status scatterAdd(const float* d_values, const uint32_t* d_indices, size_t total, size_t n,
                  float scale, float* d_out, void* d_workspace, size_t workspaceBytes,
                  void* stream);

// Number of visible CUDA devices (0 without a driver or device).
int visibleDevices();

}  // namespace mgs::cuda
