// Counted host synchronisations (host_sync.h). Ran on an H100.
#include "host_sync.h"

#include <atomic>

#include <cuda_runtime_api.h>

#include "common/cuda_check.h"

namespace mgs::cuda {
namespace {
std::atomic<uint64_t> g_syncs{0};
}  // namespace

uint64_t hostSyncs() { return g_syncs.load(std::memory_order_relaxed); }

Status syncStream(void* stream) {
  g_syncs.fetch_add(1, std::memory_order_relaxed);
  MGS_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  return Status::OK();
}

Status syncEvent(void* event) {
  g_syncs.fetch_add(1, std::memory_order_relaxed);
  MGS_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  return Status::OK();
}

Status copyToHostBlocking(void* dst, const void* d_src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  g_syncs.fetch_add(1, std::memory_order_relaxed);
  MGS_CUDA_CHECK(cudaMemcpy(dst, d_src, bytes, cudaMemcpyDeviceToHost));
  return Status::OK();
}

Status copyToDeviceBlocking(void* d_dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  g_syncs.fetch_add(1, std::memory_order_relaxed);
  MGS_CUDA_CHECK(cudaMemcpy(d_dst, src, bytes, cudaMemcpyHostToDevice));
  return Status::OK();
}

}  // namespace mgs::cuda
