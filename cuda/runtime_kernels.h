// Host entry points of the CUDA kernels the runtime core uses for dense
// collectives on CUDA tensors. Plain C++ header: no CUDA types leak out, so
// src/core compiles without nvcc. Streams are passed as void* (cudaStream_t).
#pragma once

#include <cstddef>

#include "mgs/mgs.h"

namespace mgs::cuda {

// x[i] *= factor for n elements of `dtype` on `stream` (async, no host sync).
// Integer dtypes are scaled in double and truncated toward zero, like the host path.
// Returns a cudaError_t as int (0 on success).
int scaleAsync(void* d_data, mgs_dtype_t dtype, size_t n, double factor, void* stream);

// Number of visible CUDA devices; 0 when no driver or device is present.
int deviceCount();

}  // namespace mgs::cuda
