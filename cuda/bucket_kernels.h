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

// The agreed exchange's device bucket (never run on a GPU).
// agreedGather, after the broadcast of the leader's block d_block (the
// allgather layout): d_vals[0 .. cap + P) = 0; then d_vals[cap + rank] =
// this rank's verdict slot (block::agreedSlot): hostSlot if not 0, else on
// the leader from its block's failure code, on the others from the first
// member with a non-finite count in d_words (M counts); d_state[0] = 1 if
// the block is malformed (a torn seal, a header that is neither a count <=
// cap nor a failure code, an index >= n), else 0; and where this rank's
// slot is 0 and the block carries a count, d_vals[j] = the value at the
// leader's index j (the leader's from the block, the others' from d_acc,
// which keeps +0 there; d_acc may be null on a rank whose slot is set).
int agreedGather(const void* d_block, size_t cap, size_t n, uint32_t bucketMembers, int P, int rank, bool lead,
                 uint32_t hostSlot, const uint32_t* d_words, float* d_acc, float* d_vals, uint64_t* d_state,
                 void* stream);
// agreedScatter, after the sum of d_vals over every rank: the verdict words
// (verdictWords(P): [0] the kind as scatterBlocks decides it, [1] the
// leader if the block is malformed else UINT64_MAX, [2 + r] the leader's
// count where rank r's slot is 0, else the failure code of its slot), then
// for kOk every output +0 but the sums at the leader's indices, times the
// member's factor unless 1 (bitwise scatterAgreed); NaN in every output for
// kNaNWritten; nothing otherwise. Scratch as scatterBlocks; `members` may
// be 0 (no output written, the verdict only).
int agreedScatter(const void* d_block, size_t cap, size_t n, uint32_t bucketMembers, const float* d_vals,
                  const uint64_t* d_state, int P, int leader, uint32_t members, const OutDesc* d_out, size_t maxCount,
                  bool propagate, float* d_sum, uint8_t* d_touched, uint64_t* d_verdict, void* stream);

// The dense fallback's device bucket (never run on a GPU).
// denseGather, after the fuse: d_vals[n .. n + P) = 0, d_vals[n + rank] =
// this rank's verdict slot (hostSlot if not 0, else the first member with
// a non-finite count in d_words, else 0); d_vals[0 .. n) = d_acc and d_acc
// = +0 (everything is sent), or d_vals[0 .. n) = 0 where hostSlot is set
// (d_acc may then be null).
int denseGather(float* d_acc, size_t n, uint32_t bucketMembers, int P, int rank, uint32_t hostSlot,
                const uint32_t* d_words, float* d_vals, void* stream);
// denseScatter, after the sum of d_vals over every rank: the verdict words
// (verdictWords(P): [0] the kind as scatterBlocks decides it with cap 0,
// [1] UINT64_MAX, [2 + r] 0 where rank r's slot is 0, else the failure code
// of its slot), then for kOk every output entry the sum times the member's
// factor unless 1, converted (bitwise ScatterStage::unfuseDense); NaN in
// every output for kNaNWritten; nothing otherwise. `members` may be 0.
int denseScatter(const float* d_vals, size_t n, uint32_t bucketMembers, int P, uint32_t members, const OutDesc* d_out,
                 size_t maxCount, bool propagate, uint64_t* d_verdict, void* stream);

// The hierarchical exchange's device bucket (never run on a GPU), after
// the node broadcast of the `nodes` leaders' blocks (d_recv, node order)
// and the sum of the P verdict slots (d_slots) over every rank: the
// verdict words (2 + nodes + P: [0] the kind as scatterBlocks decides it
// over the nodes' headers and the slots' codes together, [1] the lowest
// malformed node or UINT64_MAX, [2 + i] node i's header, [2 + nodes + r]
// rank r's code: 0 where its slot is 0), then the nodes' blocks added in
// node order from +0 and written as scatterBlocks writes them. Scratch as
// scatterBlocks.
int scatterHierarchical(const void* d_recv, int nodes, const float* d_slots, int P, size_t cap, size_t n,
                        uint32_t bucketMembers, uint32_t members, const OutDesc* d_out, size_t maxCount, bool propagate,
                        float* d_sum, uint8_t* d_touched, uint64_t* d_verdict, void* stream);

}  // namespace mgs::cuda::kernels
