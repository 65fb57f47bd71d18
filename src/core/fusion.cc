#include "core/fusion.h"

#include <cstring>

namespace mgs {

namespace {
bool fusable(const Signature& a, const Signature& b) {
  return a.dtype == b.dtype && a.on_cuda == b.on_cuda && a.reduce_op == b.reduce_op && a.prescale == b.prescale &&
         a.postscale == b.postscale;
}
}  // namespace

std::vector<std::vector<size_t>> fusionGroups(const std::vector<const Signature*>& sigs,
                                              const std::vector<size_t>& bytes, int64_t threshold,
                                              size_t max_tensor_bytes) {
  std::vector<std::vector<size_t>> groups;
  std::vector<size_t> open;        // indices of groups still accepting members
  std::vector<size_t> open_bytes;  // their wire sizes
  for (size_t i = 0; i < sigs.size(); ++i) {
    const Signature& s = *sigs[i];
    // CUDA tensors fuse with CUDA tensors only (fusable compares on_cuda):
    // one device fusion buffer and one NCCL call per group, or one host
    // staging buffer and one MPI call without NCCL (Executor).
    const bool candidate = s.type == OpType::kAllreduce && bytes[i] < max_tensor_bytes;
    const size_t wire = bytes[i];
    bool placed = false;
    if (candidate && static_cast<int64_t>(wire) <= threshold) {
      for (size_t g = 0; g < open.size() && !placed; ++g) {
        auto& grp = groups[open[g]];
        if (fusable(*sigs[grp[0]], s) && static_cast<int64_t>(open_bytes[g] + wire) <= threshold) {
          grp.push_back(i);
          open_bytes[g] += wire;
          placed = true;
        }
      }
    }
    if (placed) continue;
    groups.push_back({i});
    if (candidate && static_cast<int64_t>(wire) <= threshold) {
      open.push_back(groups.size() - 1);
      open_bytes.push_back(wire);
    }
  }
  return groups;
}

void packFusion(const std::vector<const void*>& inputs, const std::vector<size_t>& counts, DataType dtype,
                double prescale, std::vector<char>* wire) {
  const size_t esize = dtypeSize(dtype);
  size_t total = 0;
  for (size_t c : counts) total += c;
  wire->resize(total * esize);
  size_t off = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (counts[i]) std::memcpy(wire->data() + off * esize, inputs[i], counts[i] * esize);
    off += counts[i];
  }
  scaleHost(wire->data(), dtype, total, prescale);
}

void unpackFusion(std::vector<char>& wire, DataType dtype, double factor, const std::vector<void*>& outputs,
                  const std::vector<size_t>& counts) {
  const size_t esize = dtypeSize(dtype);
  scaleHost(wire.data(), dtype, wire.size() / esize, factor);
  size_t off = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (counts[i]) std::memcpy(outputs[i], wire.data() + off * esize, counts[i] * esize);
    off += counts[i];
  }
}

}  // namespace mgs
