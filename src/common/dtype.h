// Element types and host-side half-precision conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mgs/mgs.h"

namespace mgs {

using DataType = mgs_dtype_t;

// Bytes per element; 0 for an invalid value.
size_t dtypeSize(DataType dtype);
// "float32", "bfloat16", ...; "invalid(<n>)" for an out-of-range value.
std::string dtypeName(DataType dtype);
bool dtypeValid(int dtype);
bool dtypeIsFloat(DataType dtype);

// IEEE binary16 and bfloat16 <-> binary32, round to nearest even.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);
// The same over arrays (dtype_simd.cc): F16C on x86 where the CPU has it.
// Bitwise equal to the scalar functions except for NaN payloads.
void halfToFloatN(const uint16_t* src, size_t n, float* dst);
void floatToHalfN(const float* src, size_t n, uint16_t* dst);
void bfloat16ToFloatN(const uint16_t* src, size_t n, float* dst);
void floatToBfloat16N(const float* src, size_t n, uint16_t* dst);
// Whether halfToFloatN/floatToHalfN use the hardware conversion here.
bool halfConversionIsVectorised();

// Element-wise conversion of `n` values between any dtype and double, used for
// scaling and for reducing 16-bit floats in fp32 on the host.
void toDouble(const void* src, DataType dtype, size_t n, double* dst);
void fromDouble(const double* src, DataType dtype, size_t n, void* dst);
void toFloat(const void* src, DataType dtype, size_t n, float* dst);
// dst[i] = float(src[i]) * float(prescale) + dst[i] (or without "+ dst[i]"
// when overwrite): the gradient added into its residual when a bucket fuses.
// The product is rounded before the sum, as toFloat then scaleHost would.
void addIntoFloat(const void* src, DataType dtype, size_t n, double prescale, bool overwrite, float* dst);
void fromFloat(const float* src, DataType dtype, size_t n, void* dst);

// x[i] *= factor for `n` elements of `dtype` on the host (integers: in double,
// truncated toward zero).
void scaleHost(void* data, DataType dtype, size_t n, double factor);

}  // namespace mgs
