#include "core/scatter_stage.h"

#include <algorithm>

#include "common/dtype.h"
#include "compress/decompress.h"
#include "core/device.h"
#include "core/nonfinite.h"

namespace mgs {

double ScatterStage::outputFactor(const Request& m) const {
  return m.sig.postscale / (m.sig.reduce_op == MGS_REDUCE_AVERAGE ? P_ : 1);
}

Status ScatterStage::writeOutput(const Request& m, const float* src, size_t cnt) {
  if (m.output.onCuda()) {
    stage_.resize(m.output.bytes());
    fromFloat(src, m.output.dtype, cnt, stage_.data());
    return device::copyFromHost(m.output, stage_.data(), stage_.size());
  }
  if (static_cast<const void*>(src) != m.output.data) fromFloat(src, m.output.dtype, cnt, m.output.data);
  return Status::OK();
}

bool ScatterStage::prepareOutputs(const std::vector<Request>& members, size_t n) {
  const size_t M = members.size();
  dest_.resize(M);
  offsets_.resize(M + 1);
  offsets_[0] = 0;
  bool staged = false;
  for (size_t i = 0; i < M; ++i) offsets_[i + 1] = offsets_[i] + members[i].input.numel();
  for (size_t i = 0; i < M; ++i) {
    const Request& m = members[i];
    if (!m.output.onCuda() && m.output.dtype == MGS_FLOAT32) {
      dest_[i] = static_cast<float*>(m.output.data);
    } else {
      if (!staged) out_.resize(n);
      staged = true;
      dest_[i] = out_.data() + offsets_[i];
    }
  }
  return staged;
}

Status ScatterStage::writeStaged(const std::vector<Request>& members) {
  Status st;
  for (size_t i = 0; i < members.size(); ++i) {
    if (dest_[i] == members[i].output.data) continue;
    Status ws = writeOutput(members[i], dest_[i], offsets_[i + 1] - offsets_[i]);
    if (st.ok()) st = ws;
  }
  return st;
}

Status ScatterStage::scatterBlocks(const std::vector<Request>& members, size_t n, const BlockExchange::Allgather& a,
                                   const uint64_t* counts) {
  const bool staged = prepareOutputs(members, n);
  const size_t M = members.size();
  scales_.resize(M);
  for (size_t i = 0; i < M; ++i) scales_[i] = static_cast<float>(outputFactor(members[i]));
  const int blocks = a.blocks > 0 ? a.blocks : P_;
  pairs_.resize(blocks);
  for (int r = 0; r < blocks; ++r) {
    const block::ConstAllgatherBlock b = a.received(r);
    pairs_[r] = {b.values(), b.indices(), static_cast<size_t>(counts[r])};
  }
  touched_.resize((n + 63) / 64, 0);
  compress::ScatterOutput out;
  out.parts = dest_.data();
  out.offsets = offsets_.data();
  out.scales = scales_.data();
  out.numParts = M;
  // One thread: the coordinator's (the outputs are small next to the
  // selection, and the result does not depend on the thread count).
  Status st = compress::scatterAddParts(pairs_.data(), pairs_.size(), out, touched_.data(), 1);
  if (st.ok() && staged) st = writeStaged(members);
  return st;
}

Status ScatterStage::scatterAgreed(const std::vector<Request>& members, size_t n, const uint32_t* idx,
                                   const float* vals, size_t count, bool outputs_zeroed) {
  const bool staged = prepareOutputs(members, n);
  for (size_t i = 0; i < members.size(); ++i)
    if (!outputs_zeroed || dest_[i] != members[i].output.data)
      std::fill(dest_[i], dest_[i] + (offsets_[i + 1] - offsets_[i]), 0.0f);
  for (size_t j = 0; j < count; ++j) {
    const uint32_t i = idx[j];
    const size_t b =
        static_cast<size_t>(std::upper_bound(offsets_.begin() + 1, offsets_.end(), i) - offsets_.begin() - 1);
    const float fac = static_cast<float>(outputFactor(members[b]));
    dest_[b][i - offsets_[b]] = fac != 1.0f ? vals[j] * fac : vals[j];
  }
  Status st;
  if (staged)
    for (size_t i = 0; i < members.size() && st.ok(); ++i)
      if (dest_[i] != members[i].output.data) st = writeOutput(members[i], dest_[i], offsets_[i + 1] - offsets_[i]);
  return st;
}

Status ScatterStage::unfuseDense(const std::vector<Request>& members, float* sums) {
  size_t off = 0;
  Status st;
  for (auto& m : members) {
    const size_t cnt = m.input.numel();
    float* res = sums + off;
    scaleHost(res, MGS_FLOAT32, cnt, outputFactor(m));
    Status ws = writeOutput(m, res, cnt);
    if (st.ok()) st = ws;
    off += cnt;
  }
  return st;
}

Status ScatterStage::writeNaNOutputs(const std::vector<Request>& members) {
  Status st;
  for (const auto& m : members) {
    const size_t cnt = m.output.numel();
    Status ws;
    if (m.output.onCuda()) {
      stage_.resize(m.output.bytes());
      fillNaN(stage_.data(), m.output.dtype, cnt);
      ws = device::copyFromHost(m.output, stage_.data(), stage_.size());
    } else {
      fillNaN(m.output.data, m.output.dtype, cnt);
    }
    if (st.ok()) st = ws;
  }
  return st;
}

}  // namespace mgs
