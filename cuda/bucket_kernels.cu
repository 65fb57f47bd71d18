// Kernels of the device-resident bucket: fuse, header seal, and the scatter
// of received blocks. Ran on an H100 (2026-11-26): tests/gpu/bucket_gpu_test.cc
// compares them with the CPU reference (scripts/gpu_check.sh), memcheck clean.
// The agreed exchange's gatherZero and scatterAgreed, and its device
// bucket's agreedGather and agreedScatter (2026-12-01), and the dense
// fallback's denseGather and denseScatter and the hierarchical exchange's
// scatterHierarchical (2026-12-02), have never run on a GPU (tests/gpu/multirank_gpu_test.cc, device_threads_gpu_test.cc).
//
// Bitwise agreement with the CPU pipeline needs two things: no FMA
// contraction (nvcc contracts a*b+c by default; the CPU rounds the product
// first), hence __fmul_rn/__fadd_rn; and the CPU's summation order for an
// output entry, which is rank order from +0. Each rank's block holds every
// index at most once (the selector's output is ascending), so one launch per
// rank adds without atomics and the launches' stream order is the rank order.
#include "bucket_kernels.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/status.h"

namespace mgs::cuda::kernels {
namespace {

constexpr int kThreads = 256;

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

// Blocks per member (grid.x) for a grid-stride loop over the largest member.
unsigned chunksFor(size_t maxCount) {
  const size_t b = (maxCount + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(b, 1024)));
}
unsigned membersGrid(uint32_t members) { return std::max<uint32_t>(1, std::min<uint32_t>(members, 65535)); }

__device__ float loadAsFloat(const void* p, uint32_t dtype, size_t i) {
  switch (dtype) {
    case MGS_FLOAT16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case MGS_BFLOAT16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ void storeFromFloat(void* p, uint32_t dtype, size_t i, float v) {
  switch (dtype) {
    case MGS_FLOAT16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    case MGS_BFLOAT16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

// The quiet NaN bit patterns of the CPU's fillNaN (core/nonfinite.cc).
__device__ void storeNaN(void* p, uint32_t dtype, size_t i) {
  switch (dtype) {
    case MGS_FLOAT16:
      static_cast<uint16_t*>(p)[i] = 0x7e00u;
      break;
    case MGS_BFLOAT16:
      static_cast<uint16_t*>(p)[i] = 0x7fc0u;
      break;
    default:
      static_cast<uint32_t*>(p)[i] = 0x7fc00000u;
  }
}

// grid = (chunks, members); each block strides over its member.
__global__ void fuseKernel(const FuseDesc* __restrict__ descs, uint32_t members, const float* __restrict__ residual,
                           float* __restrict__ acc, uint32_t* __restrict__ nonfinite) {
  __shared__ uint32_t blockBad;
  for (uint32_t m = blockIdx.y; m < members; m += gridDim.y) {
    const FuseDesc d = descs[m];
    if (threadIdx.x == 0) blockBad = 0;
    __syncthreads();
    uint32_t bad = 0;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < d.count; i += stride) {
      float v = __fmul_rn(loadAsFloat(d.src, d.dtype, i), d.prescale);
      if (residual) v = __fadd_rn(v, residual[d.offset + i]);
      acc[d.offset + i] = v;
      bad += isfinite(v) ? 0u : 1u;
    }
    if (bad) atomicAdd(&blockBad, bad);
    __syncthreads();
    if (threadIdx.x == 0 && blockBad) atomicAdd(&nonfinite[m], blockBad);
    __syncthreads();  // blockBad is reset for the next member
  }
}

__global__ void sealKernel(unsigned char* block, size_t cap, const uint32_t* nonfinite, uint32_t members,
                           const int32_t* failure) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  uint64_t header = *reinterpret_cast<const uint64_t*>(block);
  int bad = -1;
  for (uint32_t m = 0; m < members && bad < 0; ++m)
    if (nonfinite[m]) bad = static_cast<int>(m);
  if (bad < 0 && failure && *failure != 0) bad = *failure == static_cast<int32_t>(Code::kNumeric) ? 0 : -2;
  if (bad == -1 && header > cap) bad = -2;  // cannot happen with a correct selector: fail, never overrun
  if (bad != -1) header = block::failureCode(bad >= 0 ? bad : -1);
  *reinterpret_cast<uint64_t*>(block) = header;
  *reinterpret_cast<uint64_t*>(block + block::sealOffset(cap)) = header ^ block::kAllgatherSeal;
}

// A failure code (common/block_layout.h): UINT64_MAX, non-finite values in
// member m (UINT64_MAX - 1 - m), or a staging code.
__device__ bool validFailure(uint64_t h, uint32_t members) {
  return h == UINT64_MAX || UINT64_MAX - 1 - h < members || block::isStagingCode(h, members);
}

// grid = (chunks, P). Copies each header into the verdict words and marks the
// lowest malformed rank: a torn seal, a header that is neither a count <= cap
// nor a failure code, an index >= n or a non-finite value (as the CPU's
// validateBlocks). verdict[1] starts at UINT64_MAX.
__global__ void checkKernel(const unsigned char* recv, size_t bb, size_t cap, size_t n, uint32_t members,
                            uint64_t* verdict) {
  const int r = blockIdx.y;
  const unsigned char* block = recv + static_cast<size_t>(r) * bb;
  const uint64_t header = *reinterpret_cast<const uint64_t*>(block);
  bool bad = false;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    verdict[2 + r] = header;
    const uint64_t seal = *reinterpret_cast<const uint64_t*>(block + bb - 8);
    bad = seal != (header ^ block::kAllgatherSeal) || (header > cap && !validFailure(header, members));
  }
  if (header <= cap) {
    const float* v = reinterpret_cast<const float*>(block + 8);
    const uint32_t* idx = reinterpret_cast<const uint32_t*>(block + block::indicesOffset(cap));
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < header; j += stride)
      if (idx[j] >= n || !isfinite(v[j])) bad = true;
  }
  if (bad) atomicMin(reinterpret_cast<unsigned long long*>(&verdict[1]), static_cast<unsigned long long>(r));
}

// One thread: the verdict every rank takes (every rank holds the same blocks).
__global__ void decideKernel(int P, size_t cap, bool propagate, uint64_t* verdict) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  uint64_t kind = static_cast<uint64_t>(VerdictKind::kOk);
  if (verdict[1] != UINT64_MAX) {
    kind = static_cast<uint64_t>(VerdictKind::kMalformed);
  } else {
    bool failed = false, other = false;
    for (int r = 0; r < P; ++r) {
      const uint64_t h = verdict[2 + r];
      if (h <= cap) continue;
      failed = true;
      // Without details, or a staging code (bits 40..62 clear; a non-finite
      // code has them set): not a non-finite value, never NaN outputs.
      if (h == UINT64_MAX || ((h >> 40) & 0x7fffffull) == 0) other = true;
    }
    if (failed) kind = static_cast<uint64_t>(!other && propagate ? VerdictKind::kNaNWritten : VerdictKind::kFailed);
  }
  verdict[0] = kind;
}

// Adds rank r's pairs into sum (indices unique within a block: no atomics).
__global__ void addRankKernel(const unsigned char* block, size_t cap, float* sum, uint8_t* touched,
                              const uint64_t* verdict) {
  if (verdict[0] != static_cast<uint64_t>(VerdictKind::kOk)) return;
  const uint64_t count = *reinterpret_cast<const uint64_t*>(block);  // <= cap: checked
  const float* v = reinterpret_cast<const float*>(block + 8);
  const uint32_t* idx = reinterpret_cast<const uint32_t*>(block + block::indicesOffset(cap));
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < count; j += stride) {
    const uint32_t i = idx[j];
    sum[i] = __fadd_rn(sum[i], v[j]);
    touched[i] = 1;
  }
}

// grid = (chunks, members): scale each touched entry once (every entry
// where touched is null: the dense fallback) and convert, or NaN everywhere
// (kNaNWritten), or leave the outputs alone (a failure).
__global__ void writeOutKernel(const OutDesc* __restrict__ descs, uint32_t members, const float* __restrict__ sum,
                               const uint8_t* __restrict__ touched, const uint64_t* verdict) {
  const uint64_t kind = verdict[0];
  if (kind != static_cast<uint64_t>(VerdictKind::kOk) && kind != static_cast<uint64_t>(VerdictKind::kNaNWritten))
    return;
  for (uint32_t m = blockIdx.y; m < members; m += gridDim.y) {
    const OutDesc d = descs[m];
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < d.count; i += stride) {
      if (kind == static_cast<uint64_t>(VerdictKind::kNaNWritten)) {
        storeNaN(d.dst, d.dtype, i);
        continue;
      }
      float s = sum[d.offset + i];
      if ((touched == nullptr || touched[d.offset + i]) && d.factor != 1.0f) s = __fmul_rn(s, d.factor);
      storeFromFloat(d.dst, d.dtype, i, s);
    }
  }
}

// The agreed exchange's gather (indices distinct: no atomics): the entries
// leave the accumulator, which keeps +0 there.
__global__ void gatherZeroKernel(float* __restrict__ acc, const uint32_t* __restrict__ idx, size_t count,
                                 float* __restrict__ vals) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < count; j += stride) {
    const uint32_t i = idx[j];
    vals[j] = acc[i];
    acc[i] = 0.0f;
  }
}

// The agreed exchange's sums into the (zeroed) sum: an assignment, so a
// summed -0 stays -0, as the CPU's scatterAgreed writes it.
__global__ void assignKernel(const uint32_t* __restrict__ idx, const float* __restrict__ vals, size_t count,
                             float* __restrict__ sum, uint8_t* __restrict__ touched) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < count; j += stride) {
    const uint32_t i = idx[j];
    sum[i] = vals[j];
    touched[i] = 1;
  }
}

// A verdict slot summed over every rank as a header: `contributed` where it
// is 0, the failure code it carries otherwise, UINT64_MAX where the float
// is not a slot any rank could have written (block_layout.h agreedSlot).
__device__ uint64_t slotHeader(float v, uint32_t members, uint64_t contributed) {
  const uint32_t slot = v >= 0.0f && v < 16777216.0f ? static_cast<uint32_t>(v) : 0xffffffffu;
  const bool exact = slot != 0xffffffffu && static_cast<float>(slot) == v;
  return !exact ? UINT64_MAX : slot == 0 ? contributed : block::agreedSlotCode(slot, members);
}

// ---- The agreed exchange's device bucket ----------------------------------------

// One thread: the block's check and this rank's slot.
__global__ void agreedSlotKernel(const unsigned char* block, size_t cap, uint32_t members, int P, int rank, bool lead,
                                 uint32_t hostSlot, const uint32_t* words, float* vals, uint64_t* state) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const uint64_t header = *reinterpret_cast<const uint64_t*>(block);
  const uint64_t seal = *reinterpret_cast<const uint64_t*>(block + block::sealOffset(cap));
  state[0] = seal != (header ^ block::kAllgatherSeal) || (header > cap && !validFailure(header, members)) ? 1 : 0;
  uint32_t slot = hostSlot;
  if (slot == 0 && lead && header > cap) {
    // The leader's own failure, as its block says it.
    if (header == UINT64_MAX)
      slot = block::agreedSlot(-1, 0);
    else if (UINT64_MAX - 1 - header < members)
      slot = block::agreedSlot(static_cast<int>(UINT64_MAX - 1 - header), 0);
    else if (block::isStagingCode(header, members))
      slot = block::agreedSlot(static_cast<int>((header >> 8) & 0xffffffffull), static_cast<uint8_t>(header & 0xff));
    else
      slot = block::agreedSlot(-1, 0);
  }
  if (slot == 0 && !lead)
    for (uint32_t m = 0; m < members && slot == 0; ++m)
      if (words[m]) slot = block::agreedSlot(static_cast<int>(m), 0);
  vals[cap + static_cast<size_t>(rank)] = static_cast<float>(slot);
  (void)P;
}

// grid-stride over the leader's count: this rank's values at its indices.
__global__ void agreedGatherKernel(const unsigned char* block, size_t cap, size_t n, int rank, bool lead,
                                   float* __restrict__ acc, float* __restrict__ vals, uint64_t* state) {
  const uint64_t count = *reinterpret_cast<const uint64_t*>(block);
  if (state[0] != 0 || count > cap || vals[cap + static_cast<size_t>(rank)] != 0.0f) return;
  const float* bv = reinterpret_cast<const float*>(block + block::valuesOffset());
  const uint32_t* idx = reinterpret_cast<const uint32_t*>(block + block::indicesOffset(cap));
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < count; j += stride) {
    const uint32_t i = idx[j];
    if (i >= n) {  // malformed: no rank applies this bucket (the same bytes everywhere)
      atomicExch(reinterpret_cast<unsigned long long*>(state), 1ull);
      continue;
    }
    if (lead) {
      vals[j] = bv[j];
    } else {
      vals[j] = acc[i];
      acc[i] = 0.0f;
    }
  }
}

// One thread: the verdict words from the block, the state and the summed slots.
__global__ void agreedVerdictKernel(const unsigned char* block, size_t cap, uint32_t members, const float* vals,
                                    const uint64_t* state, int P, int leader, uint64_t* verdict) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const uint64_t header = *reinterpret_cast<const uint64_t*>(block);
  verdict[1] = state[0] != 0 ? static_cast<uint64_t>(leader) : UINT64_MAX;
  for (int r = 0; r < P; ++r) verdict[2 + r] = slotHeader(vals[cap + static_cast<size_t>(r)], members, header <= cap ? header : 0);
}

// The sums assigned at the leader's indices (kOk only).
__global__ void agreedAssignKernel(const unsigned char* block, size_t cap, const float* __restrict__ vals,
                                   float* __restrict__ sum, uint8_t* __restrict__ touched, const uint64_t* verdict) {
  if (verdict[0] != static_cast<uint64_t>(VerdictKind::kOk)) return;
  const uint64_t count = *reinterpret_cast<const uint64_t*>(block);  // <= cap and every index < n: checked
  const uint32_t* idx = reinterpret_cast<const uint32_t*>(block + block::indicesOffset(cap));
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < count; j += stride) {
    sum[idx[j]] = vals[j];
    touched[idx[j]] = 1;
  }
}

// ---- The dense fallback's device bucket --------------------------------------------

// One thread: this rank's slot (the host's, else its first non-finite member).
__global__ void denseSlotKernel(uint32_t members, size_t n, int rank, uint32_t hostSlot, const uint32_t* words,
                                float* vals) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  uint32_t slot = hostSlot;
  for (uint32_t m = 0; m < members && slot == 0 && words; ++m)
    if (words[m]) slot = block::agreedSlot(static_cast<int>(m), 0);
  vals[n + static_cast<size_t>(rank)] = static_cast<float>(slot);
}

// One thread: every rank's code from the summed slots (0: it contributed).
__global__ void slotCodesKernel(const float* slots, int P, uint32_t members, uint64_t* codes) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int r = 0; r < P; ++r) codes[r] = slotHeader(slots[r], members, 0);
}

// The scatter of `blocks` received blocks (rank or node order), their
// headers the first verdict words, then (d_slots given) P ranks' codes
// from their summed verdict slots; the verdict over all of them.
int scatterReceived(const void* d_recv, int blocks, const float* d_slots, int P, size_t cap, size_t n,
                    uint32_t bucketMembers, uint32_t members, const OutDesc* d_out, size_t maxCount, bool propagate,
                    float* d_sum, uint8_t* d_touched, uint64_t* d_verdict, void* stream) {
  const auto s = asStream(stream);
  const size_t bb = block::allgatherBytes(cap);
  const auto* recv = static_cast<const unsigned char*>(d_recv);
  // verdict[0..1] = UINT64_MAX (kind is always rewritten; [1] is the atomicMin start).
  if (cudaError_t e = cudaMemsetAsync(d_verdict, 0xFF, 2 * sizeof(uint64_t), s)) return e;
  if (n) {
    if (cudaError_t e = cudaMemsetAsync(d_sum, 0, n * sizeof(float), s)) return e;  // +0.0f
    if (cudaError_t e = cudaMemsetAsync(d_touched, 0, n, s)) return e;
  }
  checkKernel<<<dim3(chunksFor(cap), static_cast<unsigned>(blocks)), kThreads, 0, s>>>(recv, bb, cap, n, bucketMembers,
                                                                                    d_verdict);
  const int words = d_slots ? blocks + P : blocks;
  if (d_slots) slotCodesKernel<<<1, 1, 0, s>>>(d_slots, P, bucketMembers, d_verdict + 2 + blocks);
  decideKernel<<<1, 1, 0, s>>>(words, cap, propagate, d_verdict);
  for (int r = 0; r < blocks && cap > 0; ++r)
    addRankKernel<<<chunksFor(cap), kThreads, 0, s>>>(recv + static_cast<size_t>(r) * bb, cap, d_sum, d_touched,
                                                      d_verdict);
  if (members && maxCount)
    writeOutKernel<<<dim3(chunksFor(maxCount), membersGrid(members)), kThreads, 0, s>>>(d_out, members, d_sum,
                                                                                        d_touched, d_verdict);
  return cudaGetLastError();
}

}  // namespace

int scatterHierarchical(const void* d_recv, int nodes, const float* d_slots, int P, size_t cap, size_t n,
                        uint32_t bucketMembers, uint32_t members, const OutDesc* d_out, size_t maxCount, bool propagate,
                        float* d_sum, uint8_t* d_touched, uint64_t* d_verdict, void* stream) {
  if (nodes < 1 || P < 1 || nodes + P > 65535 || d_slots == nullptr) return cudaErrorInvalidValue;
  return scatterReceived(d_recv, nodes, d_slots, P, cap, n, bucketMembers, members, d_out, maxCount, propagate, d_sum,
                         d_touched, d_verdict, stream);
}

int denseGather(float* d_acc, size_t n, uint32_t bucketMembers, int P, int rank, uint32_t hostSlot,
                const uint32_t* d_words, float* d_vals, void* stream) {
  const auto s = asStream(stream);
  if (P < 1 || rank < 0 || rank >= P) return cudaErrorInvalidValue;
  if (hostSlot == 0 && (d_acc == nullptr || d_words == nullptr)) return cudaErrorInvalidValue;
  if (cudaError_t e = cudaMemsetAsync(d_vals + n, 0, static_cast<size_t>(P) * sizeof(float), s)) return e;
  if (hostSlot != 0) {
    if (cudaError_t e = cudaMemsetAsync(d_vals, 0, n * sizeof(float), s)) return e;
  } else if (n) {
    if (cudaError_t e = cudaMemcpyAsync(d_vals, d_acc, n * sizeof(float), cudaMemcpyDeviceToDevice, s)) return e;
    if (cudaError_t e = cudaMemsetAsync(d_acc, 0, n * sizeof(float), s)) return e;  // +0.0f: all was sent
  }
  denseSlotKernel<<<1, 1, 0, s>>>(bucketMembers, n, rank, hostSlot, hostSlot ? nullptr : d_words, d_vals);
  return cudaGetLastError();
}

int denseScatter(const float* d_vals, size_t n, uint32_t bucketMembers, int P, uint32_t members, const OutDesc* d_out,
                 size_t maxCount, bool propagate, uint64_t* d_verdict, void* stream) {
  const auto s = asStream(stream);
  if (P < 1 || P > 65535) return cudaErrorInvalidValue;
  // verdict[1] = UINT64_MAX (nothing can be malformed), [2 + r] rank r's code (cap 0: 0 is "contributed").
  if (cudaError_t e = cudaMemsetAsync(d_verdict, 0xFF, 2 * sizeof(uint64_t), s)) return e;
  slotCodesKernel<<<1, 1, 0, s>>>(d_vals + n, P, bucketMembers, d_verdict + 2);
  decideKernel<<<1, 1, 0, s>>>(P, 0, propagate, d_verdict);
  if (members && maxCount)
    writeOutKernel<<<dim3(chunksFor(maxCount), membersGrid(members)), kThreads, 0, s>>>(d_out, members, d_vals,
                                                                                        nullptr, d_verdict);
  return cudaGetLastError();
}

int agreedGather(const void* d_block, size_t cap, size_t n, uint32_t bucketMembers, int P, int rank, bool lead,
                 uint32_t hostSlot, const uint32_t* d_words, float* d_acc, float* d_vals, uint64_t* d_state,
                 void* stream) {
  const auto s = asStream(stream);
  if (P < 1 || rank < 0 || rank >= P) return cudaErrorInvalidValue;
  if (!lead && hostSlot == 0 && (d_acc == nullptr || d_words == nullptr)) return cudaErrorInvalidValue;
  const auto* block = static_cast<const unsigned char*>(d_block);
  if (cudaError_t e = cudaMemsetAsync(d_vals, 0, (cap + static_cast<size_t>(P)) * sizeof(float), s)) return e;
  agreedSlotKernel<<<1, 1, 0, s>>>(block, cap, bucketMembers, P, rank, lead, hostSlot, d_words, d_vals, d_state);
  if (cap) agreedGatherKernel<<<chunksFor(cap), kThreads, 0, s>>>(block, cap, n, rank, lead, d_acc, d_vals, d_state);
  return cudaGetLastError();
}

int agreedScatter(const void* d_block, size_t cap, size_t n, uint32_t bucketMembers, const float* d_vals,
                  const uint64_t* d_state, int P, int leader, uint32_t members, const OutDesc* d_out, size_t maxCount,
                  bool propagate, float* d_sum, uint8_t* d_touched, uint64_t* d_verdict, void* stream) {
  const auto s = asStream(stream);
  if (P < 1 || P > 65535 || leader < 0 || leader >= P) return cudaErrorInvalidValue;
  const auto* block = static_cast<const unsigned char*>(d_block);
  if (n) {
    if (cudaError_t e = cudaMemsetAsync(d_sum, 0, n * sizeof(float), s)) return e;  // +0.0f
    if (cudaError_t e = cudaMemsetAsync(d_touched, 0, n, s)) return e;
  }
  agreedVerdictKernel<<<1, 1, 0, s>>>(block, cap, bucketMembers, d_vals, d_state, P, leader, d_verdict);
  decideKernel<<<1, 1, 0, s>>>(P, cap, propagate, d_verdict);
  if (cap) agreedAssignKernel<<<chunksFor(cap), kThreads, 0, s>>>(block, cap, d_vals, d_sum, d_touched, d_verdict);
  if (members && maxCount)
    writeOutKernel<<<dim3(chunksFor(maxCount), membersGrid(members)), kThreads, 0, s>>>(d_out, members, d_sum,
                                                                                        d_touched, d_verdict);
  return cudaGetLastError();
}

int gatherZero(float* d_acc, const uint32_t* d_idx, size_t count, float* d_vals, void* stream) {
  if (count == 0) return 0;
  gatherZeroKernel<<<chunksFor(count), kThreads, 0, asStream(stream)>>>(d_acc, d_idx, count, d_vals);
  return cudaGetLastError();
}

int scatterAgreed(const uint32_t* d_idx, const float* d_vals, size_t count, size_t n, uint32_t members,
                  const OutDesc* d_out, size_t maxCount, float* d_sum, uint8_t* d_touched, uint64_t* d_verdict,
                  void* stream) {
  const auto s = asStream(stream);
  // The verdict word writeOutKernel reads: kOk (0); the host decided it.
  if (cudaError_t e = cudaMemsetAsync(d_verdict, 0, sizeof(uint64_t), s)) return e;
  if (n) {
    if (cudaError_t e = cudaMemsetAsync(d_sum, 0, n * sizeof(float), s)) return e;  // +0.0f
    if (cudaError_t e = cudaMemsetAsync(d_touched, 0, n, s)) return e;
  }
  if (count) assignKernel<<<chunksFor(count), kThreads, 0, s>>>(d_idx, d_vals, count, d_sum, d_touched);
  if (members && maxCount)
    writeOutKernel<<<dim3(chunksFor(maxCount), membersGrid(members)), kThreads, 0, s>>>(d_out, members, d_sum,
                                                                                        d_touched, d_verdict);
  return cudaGetLastError();
}

int fuseMembers(const FuseDesc* d_descs, uint32_t members, size_t maxCount, const float* d_residual, float* d_acc,
                uint32_t* d_nonfinite, void* stream) {
  const auto s = asStream(stream);
  if (members == 0) return 0;
  if (cudaError_t e = cudaMemsetAsync(d_nonfinite, 0, members * sizeof(uint32_t), s)) return e;
  if (maxCount == 0) return 0;
  fuseKernel<<<dim3(chunksFor(maxCount), membersGrid(members)), kThreads, 0, s>>>(d_descs, members, d_residual, d_acc,
                                                                                  d_nonfinite);
  return cudaGetLastError();
}

int clearHeader(void* d_block, void* stream) { return cudaMemsetAsync(d_block, 0, 8, asStream(stream)); }

int sealBlock(void* d_block, size_t cap, const uint32_t* d_nonfinite, uint32_t members, const int32_t* d_failure,
              void* stream) {
  sealKernel<<<1, 1, 0, asStream(stream)>>>(static_cast<unsigned char*>(d_block), cap, d_nonfinite, members, d_failure);
  return cudaGetLastError();
}

int scatterBlocks(const void* d_recv, int P, size_t cap, size_t n, uint32_t members, const OutDesc* d_out,
                  size_t maxCount, bool propagate, float* d_sum, uint8_t* d_touched, uint64_t* d_verdict,
                  void* stream) {
  if (P < 1 || P > 65535) return cudaErrorInvalidValue;
  return scatterReceived(d_recv, P, nullptr, 0, cap, n, members, members, d_out, maxCount, propagate, d_sum, d_touched,
                         d_verdict, stream);
}

}  // namespace mgs::cuda::kernels
