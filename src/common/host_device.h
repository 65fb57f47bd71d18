// MGS_HOST_DEVICE: a function compiled for the host and, under nvcc, for the
// device too (the byte layout and the threshold search share code this way).
#pragma once

#if defined(__CUDACC__)
#define MGS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MGS_HOST_DEVICE inline
#endif
