// main() of the GPU test binaries: skipped (exit 77, ctest's SKIP_RETURN_CODE)
// when no CUDA device is visible, so a machine without a GPU never counts
// them as passed.
#pragma once

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>

namespace mgs::test {

inline int runGpuTests(int argc, char** argv, const char* what) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device visible (cudaGetDeviceCount gives 0); %s need a GPU\n", what);
    return 77;
  }
  return Catch::Session().run(argc, argv);
}

}  // namespace mgs::test
