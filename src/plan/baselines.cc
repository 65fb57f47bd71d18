// Fixed-rule baselines: threshold fusion (algorithms.md §6), layer-wise, single.
#include "plan/planners.h"

namespace mgs::plan {

Groups planFusion(const std::vector<LayerInfo>& layers, int64_t threshold_bytes, int bytes_per_element) {
  std::vector<int> lengths;
  int64_t bytes = 0;
  int length = 0;
  for (const LayerInfo& l : layers) {
    bytes += l.elements * bytes_per_element;
    ++length;
    if (bytes >= threshold_bytes) lengths.push_back(length), length = 0, bytes = 0;
  }
  if (length > 0) lengths.push_back(length);
  return groupsFromLengths(lengths);
}

Groups planLayerwise(int num_layers) { return groupsFromLengths(std::vector<int>(num_layers, 1)); }

Groups planSingle(int num_layers) { return num_layers == 0 ? Groups{} : groupsFromLengths({num_layers}); }

}  // namespace mgs::plan
