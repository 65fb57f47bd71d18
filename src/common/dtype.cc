#include "common/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace mgs {

size_t dtypeSize(DataType dtype) {
  switch (dtype) {
    case MGS_FLOAT32:
      return 4;
    case MGS_FLOAT64:
      return 8;
    case MGS_FLOAT16:
      return 2;
    case MGS_BFLOAT16:
      return 2;
    case MGS_INT32:
      return 4;
    case MGS_INT64:
      return 8;
    case MGS_UINT8:
      return 1;
  }
  return 0;
}

bool dtypeValid(int dtype) { return dtype >= MGS_FLOAT32 && dtype <= MGS_UINT8; }

bool dtypeIsFloat(DataType dtype) {
  return dtype == MGS_FLOAT32 || dtype == MGS_FLOAT64 || dtype == MGS_FLOAT16 || dtype == MGS_BFLOAT16;
}

std::string dtypeName(DataType dtype) {
  switch (dtype) {
    case MGS_FLOAT32:
      return "float32";
    case MGS_FLOAT64:
      return "float64";
    case MGS_FLOAT16:
      return "float16";
    case MGS_BFLOAT16:
      return "bfloat16";
    case MGS_INT32:
      return "int32";
    case MGS_INT64:
      return "int64";
    case MGS_UINT8:
      return "uint8";
  }
  return "invalid(" + std::to_string(static_cast<int>(dtype)) + ")";
}

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // Inf or NaN
    return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
  }
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow
  if (absx < 0x38800000u) {                        // result is subnormal or zero
    if (absx < 0x33000000u) return sign;           // < 2^-25 rounds to zero
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // value = m * 2^(e-150); half subnormal unit is 2^-24
    const uint32_t shifted = m >> shift;
    // Round to nearest even on the bits shifted out.
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = shifted;
    if (rem > half || (rem == half && (shifted & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return sign | static_cast<uint16_t>(r);
}

float bfloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

namespace {
template <typename T>
void convertFrom(const void* src, size_t n, T* dst, DataType dtype) {
  switch (dtype) {
    case MGS_FLOAT32: {
      auto* s = static_cast<const float*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(s[i]);
      break;
    }
    case MGS_FLOAT64: {
      auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(s[i]);
      break;
    }
    case MGS_FLOAT16: {
      auto* s = static_cast<const uint16_t*>(src);
      if constexpr (std::is_same_v<T, float>) {
        halfToFloatN(s, n, dst);
      } else {
        for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(halfToFloat(s[i]));
      }
      break;
    }
    case MGS_BFLOAT16: {
      auto* s = static_cast<const uint16_t*>(src);
      if constexpr (std::is_same_v<T, float>) {
        bfloat16ToFloatN(s, n, dst);
      } else {
        for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(bfloat16ToFloat(s[i]));
      }
      break;
    }
    case MGS_INT32: {
      auto* s = static_cast<const int32_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(s[i]);
      break;
    }
    case MGS_INT64: {
      auto* s = static_cast<const int64_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(s[i]);
      break;
    }
    case MGS_UINT8: {
      auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(s[i]);
      break;
    }
  }
}

template <typename T>
void convertTo(const T* src, size_t n, void* dst, DataType dtype) {
  switch (dtype) {
    case MGS_FLOAT32: {
      auto* d = static_cast<float*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<float>(src[i]);
      break;
    }
    case MGS_FLOAT64: {
      auto* d = static_cast<double*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<double>(src[i]);
      break;
    }
    case MGS_FLOAT16: {
      auto* d = static_cast<uint16_t*>(dst);
      if constexpr (std::is_same_v<T, float>) {
        floatToHalfN(src, n, d);
      } else {
        for (size_t i = 0; i < n; ++i) d[i] = floatToHalf(static_cast<float>(src[i]));
      }
      break;
    }
    case MGS_BFLOAT16: {
      auto* d = static_cast<uint16_t*>(dst);
      if constexpr (std::is_same_v<T, float>) {
        floatToBfloat16N(src, n, d);
      } else {
        for (size_t i = 0; i < n; ++i) d[i] = floatToBfloat16(static_cast<float>(src[i]));
      }
      break;
    }
    case MGS_INT32: {
      auto* d = static_cast<int32_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(std::trunc(static_cast<double>(src[i])));
      break;
    }
    case MGS_INT64: {
      auto* d = static_cast<int64_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<int64_t>(std::trunc(static_cast<double>(src[i])));
      break;
    }
    case MGS_UINT8: {
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint8_t>(std::trunc(static_cast<double>(src[i])));
      break;
    }
  }
}
}  // namespace

void toDouble(const void* src, DataType dtype, size_t n, double* dst) { convertFrom(src, n, dst, dtype); }
void fromDouble(const double* src, DataType dtype, size_t n, void* dst) { convertTo(src, n, dst, dtype); }
void toFloat(const void* src, DataType dtype, size_t n, float* dst) { convertFrom(src, n, dst, dtype); }
void fromFloat(const float* src, DataType dtype, size_t n, void* dst) { convertTo(src, n, dst, dtype); }

namespace {
constexpr size_t kChunk16 = 1024;  // floats on the stack per 16-bit chunk

template <typename Load>
void addInto(size_t n, float f, bool overwrite, float* dst, Load load) {
  if (overwrite && f == 1.0f) {
    for (size_t i = 0; i < n; ++i) dst[i] = load(i);
  } else if (overwrite) {
    for (size_t i = 0; i < n; ++i) dst[i] = load(i) * f;
  } else if (f == 1.0f) {
    for (size_t i = 0; i < n; ++i) dst[i] += load(i);
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float x = load(i) * f;
      dst[i] += x;
    }
  }
}
}  // namespace

void addIntoFloat(const void* src, DataType dtype, size_t n, double prescale, bool overwrite, float* dst) {
  const float f = static_cast<float>(prescale);
  switch (dtype) {
    case MGS_FLOAT32: {
      auto* s = static_cast<const float*>(src);
      addInto(n, f, overwrite, dst, [s](size_t i) { return s[i]; });
      return;
    }
    case MGS_FLOAT16:
    case MGS_BFLOAT16: {
      // Converted a chunk at a time (array conversions are vectorised), then
      // added: the same arithmetic as the per-element form.
      auto* s = static_cast<const uint16_t*>(src);
      float buf[kChunk16];
      for (size_t off = 0; off < n; off += kChunk16) {
        const size_t c = std::min(kChunk16, n - off);
        if (dtype == MGS_FLOAT16)
          halfToFloatN(s + off, c, buf);
        else
          bfloat16ToFloatN(s + off, c, buf);
        addInto(c, f, overwrite, dst + off, [&buf](size_t i) { return buf[i]; });
      }
      return;
    }
    default: {
      // Other dtypes never reach the sparse path; convert through a copy.
      std::vector<float> tmp(n);
      toFloat(src, dtype, n, tmp.data());
      addInto(n, f, overwrite, dst, [&tmp](size_t i) { return tmp[i]; });
      return;
    }
  }
}

namespace {
// Rounds toward zero into T, saturating: a scale factor may push an integer
// past its type's range (or make it NaN), and converting such a double is
// undefined behaviour. NaN becomes 0.
template <typename T>
T truncSaturate(double v) {
  if (std::isnan(v)) return 0;
  // Compare against the bounds as doubles: max() of a 64-bit type rounds up
  // to 2^63 there, which is itself out of range, hence >=.
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  return static_cast<T>(std::trunc(v));
}
}  // namespace

void scaleHost(void* data, DataType dtype, size_t n, double factor) {
  if (factor == 1.0) return;
  switch (dtype) {
    case MGS_FLOAT32: {
      auto* d = static_cast<float*>(data);
      const float f = static_cast<float>(factor);
      for (size_t i = 0; i < n; ++i) d[i] *= f;
      return;
    }
    case MGS_FLOAT64: {
      auto* d = static_cast<double*>(data);
      for (size_t i = 0; i < n; ++i) d[i] *= factor;
      return;
    }
    case MGS_FLOAT16:
    case MGS_BFLOAT16: {
      auto* d = static_cast<uint16_t*>(data);
      const float f = static_cast<float>(factor);
      float buf[kChunk16];
      for (size_t off = 0; off < n; off += kChunk16) {
        const size_t c = std::min(kChunk16, n - off);
        toFloat(d + off, dtype, c, buf);
        for (size_t i = 0; i < c; ++i) buf[i] *= f;
        fromFloat(buf, dtype, c, d + off);
      }
      return;
    }
    case MGS_INT32: {
      auto* d = static_cast<int32_t*>(data);
      for (size_t i = 0; i < n; ++i) d[i] = truncSaturate<int32_t>(d[i] * factor);
      return;
    }
    case MGS_INT64: {
      auto* d = static_cast<int64_t*>(data);
      for (size_t i = 0; i < n; ++i) d[i] = truncSaturate<int64_t>(static_cast<double>(d[i]) * factor);
      return;
    }
    case MGS_UINT8: {
      auto* d = static_cast<uint8_t*>(data);
      for (size_t i = 0; i < n; ++i) d[i] = truncSaturate<uint8_t>(d[i] * factor);
      return;
    }
  }
}

}  // namespace mgs
