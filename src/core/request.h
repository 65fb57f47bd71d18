// What a framework thread hands the coordinator: one collective on one named
// tensor, plus the "signature" every rank must agree on for it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace mgs {

using Clock = std::chrono::steady_clock;

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kBarrier = 3,
  kAlltoall = 4,
  kReducescatter = 5,
  kProcessSetAdd = 6,     // collective over every rank: creates a process set (Signature::ranks)
  kProcessSetRemove = 7,  // collective over every rank: removes process set Signature::root
  kJoin = 8               // this rank has no more data (Horovod's join)
};
const char* opTypeName(OpType t);

struct TensorDesc {
  void* data = nullptr;
  DataType dtype = MGS_FLOAT32;
  std::vector<int64_t> shape;
  int device = MGS_DEVICE_CPU;
  void* stream = nullptr;
  void* ready_event = nullptr;

  // Unchecked: valid once checkedSize() accepted the shape (every enqueue does).
  size_t numel() const {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
  size_t bytes() const { return numel() * dtypeSize(dtype); }
  bool onCuda() const { return device != MGS_DEVICE_CPU; }
};

// "[2, 3]"
std::string shapeString(const std::vector<int64_t>& shape);

// The largest tensor or result mgs accepts: no object can be larger than
// PTRDIFF_MAX bytes, and every count below it fits size_t and int64_t.
constexpr uint64_t kMaxBytes = static_cast<uint64_t>(INT64_MAX);

// Element and byte counts of `shape` x `dtype` (dimensions already checked
// non-negative), or kInvalidArgument saying which product overflows.
Status checkedSize(const std::vector<int64_t>& shape, DataType dtype, size_t* numel, size_t* bytes);

// The layout of an allgather's result, computed from every rank's first
// dimension. Every rank computes it from the same gathered dimensions, so an
// overflow fails on every rank alike, before anything is allocated.
struct AllgatherLayout {
  std::vector<size_t> rank_bytes;  // bytes contributed by each rank
  size_t total_bytes = 0;
  int64_t rows = 0;  // first dimension of the result
};
Status allgatherLayout(const std::vector<int64_t>& shape, DataType dtype, const std::vector<int64_t>& dims,
                       AllgatherLayout* out);

// The fields every rank must agree on. For allgather and alltoall the first
// dimension may differ per rank, so it is left out of the comparison.
struct Signature {
  OpType type = OpType::kAllreduce;
  DataType dtype = MGS_FLOAT32;
  std::vector<int64_t> shape;
  bool on_cuda = false;
  int32_t reduce_op = MGS_REDUCE_SUM;
  double prescale = 1.0;
  double postscale = 1.0;
  uint32_t flags = 0;
  int32_t root = 0;
  // The process set the op runs in (0: every rank). Its name is qualified
  // with it (qualifiedName), so names only meet within one set.
  int32_t process_set = 0;
  // kProcessSetAdd: the member ranks, ascending.
  std::vector<int32_t> ranks;

  // Empty if `this` (from rank a) and `o` (from rank b) agree; else a message
  // naming the field, both ranks and both values.
  std::string mismatch(const Signature& o, int rank_a, int rank_b) const;
  bool operator==(const Signature& o) const { return mismatch(o, 0, 0).empty(); }
};

class HandleState;

struct Request {
  std::string name;
  Signature sig;
  TensorDesc input;
  TensorDesc output;  // allreduce and reducescatter (input for broadcast is in place)
  std::vector<int64_t> splits;  // alltoall: rows of the input sent to each rank of the set, in set order
  std::shared_ptr<HandleState> handle;
  Clock::time_point enqueued;
  // An allreduce this rank runs with zeros for the others while it has
  // joined (controller.h): not enqueued here, its buffer is `owner`.
  bool served = false;
  std::shared_ptr<void> owner;
};

// The name an op travels under: `name` itself in the global set, else
// "name [process set N]", so that each set has its own names.
std::string qualifiedName(const std::string& name, int32_t process_set);

// Rows of reducescatter's result on each of `ranks` ranks for a first
// dimension of `dim0`: as even as possible, the first ranks one more.
std::vector<int64_t> reducescatterRows(int64_t dim0, int ranks);

}  // namespace mgs
