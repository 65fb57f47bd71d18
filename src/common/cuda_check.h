// The CUDA check macro of the cuda/ layer and of the NCCL communicator
// (src/comm/nccl): a failed call returns Status(kCuda) naming the call, the
// CUDA error name and text, and file:line. It lives in src/common so that
// src/comm never includes from cuda/, which stands above it. Include only from code
// compiled with the CUDA toolkit.
#pragma once

#include <cuda_runtime_api.h>

#include "common/check.h"

#define MGS_CUDA_CHECK(expr)                                                                            \
  do {                                                                                                  \
    const cudaError_t _mgs_ce = static_cast<cudaError_t>(expr);                                         \
    MGS_ENSURE(_mgs_ce == cudaSuccess, kCuda,                                                           \
               #expr << ": " << cudaGetErrorName(_mgs_ce) << " (" << cudaGetErrorString(_mgs_ce) << ")" \
                     << ::mgs::detail::where(__FILE__, __LINE__));                                      \
  } while (0)
