// The element-wise reduction every communicator applies to received data:
// acc[i] = acc[i] (op) in[i]. 16-bit floats (f16, bf16) are combined in
// float32 and rounded back to 16 bits on every call, which is what one hop of
// a reduction over a 16-bit wire does (Horovod's fp16 compression and NCCL
// behave the same), so 16-bit tensors cross the network as 16 bits.
#pragma once

#include <cstddef>

#include "comm/communicator.h"

namespace mgs {

// Whether reduceInto supports (dtype, op): every dtype for sum/max/min,
// integer dtypes only for kBitAnd.
bool reducible(DataType dtype, CommOp op);

// acc[i] = acc[i] op in[i] for i < n. `acc` and `in` must not overlap.
Status reduceInto(void* acc, const void* in, size_t n, DataType dtype, CommOp op);

}  // namespace mgs
