// Host passes for non-finite (NaN, +-Inf) gradients (MGS_NONFINITE,
// docs/c-api.md "Non-finite values (`MGS_NONFINITE`)").
//
// With loss scaling (torch GradScaler, Keras LossScaleOptimizer) an overflow
// step is normal: the framework expects the step's reduced gradients to carry
// NaN/Inf, skips the step and lowers the scale. These helpers let the sparse
// pipeline find non-finite values while it fuses a bucket (no extra pass), and
// let the dense paths check inputs when MGS_NONFINITE=error.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace mgs {

// dst[i] = float(src[i]) * float(prescale) + base[i], or without "+ base[i]"
// when base is null: bitwise what addIntoFloat computes in place, but into a
// separate buffer, so `base` (a residual) stays untouched. Returns how many
// dst values are NaN or +-Inf (counted in the same pass).
size_t fuseIntoFloat(const void* src, DataType dtype, size_t n, double prescale, const float* base, float* dst);

// How many of the n values are NaN or +-Inf (0 for integer dtypes).
size_t countNonFinite(const void* data, DataType dtype, size_t n);

// Writes a quiet NaN into n values of a floating dtype (no-op for integers).
void fillNaN(void* data, DataType dtype, size_t n);

}  // namespace mgs
