#include "core/request.h"

#include <sstream>

namespace mgs {

const char* opTypeName(OpType t) {
  switch (t) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kProcessSetAdd:
      return "add_process_set";
    case OpType::kProcessSetRemove:
      return "remove_process_set";
    case OpType::kJoin:
      return "join";
  }
  return "unknown";
}

Status checkedSize(const std::vector<int64_t>& shape, DataType dtype, size_t* numel, size_t* bytes) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return Status(Code::kInvalidArgument, "shape " + shapeString(shape) + " has a negative dimension");
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > kMaxBytes)
      return Status(Code::kInvalidArgument, "shape " + shapeString(shape) + " has more than 2^63 elements");
  }
  uint64_t b = 0;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(dtypeSize(dtype)), &b) || b > kMaxBytes)
    return Status(Code::kInvalidArgument, "shape " + shapeString(shape) + " of " + dtypeName(dtype) + " holds " +
                                              std::to_string(n) + " elements, more than 2^63 bytes");
  *numel = static_cast<size_t>(n);
  *bytes = static_cast<size_t>(b);
  return Status::OK();
}

Status allgatherLayout(const std::vector<int64_t>& shape, DataType dtype, const std::vector<int64_t>& dims,
                       AllgatherLayout* out) {
  if (shape.empty()) return Status(Code::kInvalidArgument, "allgather needs at least one dimension");
  // Bytes of one row: the product of the dimensions after the first.
  size_t row_elems = 0, row = 0;
  std::vector<int64_t> rest(shape.begin() + 1, shape.end());
  if (Status st = checkedSize(rest, dtype, &row_elems, &row); !st.ok())
    return Status(st.code(), "the dimensions after the first: " + st.message());
  out->rank_bytes.assign(dims.size(), 0);
  out->total_bytes = 0;
  out->rows = 0;
  for (size_t r = 0; r < dims.size(); ++r) {
    if (dims[r] < 0)
      return Status(Code::kInvalidArgument,
                    "rank " + std::to_string(r) + " has first dimension " + std::to_string(dims[r]));
    uint64_t b = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(dims[r]), static_cast<uint64_t>(row), &b) || b > kMaxBytes)
      return Status(Code::kInvalidArgument, "rank " + std::to_string(r) + "'s input (first dimension " +
                                                std::to_string(dims[r]) + ") has more than 2^63 bytes");
    out->rank_bytes[r] = static_cast<size_t>(b);
    uint64_t total = 0;
    if (__builtin_add_overflow(static_cast<uint64_t>(out->total_bytes), b, &total) || total > kMaxBytes)
      return Status(Code::kInvalidArgument, "the result over all ranks has more than 2^63 bytes");
    out->total_bytes = static_cast<size_t>(total);
    if (__builtin_add_overflow(out->rows, dims[r], &out->rows))
      return Status(Code::kInvalidArgument, "the result's first dimension (the sum over ranks) exceeds 2^63 - 1");
  }
  return Status::OK();
}

std::string qualifiedName(const std::string& name, int32_t process_set) {
  return process_set == 0 ? name : name + " [process set " + std::to_string(process_set) + "]";
}

std::vector<int64_t> reducescatterRows(int64_t dim0, int ranks) {
  std::vector<int64_t> rows(static_cast<size_t>(ranks), ranks > 0 ? dim0 / ranks : 0);
  for (int r = 0; r < ranks && r < dim0 % ranks; ++r) rows[static_cast<size_t>(r)] += 1;
  return rows;
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::string Signature::mismatch(const Signature& o, int rank_a, int rank_b) const {
  std::ostringstream os;
  auto differ = [&](const char* what, const std::string& a, const std::string& b) {
    os << "mismatched " << what << ": rank " << rank_a << " has " << a << " but rank " << rank_b << " has " << b;
  };
  if (type != o.type) {
    differ("operation", opTypeName(type), opTypeName(o.type));
  } else if (dtype != o.dtype) {
    differ("dtype", dtypeName(dtype), dtypeName(o.dtype));
  } else if (on_cuda != o.on_cuda) {
    differ("device", on_cuda ? "CUDA" : "CPU", o.on_cuda ? "CUDA" : "CPU");
  } else if (type == OpType::kProcessSetAdd) {
    if (ranks != o.ranks) {
      std::vector<int64_t> a(ranks.begin(), ranks.end()), b(o.ranks.begin(), o.ranks.end());
      differ("process set ranks", shapeString(a), shapeString(b));
    }
  } else if (type == OpType::kProcessSetRemove) {
    if (root != o.root) differ("process set to remove", std::to_string(root), std::to_string(o.root));
  } else if (type == OpType::kAllgather || type == OpType::kAlltoall) {
    const bool same = shape.size() == o.shape.size() && shape.size() >= 1 &&
                      std::equal(shape.begin() + 1, shape.end(), o.shape.begin() + 1);
    if (!same)
      differ(type == OpType::kAllgather ? "shape (allgather needs equal dimensions after the first)"
                                        : "shape (alltoall needs equal dimensions after the first)",
             shapeString(shape), shapeString(o.shape));
  } else if (shape != o.shape) {
    differ("shape", shapeString(shape), shapeString(o.shape));
  } else if (reduce_op != o.reduce_op) {
    differ("reduce op", reduce_op == MGS_REDUCE_SUM ? "sum" : "average",
           o.reduce_op == MGS_REDUCE_SUM ? "sum" : "average");
  } else if (prescale != o.prescale || postscale != o.postscale) {
    differ("scale factors", std::to_string(prescale) + "/" + std::to_string(postscale),
           std::to_string(o.prescale) + "/" + std::to_string(o.postscale));
  } else if (flags != o.flags) {
    differ("flags", std::to_string(flags), std::to_string(o.flags));
  } else if (root != o.root) {
    differ("root rank", std::to_string(root), std::to_string(o.root));
  }
  return os.str();
}

}  // namespace mgs
