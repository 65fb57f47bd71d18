// Fusion of small dense allreduces: ready allreduces that share dtype, device
// kind, op and scale factors are packed into one buffer of at most
// MGS_FUSION_THRESHOLD_BYTES and reduced with one collective. Grouping only
// looks at negotiated (rank-independent) fields, so every rank fuses alike.
// 16-bit floats travel as float32 (MPI cannot sum them, and fp32 accumulation
// is more accurate).
#pragma once

#include <cstdint>
#include <vector>

#include "core/request.h"

namespace mgs {

// Tensors at least this large are reduced in place, never copied into the
// fusion buffer, unless init measured a longer collective start-up
// (calibration.h, fusionMaxTensorBytesFrom): copying in and out costs more
// than the per-call latency that fusion saves on one host's shared memory
// (~2-20 us per call vs ~10 us per 64 KiB of copies each way), measured with
// bench/collectives; across hosts a start-up is milliseconds.
constexpr size_t kFusionMaxTensorBytes = 64 << 10;

// Indices into `sigs` grouped for fusion, in order of each group's first
// member. Only allreduces are grouped; every other op is a group of one;
// tensors of `max_tensor_bytes` or more stay alone.
std::vector<std::vector<size_t>> fusionGroups(const std::vector<const Signature*>& sigs,
                                              const std::vector<size_t>& bytes, int64_t threshold,
                                              size_t max_tensor_bytes = kFusionMaxTensorBytes);

// Pack `inputs` (host pointers, all of `dtype`, with `counts` elements each)
// into `wire`, multiplying by `prescale`. Every dtype crosses the wire as
// itself: 16-bit floats stay 16-bit (communicators reduce them natively).
void packFusion(const std::vector<const void*>& inputs, const std::vector<size_t>& counts, DataType dtype,
                double prescale, std::vector<char>* wire);
// Scale the wire buffer by `factor`, then unpack into `outputs`.
void unpackFusion(std::vector<char>& wire, DataType dtype, double factor, const std::vector<void*>& outputs,
                  const std::vector<size_t>& counts);

}  // namespace mgs
