// The one Catch2 runner of the GPU test binaries (see gpu_main.h). Catch2's
// implementation is the most expensive code in a test binary to compile;
// built here once, not once per binary. This shared runner was written
// without a GPU and has not run on one yet: here every binary skips (77).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>

#include "gpu_main.h"

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device visible (cudaGetDeviceCount gives 0); %s need a GPU\n",
                mgs::test::kGpuTestsWhat);
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
