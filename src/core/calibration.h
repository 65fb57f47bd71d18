// Cost-model calibration (MGS_CALIBRATION): the merge plan is computed from
// this job's own measured collective and selector times, not from presets.
//   auto   time allreduce and allgather of 4 KiB..64 MiB and the selector on
//          64 Ki..4 Mi elements, take the max over ranks, least-squares fit
//   off    a fixed model (the 10 GbE preset of the papers for this P, or
//          the nearest one)
//   <file> load the JSON file if it exists, else measure and save it there
//          (plan/cost_model_io.h: the format mgs-plan --cost-model reads)
// Every rank ends with the same model: measurements are max-reduced before the
// fit, and a file is read by rank 0 and broadcast.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "compress/selector.h"
#include "plan/cost_model.h"

namespace mgs {

// The bucket sizes (elements) calibration times a selector at: the CPU one
// at init, the device one at the first bucket of CUDA tensors.
inline const std::vector<size_t>& calibrationSelectionSizes() {
  static const std::vector<size_t> sizes = {size_t{1} << 16, size_t{1} << 20, size_t{1} << 22};
  return sizes;
}

Status resolveCostModel(Communicator& comm, const Config& config, const compress::Selector& selector,
                        plan::CostModel* out);

}  // namespace mgs
