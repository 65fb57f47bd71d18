// Host-side helpers for CUDA tensors. In a build without CUDA every function
// returns kUnsupported, and enqueue rejects CUDA tensors before they get here.
// Until the NCCL backend lands, CUDA tensors are staged through host memory
// for MPI; scaling runs on the GPU (cuda/runtime_kernels).
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"
#include "core/local_stage.h"
#include "core/request.h"

namespace mgs::device {

bool builtWithCuda();
// kUnsupported / kCuda with a clear message if `t` cannot be served here.
Status checkUsable(const TensorDesc& t);
// Block until the framework's ready event (or its stream) has passed.
Status waitReady(const TensorDesc& t);
Status copyToHost(void* dst, const TensorDesc& src, size_t bytes);
Status copyFromHost(const TensorDesc& dst, const void* src, size_t bytes);
// Scale `t` in place on the GPU and wait for it.
Status scale(const TensorDesc& t, double factor);
// The local stage on this device (core/local_stage.h has the contract), for
// buckets whose tensors live on it; kUnsupported (and *out untouched) where
// none exists: then the pipeline stages CUDA inputs through the host stage.
Status createLocalStage(const LocalStageOptions& options, std::unique_ptr<LocalStage>* out);

}  // namespace mgs::device
