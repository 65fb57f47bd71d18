// The one file format of a cost model (docs/planner.md, "Cost-model files"):
// what MGS_CALIBRATION=<file> saves and loads, what mgs-plan --cost-model
// reads, and the cost fields of a planning instance. One reader and one
// writer, on nlohmann-json, shared by the runtime and the tools.
//
//   {"format": "mgs-cost-model", "version": 1, "workers": 4, "bytes_per_element": 4,
//    "allreduce": COMM, "allgather": COMM, ["broadcast": COMM,] "sparsify": {"kind": "linear"|"nlogn", "c_s": 1e-9}}
//   COMM = {"alpha_s": a, "beta_s_per_byte": b}                      a line
//        | {"table": [[bytes, seconds], ...]}                         measured points
//        | {"segments": [[from_bytes, alpha_s, beta_s_per_byte], ...]} exact pieces (what is written)
//
// Readers never throw: every problem is a kInvalidArgument Status naming the
// field by its path ("allgather.table[2][1]") and what was expected.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "common/status.h"
#include "plan/cost_model.h"

namespace mgs::plan {

// A whole cost-model document (a saved calibration). workers, allreduce,
// allgather and sparsify are required, broadcast is optional (older files); unknown top-level keys are errors (typos).
Status parseCostModel(const std::string& text, CostModel* out);

// The cost-model fields present in `j` (an object: a cost-model document or a
// planning instance), each overriding `*inout`; other keys are left to the
// caller. On error `*inout` is unchanged.
Status readCostModelFields(const nlohmann::json& j, CostModel* inout);

// Checked readers for other JSON documents (planning instances, traces):
// a finite number, or an integer in [lo, hi]. A float where an integer is
// expected, or a value out of range, is an error naming `path`, never a cast.
Status jsonNumber(const nlohmann::json& j, const std::string& path, double* out);
Status jsonInteger(const nlohmann::json& j, const std::string& path, int64_t lo, int64_t hi, int64_t* out);

// The document for `m`; parseCostModel() reads it back to the same costs.
// Density is a property of the job, not of the cluster, so it is not saved.
// `pretty`: indented with a final newline (files), else one line (logs).
std::string costModelToJson(const CostModel& m, bool pretty = true);

}  // namespace mgs::plan
