// The local stage on the host (core/local_stage.h has the contract): CUDA
// inputs are staged through host memory, acc slabs are host vectors that
// become the residual on commit (ResidualStore::adopt), and the selector is
// compress::Selector on the CPU.
//
// Why a scratch slab: with error feedback a rank computes acc = gradient +
// residual for every entry before it knows whether another rank had a NaN.
// That addition cannot be undone exactly in floating point (r = acc - x loses
// the low bits of r whenever |x| >> |r|), and a copy of the old residual
// would cost a second write stream. Writing acc to a separate slab costs the
// same read streams as the in-place add and keeps the old residual intact
// until the exchange tells every rank the same verdict; committing is then a
// pointer swap (ResidualStore::adopt), and the old slab is reused as the next
// bucket's scratch.
#pragma once

#include <memory>
#include <vector>

#include "compress/gradient_parts.h"
#include "core/local_stage.h"

namespace mgs {

class CpuLocalStage : public LocalStage {
 public:
  explicit CpuLocalStage(const LocalStageOptions& options) : opt_(options) {}
  void run(const LocalJob& job, LocalOutcome* outcome) override;
  Status extract(LocalSlab& slab, const uint32_t* idx, size_t count, float* vals) override;
  void settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> slab, bool commit) override;
  void zeroResidual(const std::vector<Request>& members) override;
  Status readSlab(const LocalSlab& slab, float* dst) override;

 private:
  using Vec = std::shared_ptr<std::vector<float>>;
  Vec takeSlab(size_t n);
  void giveSlab(Vec&& slab);
  // acc[0..n) = gradients (+ residual r, unless null), staging CUDA inputs.
  // `zero`: also set each input to zero right after reading it (the caller
  // checked zerosInPlace).
  Status fuseMembers(const std::vector<Request>& members, const float* r, float* acc, int* bad_member,
                     size_t* non_finite, bool zero = false);
  // Whether every member is reduced in place in float32 host memory, so its
  // input may be zeroed for the scatter (LocalJob::zero_inputs).
  static bool zerosInPlace(const std::vector<Request>& members);
  // Whether the selector can read every member where it lies (host
  // float32/float16/bfloat16): then one pass forms acc, with no fuse pass.
  static bool readsInPlace(const std::vector<Request>& members);
  // The first member whose gradient (x prescale) + residual r holds a NaN or
  // Inf, or -1: names the tensor when the one-pass selection found some.
  static int firstNonFiniteMember(const std::vector<Request>& members, const float* r);

  LocalStageOptions opt_;
  std::vector<Vec> slabs_;  // scratch acc slabs for reuse
  std::vector<char> workspace_, stage_;
  std::vector<compress::GradientPart> parts_;  // the members, for the one-pass selection
};

}  // namespace mgs
