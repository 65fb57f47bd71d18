#include "core/nonfinite.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace mgs {
namespace {

// Exponent all ones: NaN or +-Inf. Integer compares on the bits vectorise
// (std::isfinite on floats does not, at -O3 without -ffast-math).
inline uint32_t nonFinite32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return (b & 0x7f800000u) == 0x7f800000u;
}

// One loop per (scale, base) combination so the hot f32 cases have no
// branches in the body. Same arithmetic as addIntoFloat: the product is
// rounded before the sum, and float addition is commutative, so x + r here
// equals r += x there bit for bit.
template <bool kScale, bool kBase, typename Load>
size_t fuseLoop(size_t n, float f, const float* __restrict base, float* __restrict dst, Load load) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    float v = load(i);
    if constexpr (kScale) v = v * f;
    if constexpr (kBase) v = base[i] + v;
    dst[i] = v;
    bad += nonFinite32(v);
  }
  return bad;
}

template <typename Load>
size_t fuseAny(size_t n, float f, const float* base, float* dst, Load load) {
  if (f == 1.0f) return base ? fuseLoop<false, true>(n, f, base, dst, load) : fuseLoop<false, false>(n, f, base, dst, load);
  return base ? fuseLoop<true, true>(n, f, base, dst, load) : fuseLoop<true, false>(n, f, base, dst, load);
}

// Reads the values as their bit patterns (memcpy: no aliasing questions).
template <typename T, typename Pred>
size_t countIf(const void* data, size_t n, Pred pred) {
  const char* p = static_cast<const char*>(data);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    T b;
    std::memcpy(&b, p + i * sizeof(T), sizeof(T));
    bad += pred(b);
  }
  return bad;
}

template <typename T>
void fillBits(void* data, size_t n, T bits) {
  char* p = static_cast<char*>(data);
  for (size_t i = 0; i < n; ++i) std::memcpy(p + i * sizeof(T), &bits, sizeof(T));
}

}  // namespace

size_t fuseIntoFloat(const void* src, DataType dtype, size_t n, double prescale, const float* base, float* dst) {
  const float f = static_cast<float>(prescale);
  switch (dtype) {
    case MGS_FLOAT32: {
      const float* s = static_cast<const float*>(src);
      return fuseAny(n, f, base, dst, [s](size_t i) { return s[i]; });
    }
    case MGS_FLOAT16:
    case MGS_BFLOAT16: {
      // A chunk at a time through the vectorised array conversions, as
      // addIntoFloat does: the same values as the per-element conversion.
      constexpr size_t kChunk = 1024;
      const uint16_t* s = static_cast<const uint16_t*>(src);
      float buf[kChunk];
      size_t bad = 0;
      for (size_t off = 0; off < n; off += kChunk) {
        const size_t c = std::min(kChunk, n - off);
        if (dtype == MGS_FLOAT16)
          halfToFloatN(s + off, c, buf);
        else
          bfloat16ToFloatN(s + off, c, buf);
        const float* b = buf;
        bad += fuseAny(c, f, base ? base + off : nullptr, dst + off, [b](size_t i) { return b[i]; });
      }
      return bad;
    }
    default: {
      // Other dtypes never reach the sparse path; convert through a copy.
      std::vector<float> tmp(n);
      toFloat(src, dtype, n, tmp.data());
      const float* s = tmp.data();
      return fuseAny(n, f, base, dst, [s](size_t i) { return s[i]; });
    }
  }
}

size_t countNonFinite(const void* data, DataType dtype, size_t n) {
  switch (dtype) {
    case MGS_FLOAT32:
      return countIf<uint32_t>(data, n, [](uint32_t b) { return (b & 0x7f800000u) == 0x7f800000u; });
    case MGS_FLOAT64:
      return countIf<uint64_t>(data, n, [](uint64_t b) {
        return (b & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
      });
    case MGS_FLOAT16:
      return countIf<uint16_t>(data, n, [](uint16_t b) { return (b & 0x7c00u) == 0x7c00u; });
    case MGS_BFLOAT16:
      return countIf<uint16_t>(data, n, [](uint16_t b) { return (b & 0x7f80u) == 0x7f80u; });
    default:
      return 0;
  }
}

void fillNaN(void* data, DataType dtype, size_t n) {
  switch (dtype) {
    case MGS_FLOAT32:
      return fillBits<uint32_t>(data, n, 0x7fc00000u);
    case MGS_FLOAT64:
      return fillBits<uint64_t>(data, n, 0x7ff8000000000000ull);
    case MGS_FLOAT16:
      return fillBits<uint16_t>(data, n, 0x7e00u);
    case MGS_BFLOAT16:
      return fillBits<uint16_t>(data, n, 0x7fc0u);
    default:
      return;
  }
}

}  // namespace mgs
