#include "core/request.h"

#include <sstream>

namespace mgs {

const char* opTypeName(OpType t) {
  switch (t) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kBarrier: return "barrier";
  }
  return "unknown";
}

size_t TensorDesc::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
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
    os << "mismatched " << what << ": rank " << rank_a << " has " << a << " but rank " << rank_b
       << " has " << b;
  };
  if (type != o.type) {
    differ("operation", opTypeName(type), opTypeName(o.type));
  } else if (dtype != o.dtype) {
    differ("dtype", dtypeName(dtype), dtypeName(o.dtype));
  } else if (on_cuda != o.on_cuda) {
    differ("device", on_cuda ? "CUDA" : "CPU", o.on_cuda ? "CUDA" : "CPU");
  } else if (type == OpType::kAllgather) {
    const bool same = shape.size() == o.shape.size() && shape.size() >= 1 &&
                      std::equal(shape.begin() + 1, shape.end(), o.shape.begin() + 1);
    if (!same) differ("shape (allgather needs equal dimensions after the first)", shapeString(shape),
                      shapeString(o.shape));
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
