// A gradient read where it lies: one buffer, or a merged bucket's members laid
// end to end without first copying them into one buffer. Part j covers
// [sum of n over parts before j, + n) of the bucket; its values are
// float(data[i]) * scale, the product rounded to float before it is added to
// the residual (the rounding fuseIntoFloat and addIntoFloat use), so that a
// selection over the parts is bit for bit the selection over the fused buffer.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace mgs::compress {

struct GradientPart {
  const void* data = nullptr;  // n values of dtype (float32, float16 or bfloat16), host memory
  DataType dtype = MGS_FLOAT32;
  float scale = 1.0f;
  size_t n = 0;
};

struct GradientParts {
  const GradientPart* parts = nullptr;
  size_t count = 0;  // 0: no gradient (in place: the residual already holds acc)
};

}  // namespace mgs::compress
