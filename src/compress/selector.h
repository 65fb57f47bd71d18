// Gradient selectors with error feedback (algorithms.md sections 7, 8, 11).
//
// A Selector picks the entries of one flat buffer worth sending. It is
// independent of MPI and of the bucket layout: the runtime fuses the tensors
// of a bucket into one buffer `x` and keeps the residuals of those tensors as
// consecutive slices of one fp32 buffer laid out like the bucket (remap the
// slices by tensor offset when the plan changes, algorithms.md section 8.1).
//
// One call does, in this order:
//   acc = float(x) + residual            (fp32, one rounding; x may be f32/f16/bf16)
//   check acc for non-finite values      (fused with the statistics pass)
//   pick indices S (by name, below)
//   out_values = acc[S], out_indices = S (ascending), residual = acc with residual[S] = 0
// so that out_values scattered onto the new residual equal acc bit for bit.
//
// In-place mode (CPU Selector only): SelectArgs::x == nullptr means the
// residual buffer already holds acc (the runtime added the gradient into it
// when it fused the bucket). Then the call only reads the residual (statistics,
// non-finite check, candidates) and writes nothing to it but the zeros at the
// sent indices (and at non-finite entries). The selection is bitwise the same
// as a call with x and a residual whose float(x) + residual equals that acc.
//
// CPU algorithm (docs/compressors.md): for every selector but none at
// densities with 8 * (1 + bandEps) * density <= 1/4 (band selectors; 8 *
// density for the others), a sample of acc (up to 65536 entries, read only;
// randomk needs none) fixes a candidate floor tc, one fused pass writes acc
// and its statistics and lists the entries with key >= tc, and the threshold
// search and the compaction run on that list: one full pass in all. When the
// search would need keys below tc, or a candidate region overflowed, it falls
// back to full histogram passes and a compaction pass over the residual,
// with the same result. Other cases: the fused pass, histogram passes, and a
// compaction pass.
//
// Thread-safety: a Selector is immutable after create(); select() may run
// concurrently on different buffers as long as each call has its own
// workspace. The CPU path runs its passes on mgs::parallelFor
// (common/parallel.h) inside one call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "compress/gradient_parts.h"

namespace mgs::compress {

enum class SelectorKind { kNone, kTopk, kGaussiank, kLdte, kDgc, kRandomk };

// Names as in MGS_COMPRESSOR: "none", "topk", "gaussiank", "ldte", "dgc", "randomk".
Status parseSelectorKind(const std::string& name, SelectorKind* kind);
const char* selectorName(SelectorKind kind);

// What to do when acc = x + residual holds NaN or +-Inf. In every policy the
// non-finite entries are dropped from the residual (set to 0) so that they
// cannot poison later steps, and SelectResult::nonFinite reports how many.
enum class NonFinitePolicy {
  kError,  // return Code::kNumeric naming the buffer; nothing is selected
  kSkip,   // return OK with count 0 (the caller skips the step on all ranks)
  kZero,   // treat them as 0 and select from the rest
};

struct SelectorOptions {
  double density = 0.001;  // rho; k = kForDensity(n, density)
  double bandEps = 0.1;    // gaussiank/ldte target band [k, floor((1+eps)k)]
  bool exactTrim = false;  // ldte/gaussiank: return exactly k (the top k of the band)
  int maxPasses = 8;       // histogram passes of the threshold search
  uint64_t seed = 0;       // randomk/dgc: combined with SelectArgs::step
  NonFinitePolicy nonFinite = NonFinitePolicy::kError;
  int numThreads = 0;  // CPU threads; 0 = the cores of this process (at most kMaxAutoThreads)
  // GPU selector only (MGS_GPU_LAUNCHES=per-pass): a launch per histogram
  // pass and a compaction block per tile, the same bits as the default shapes.
  bool gpuPerPassLaunches = false;
};

// k = clamp(floor(rho*n), 1, n); 0 when n == 0.
size_t kForDensity(size_t n, double density);

struct SelectArgs {
  const void* x = nullptr;  // n gradient values of `dtype` (f32, f16 or bf16);
                            // nullptr (CPU): in place, the residual holds acc

  DataType dtype = MGS_FLOAT32;
  float* residual = nullptr;       // n floats, read and rewritten (must not alias x)
  // CPU Selector, with x: read the old residual from here instead of from
  // `residual`, which is then only written (acc, then acc with the sent
  // entries zeroed): the caller keeps its residual intact until it decides to
  // keep the new one (the runtime's deferred commit). Same selection, bit for
  // bit. n floats; may equal `residual`; must not alias x.
  const float* residualIn = nullptr;
  size_t n = 0;                    // < 2^32 (indices are uint32)
  // CPU Selector only: the gradient as parts laid end to end (a merged
  // bucket's members where they lie), in place of x (then x must be null and
  // dtype is ignored); their n must sum to n. Same selection, bit for bit, as
  // x = the parts fused into one float32 buffer.
  GradientParts parts;
  float* outValues = nullptr;      // capacity maxCount(n)
  uint32_t* outIndices = nullptr;  // capacity maxCount(n)
  void* workspace = nullptr;       // workspaceBytes(n) bytes, 16-byte aligned
  size_t workspaceBytes = 0;
  uint64_t step = 0;      // iteration number: same on all ranks (randomk, dgc)
  const char* name = "";  // bucket name, used in error messages
};

struct SelectResult {
  size_t count = 0;                          // entries written to outValues/outIndices
  size_t k = 0;                              // target k for this n
  float threshold = 0;                       // smallest magnitude selected in bulk (key threshold), 0 if none
  int passes = 0;                            // full passes over the buffer (accumulate, histograms, compaction);
                                             // the CPU's sample of <= 65536 entries is not counted
  bool inBand = false;                       // count within the selector's documented band
  bool exact = true;                         // topk: the set is the exact top-k (ties by lower index)
  size_t nonFinite = 0;                      // non-finite entries found in acc (dropped from the residual)
  int hostSyncs = 0;                         // GPU path: device-to-host round trips this call made
  double mean = 0, stddev = 0, meanAbs = 0;  // statistics of acc (finite entries)
  float maxAbs = 0;
};

// Checks shared by the CPU and GPU select(): resets *result, and rejects a
// null result, n >= 2^32 and dtypes other than f32/f16/bf16.
Status checkSelectArgs(const SelectArgs& args, SelectResult* result);

class Selector {
 public:
  static Status create(const std::string& name, const SelectorOptions& options, std::unique_ptr<Selector>* out);
  Selector(SelectorKind kind, const SelectorOptions& options);

  SelectorKind kind() const { return kind_; }
  const char* name() const { return selectorName(kind_); }
  const SelectorOptions& options() const { return options_; }

  // Upper bound of SelectResult::count for a buffer of n: n for none,
  // floor((1+eps)k) for gaussiank/ldte without exactTrim, k otherwise.
  size_t maxCount(size_t n) const;
  // Workspace for select() on buffers of up to n elements (query once, reuse).
  // The CPU's includes the candidate list: threads * min(C, 2C / threads + 4096)
  // * 8 bytes, C = 8 * maxCount(n) + 4096 (none on the dense paths).
  size_t workspaceBytes(size_t n) const;
  // No allocation; errors: kInvalidArgument (null/short buffers, n >= 2^32,
  // dtype), kNumeric (non-finite input under NonFinitePolicy::kError).
  Status select(const SelectArgs& args, SelectResult* result) const;

 private:
  // Entries per thread region of the candidate list (0: the multi-pass path).
  size_t candidateCapacity(size_t n) const;

  SelectorKind kind_;
  SelectorOptions options_;
  int threads_;
};

}  // namespace mgs::compress
