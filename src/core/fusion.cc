#include "core/fusion.h"

#include <cstring>

namespace mgs {

DataType wireType(DataType dtype) {
  return (dtype == MGS_FLOAT16 || dtype == MGS_BFLOAT16) ? MGS_FLOAT32 : dtype;
}

namespace {
bool fusable(const Signature& a, const Signature& b) {
  return a.dtype == b.dtype && a.on_cuda == b.on_cuda && a.reduce_op == b.reduce_op &&
         a.prescale == b.prescale && a.postscale == b.postscale;
}
}  // namespace

std::vector<std::vector<size_t>> fusionGroups(const std::vector<const Signature*>& sigs,
                                              const std::vector<size_t>& bytes, int64_t threshold) {
  std::vector<std::vector<size_t>> groups;
  std::vector<size_t> open;        // indices of groups still accepting members
  std::vector<size_t> open_bytes;  // their wire sizes
  for (size_t i = 0; i < sigs.size(); ++i) {
    const Signature& s = *sigs[i];
    // CUDA tensors are staged one by one until the NCCL path exists.
    const bool candidate = s.type == OpType::kAllreduce && !s.on_cuda && bytes[i] < kFusionMaxTensorBytes;
    const size_t wire = bytes[i] / dtypeSize(s.dtype) * dtypeSize(wireType(s.dtype));
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

void packFusion(const std::vector<const void*>& inputs, const std::vector<size_t>& counts,
                DataType dtype, double prescale, std::vector<char>* wire) {
  const DataType wt = wireType(dtype);
  const size_t wsize = dtypeSize(wt);
  size_t total = 0;
  for (size_t c : counts) total += c;
  wire->resize(total * wsize);
  size_t off = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    char* dst = wire->data() + off * wsize;
    if (wt == dtype) {
      if (counts[i]) std::memcpy(dst, inputs[i], counts[i] * wsize);
    } else {
      toFloat(inputs[i], dtype, counts[i], reinterpret_cast<float*>(dst));
    }
    off += counts[i];
  }
  scaleHost(wire->data(), wt, total, prescale);
}

void unpackFusion(std::vector<char>& wire, DataType dtype, double factor,
                  const std::vector<void*>& outputs, const std::vector<size_t>& counts) {
  const DataType wt = wireType(dtype);
  const size_t wsize = dtypeSize(wt);
  scaleHost(wire.data(), wt, wire.size() / wsize, factor);
  size_t off = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const char* src = wire.data() + off * wsize;
    if (wt == dtype) {
      if (counts[i]) std::memcpy(outputs[i], src, counts[i] * wsize);
    } else {
      fromFloat(reinterpret_cast<const float*>(src), dtype, counts[i], outputs[i]);
    }
    off += counts[i];
  }
}

}  // namespace mgs
