// Pieces the CUDA local stage's two files share (cuda_local_stage.cc: the
// stage; cuda_device_buckets.cc: device buckets). Internal to cuda/.
// Ran on an H100 (src/device/cuda/cuda_local_stage.h).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "common/check.h"
#include "cuda_local_stage.h"

namespace mgs::cuda {

inline cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

// Device buffers taken from the pool for one call, given back on every path.
struct Scratch {
  DeviceSlabPool& pool;
  std::vector<void*> bufs;
  ~Scratch() {
    for (void* p : bufs) pool.give(p);
  }
  Status take(size_t bytes, void** out) {
    MGS_RETURN_IF_ERROR(pool.take(bytes, out));
    bufs.push_back(*out);
    return Status::OK();
  }
};

struct CudaLocalStage::Slab : LocalSlab {
  BufPtr buf;
  size_t n = 0;
  size_t size() const override { return n; }
};

}  // namespace mgs::cuda
