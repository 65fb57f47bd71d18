#include "comm/reduce.h"

#include <algorithm>
#include <cstdint>

#include "common/check.h"

namespace mgs {
namespace {

template <typename T>
T combine(T a, T b, CommOp op) {
  switch (op) {
    case CommOp::kSum:
      return static_cast<T>(a + b);
    case CommOp::kMax:
      return std::max(a, b);
    case CommOp::kMin:
      return std::min(a, b);
    case CommOp::kBitAnd:
      if constexpr (std::is_integral_v<T>) return static_cast<T>(a & b);
      return a;
  }
  return a;
}

template <typename T>
void reduceTyped(void* acc, const void* in, size_t n, CommOp op) {
  auto* a = static_cast<T*>(acc);
  const auto* b = static_cast<const T*>(in);
  // One switch per call, not per element: the loops vectorise.
  switch (op) {
    case CommOp::kSum:
      for (size_t i = 0; i < n; ++i) a[i] = static_cast<T>(a[i] + b[i]);
      break;
    default:
      for (size_t i = 0; i < n; ++i) a[i] = combine(a[i], b[i], op);
  }
}

// 16-bit floats: widened to fp32 a chunk at a time with the array
// conversions (vectorised, dtype.h), combined, rounded back once.
void reduce16(void* acc, const void* in, size_t n, DataType dtype, CommOp op) {
  auto* a = static_cast<uint16_t*>(acc);
  const auto* b = static_cast<const uint16_t*>(in);
  constexpr size_t kChunk = 1024;
  float fa[kChunk], fb[kChunk];
  for (size_t off = 0; off < n; off += kChunk) {
    const size_t c = std::min(kChunk, n - off);
    toFloat(a + off, dtype, c, fa);
    toFloat(b + off, dtype, c, fb);
    reduceTyped<float>(fa, fb, c, op);
    fromFloat(fa, dtype, c, a + off);
  }
}

}  // namespace

bool reducible(DataType dtype, CommOp op) {
  if (!dtypeValid(dtype)) return false;
  return op != CommOp::kBitAnd || !dtypeIsFloat(dtype);
}

Status reduceInto(void* acc, const void* in, size_t n, DataType dtype, CommOp op) {
  MGS_ENSURE(reducible(dtype, op), kInternal, "no reduction of " << dtypeName(dtype) << " with this operation");
  if (n == 0) return Status::OK();
  switch (dtype) {
    case MGS_FLOAT32:
      reduceTyped<float>(acc, in, n, op);
      break;
    case MGS_FLOAT64:
      reduceTyped<double>(acc, in, n, op);
      break;
    case MGS_INT32:
      reduceTyped<int32_t>(acc, in, n, op);
      break;
    case MGS_INT64:
      reduceTyped<int64_t>(acc, in, n, op);
      break;
    case MGS_UINT8:
      reduceTyped<uint8_t>(acc, in, n, op);
      break;
    case MGS_FLOAT16:
      reduce16(acc, in, n, dtype, op);
      break;
    case MGS_BFLOAT16:
      reduce16(acc, in, n, dtype, op);
      break;
    default:
      break;
  }
  return Status::OK();
}

}  // namespace mgs
