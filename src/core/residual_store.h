// Error-feedback residuals, one fp32 buffer per tensor name. Residuals are
// per tensor (not per bucket) so they survive re-planning: a bucket gathers
// its members' residuals, the selector updates them, and they are written
// back. The coordinator is the only writer; framework threads may read a
// copy (mgs_residual_copy) for checkpoints and tests.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace mgs {

class ResidualStore {
 public:
  // Copy the residual of `name` (zeros if none yet) into dst[0..n).
  void read(const std::string& name, float* dst, size_t n) const;
  // Store src[0..n) as the residual of `name`.
  void write(const std::string& name, const float* src, size_t n);
  // For callers: kInvalidArgument if the tensor has no residual or n differs.
  Status copyOut(const std::string& name, float* dst, size_t n) const;
  Status copyIn(const std::string& name, const float* src, size_t n);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<float>> map_;
};

}  // namespace mgs
