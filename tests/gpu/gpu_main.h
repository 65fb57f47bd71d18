// main() of the GPU test binaries (gpu_main.cc, compiled once per build tree
// with Catch2's runner): skipped (exit 77, ctest's SKIP_RETURN_CODE) when no
// CUDA device is visible, so a machine without a GPU never counts them as
// passed. Each binary names what it tests for that message.
#pragma once

namespace mgs::test {

// Defined by each GPU test binary, e.g. "the GPU selector tests".
extern const char* const kGpuTestsWhat;

}  // namespace mgs::test
