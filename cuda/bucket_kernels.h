// Kernels of the device-resident bucket (cuda/bucket_kernels.cu), driven by
// DeviceBucketEngine (cuda/device_bucket.cc). Plain host header: streams are
// void*, every function returns a cudaError_t as int (0 = ok), only enqueues
// on `stream`, allocates nothing and never synchronises.
// Ran on an H100 (gpu/bucket).
#pragma once

#include <cstddef>
#include <cstdint>

#include "device_bucket.h"

namespace mgs::cuda::kernels {

// d_acc[off_m + i] = float(src_m[i]) * prescale_m (+ d_residual[off_m + i]),
// rounded like the CPU (no FMA contraction); d_nonfinite[m] (zeroed here
// first) counts the non-finite results of member m. One launch for all
// members; maxCount = the largest member count (sizes the grid).
int fuseMembers(const FuseDesc* d_descs, uint32_t members, size_t maxCount, const float* d_residual, float* d_acc,
                uint32_t* d_nonfinite, void* stream);

// Zeroes the block header before the selector writes its uint32 count into
// the low word (little-endian) of it.
int clearHeader(void* d_block, void* stream);

// After the selector: header = failure code of the first member with a
// non-finite value, else UINT64_MAX if the selector failed (d_failure != 0,
// kNumeric -> member 0 as the CPU pipeline does) or the count exceeds cap;
// then seal = header ^ block::kAllgatherSeal.
int sealBlock(void* d_block, size_t cap, const uint32_t* d_nonfinite, uint32_t members, const int32_t* d_failure,
              void* stream);

// The scatter of P received blocks into the outputs (see DeviceBucketEngine::
// enqueueScatter). d_sum: n floats, d_touched: n bytes, d_verdict:
// verdictWords(P) words; all scratch, initialised here.
int scatterBlocks(const void* d_recv, int P, size_t cap, size_t n, uint32_t members, const OutDesc* d_out,
                  size_t maxCount, bool propagate, float* d_sum, uint8_t* d_touched, uint64_t* d_verdict, void* stream);

// The agreed exchange (never run on a GPU). gatherZero: d_vals[j] =
// d_acc[d_idx[j]], then d_acc[d_idx[j]] = +0 (count distinct indices).
int gatherZero(float* d_acc, const uint32_t* d_idx, size_t count, float* d_vals, void* stream);
// scatterAgreed: every output +0 but d_vals[j] at d_idx[j] (assigned, not
// added), each such entry times its member's factor unless it is 1, then
// converted to the output's dtype: bitwise the CPU's scatterAgreed. Scratch
// as scatterBlocks (d_verdict: one word).
int scatterAgreed(const uint32_t* d_idx, const float* d_vals, size_t count, size_t n, uint32_t members,
                  const OutDesc* d_out, size_t maxCount, float* d_sum, uint8_t* d_touched, uint64_t* d_verdict,
                  void* stream);

}  // namespace mgs::cuda::kernels
