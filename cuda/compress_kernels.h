// Sparse decompression on the device (cuda/compress_kernels.cu). Plain host
// header: no CUDA types, streams are void* (cudaStream_t), every function
// returns a cudaError_t as int (0 = ok), is asynchronous on `stream`,
// allocates nothing and never synchronises (CUB's two-phase temp storage).
// The selectors' kernels are in select_kernels.cu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mgs/mgs.h"

namespace mgs::cuda::kernels {

// Decompression, bitwise equal to compress::scatterAdd: the `total` pairs of
// all ranks (concatenated in rank order) are stably sorted by index, each
// output element is summed in that order from +0.0f and scaled. Indices >= n
// are ignored (the pad sentinel of algorithms.md 7.7). d_work: total uint32 +
// total float; temp: scatterAddTempBytes(total).
int scatterAddTempBytes(size_t total, size_t* bytes);
int scatterAdd(const float* d_values, const uint32_t* d_indices, size_t total, size_t n, float scale, float* d_out,
               void* d_work, void* d_temp, size_t tempBytes, void* stream);

}  // namespace mgs::cuda::kernels
