// The scatter stage of the sparse pipeline (docs/architecture.md "Sparse
// pipeline stages"): what the exchange delivered, into the members' outputs,
// scaled (average, postscale), staged through host memory for outputs that
// are not host float32. The allgather's blocks go through compress::
// scatterAddParts, the one scatter-add of mgs (sums from +0 in rank order,
// each touched entry scaled once): bitwise the same on every rank.
//
// Coordinator thread only. Owns the staging buffers, reused across buckets.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "compress/decompress.h"
#include "core/block_exchange.h"
#include "core/request.h"

namespace mgs {

class ScatterStage {
 public:
  explicit ScatterStage(int world_size) : P_(world_size) {}

  // The factor a member's output is scaled by: postscale, / P for average.
  double outputFactor(const Request& m) const;

  // The allgather: the P received blocks (validated, every header a count:
  // counts[r]) of a bucket of n elements, summed into the members' outputs.
  Status scatterBlocks(const std::vector<Request>& members, size_t n, const BlockExchange::Allgather& a,
                       const uint64_t* counts);
  // The agreed exchange: count distinct indices (validated) and the values
  // already summed over ranks. Each output is zero but vals[j] * factor at
  // idx[j]: an assignment, not an addition, so a summed -0 stays -0.
  // `outputs_zeroed`: the local stage already zeroed the outputs written in
  // place (LocalJob::zero_inputs); only the selected entries are written.
  Status scatterAgreed(const std::vector<Request>& members, size_t n, const uint32_t* idx, const float* vals,
                       size_t count, bool outputs_zeroed = false);
  // The dense fallback: `sums` (n floats, the allreduce's result) scaled in
  // place and written to the members' outputs.
  Status unfuseDense(const std::vector<Request>& members, float* sums);
  // Every member's output filled with NaN (the propagate verdict).
  Status writeNaNOutputs(const std::vector<Request>& members);

  // A host buffer of `size` floats for the dense fallback's allreduce; valid
  // until the next call of any function here.
  float* denseBuffer(size_t size) {
    out_.resize(size);
    return out_.data();
  }

 private:
  // dest_[m]: member m's output if it is host float32, else a slice of out_
  // (returns whether some member is staged). offsets_: member offsets (M + 1).
  bool prepareOutputs(const std::vector<Request>& members, size_t n);
  // Staged members' slices to their outputs (the first error, all tried).
  Status writeStaged(const std::vector<Request>& members);
  Status writeOutput(const Request& m, const float* src, size_t cnt);

  int P_;
  std::vector<float> out_;                  // dense sums / staged outputs
  std::vector<char> stage_;                 // conversion for device outputs
  std::vector<float*> dest_;                // per member: where its result goes
  std::vector<size_t> offsets_;             // member offsets in the bucket (M + 1)
  std::vector<float> scales_;               // per member: outputFactor
  std::vector<compress::RankPairs> pairs_;  // per rank: the received selection
  std::vector<uint64_t> touched_;           // scatter-add scratch bitmap (kept zero)
};

}  // namespace mgs
