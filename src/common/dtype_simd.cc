// Array conversions between 16-bit floats and float32 (dtype.h).
//
// The 16-bit paths run on the coordinator for every half-precision bucket
// (fusing into the fp32 slab, the ring allreduce's per-hop sums, scaling), so
// a per-element call costs real step time on a host whose cores also train.
// On x86 with F16C the hardware converts eight values per instruction; it
// rounds to nearest even like the scalar code, so every non-NaN result is
// bitwise the same (tests/unit/common/dtype_test.cc checks all 65536 inputs).
// NaN payloads may differ (the hardware keeps payload bits, the scalar code
// writes a canonical quiet NaN); a NaN stays a NaN either way. bfloat16 needs
// no special instructions: branch-free loops the compiler vectorises.
#include <cstring>

#include "common/dtype.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define MGS_F16C_PATH 1
#endif

namespace mgs {
namespace {

#ifdef MGS_F16C_PATH
// F16C needs AVX's state saving by the OS as well (OSXSAVE and XCR0 bits).
bool detectF16C() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!(osxsave && avx && f16c)) return false;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0x6u) == 0x6u;  // XMM and YMM state enabled
}

bool haveF16C() {
  static const bool ok = detectF16C();
  return ok;
}

__attribute__((target("avx,f16c"))) size_t halfToFloatF16C(const uint16_t* s, size_t n, float* d) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  return i;
}

__attribute__((target("avx,f16c"))) size_t floatToHalfF16C(const float* s, size_t n, uint16_t* d) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return i;
}
#endif

// The hardware part (when there is one) then the scalar rest.
template <typename S, typename D, size_t (*Fast)(const S*, size_t, D*), D (*One)(S)>
void convertArray(const S* src, size_t n, D* dst) {
  size_t i = 0;
#ifdef MGS_F16C_PATH
  if (haveF16C()) i = Fast(src, n, dst);
#endif
  for (; i < n; ++i) dst[i] = One(src[i]);
}

#ifndef MGS_F16C_PATH
size_t halfToFloatF16C(const uint16_t*, size_t, float*) { return 0; }
size_t floatToHalfF16C(const float*, size_t, uint16_t*) { return 0; }
#endif

}  // namespace

void halfToFloatN(const uint16_t* src, size_t n, float* dst) {
  convertArray<uint16_t, float, halfToFloatF16C, halfToFloat>(src, n, dst);
}

void floatToHalfN(const float* src, size_t n, uint16_t* dst) {
  convertArray<float, uint16_t, floatToHalfF16C, floatToHalf>(src, n, dst);
}

void bfloat16ToFloatN(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &bits, 4);
  }
}

void floatToBfloat16N(const float* src, size_t n, uint16_t* dst) {
  // floatToBfloat16 without branches: round to nearest even, NaN made quiet.
  for (size_t i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, src + i, 4);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t quiet = (x >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

bool halfConversionIsVectorised() {
#ifdef MGS_F16C_PATH
  return haveF16C();
#else
  return false;
#endif
}

}  // namespace mgs
