// Runtime entry points for alltoall, reducescatter, process sets and join
// (runtime.h); the checks every rank can make alone happen here, before
// anything is negotiated.
#include <cmath>

#include "common/check.h"
#include "core/runtime.h"

namespace mgs {

Status Runtime::enqueueAlltoall(const std::string& name, const TensorDesc& in, std::vector<int64_t> splits,
                                int32_t process_set, uint64_t* handle) {
  MGS_ENSURE(!name.empty(), kInvalidArgument, "alltoall: the tensor name is empty");
  MGS_RETURN_IF_ERROR(checkTensor(name, "input", in));
  MGS_ENSURE(!in.shape.empty(), kInvalidArgument,
             "alltoall of tensor '" << name << "': needs at least one dimension (got a scalar)");
  ProcessSetInfo set;
  MGS_RETURN_IF_ERROR(processSet(process_set, &set));
  const int64_t n = static_cast<int64_t>(set.ranks.size());
  const int64_t dim0 = in.shape[0];
  if (splits.empty()) {
    MGS_ENSURE(dim0 % n == 0, kInvalidArgument,
               "alltoall of tensor '" << name << "': the first dimension (" << dim0
                                      << ") is not a multiple of the number of ranks (" << n
                                      << "); give splits to send unequal parts");
    splits.assign(static_cast<size_t>(n), dim0 / n);
  }
  MGS_ENSURE(static_cast<int64_t>(splits.size()) == n, kInvalidArgument,
             "alltoall of tensor '" << name << "': " << splits.size() << " splits for " << n << " ranks");
  int64_t total = 0;
  for (size_t q = 0; q < splits.size(); ++q) {
    MGS_ENSURE(splits[q] >= 0, kInvalidArgument,
               "alltoall of tensor '" << name << "': split " << q << " is negative (" << splits[q] << ")");
    total += splits[q];
    MGS_ENSURE(total <= dim0, kInvalidArgument,
               "alltoall of tensor '" << name << "': the splits add up to more than the first dimension (" << dim0
                                      << ")");
  }
  MGS_ENSURE(total == dim0, kInvalidArgument,
             "alltoall of tensor '" << name << "': the splits add up to " << total << ", not the first dimension ("
                                    << dim0 << ")");
  Request req;
  req.name = name;
  req.sig = signatureOf(OpType::kAlltoall, in);
  req.sig.process_set = process_set;
  req.input = in;
  req.splits = std::move(splits);
  return enqueue(std::move(req), handle);
}

Status Runtime::enqueueReducescatter(const std::string& name, const TensorDesc& in, const TensorDesc& out,
                                     int reduce_op, double prescale, double postscale, int32_t process_set,
                                     uint64_t* handle) {
  MGS_ENSURE(!name.empty(), kInvalidArgument, "reducescatter: the tensor name is empty");
  MGS_RETURN_IF_ERROR(checkTensor(name, "input", in));
  MGS_RETURN_IF_ERROR(checkTensor(name, "output", out));
  MGS_ENSURE(!in.shape.empty(), kInvalidArgument,
             "reducescatter of tensor '" << name << "': needs at least one dimension (got a scalar)");
  MGS_ENSURE(reduce_op == MGS_REDUCE_SUM || reduce_op == MGS_REDUCE_AVERAGE, kInvalidArgument,
             "reducescatter of tensor '" << name << "': unknown reduce op " << reduce_op);
  MGS_ENSURE(std::isfinite(prescale) && std::isfinite(postscale), kInvalidArgument,
             "reducescatter of tensor '" << name << "': scale factors must be finite");
  ProcessSetInfo set;
  MGS_RETURN_IF_ERROR(processSet(process_set, &set));
  // This rank's rows of the result (a rank outside the set gets the error of
  // negotiation instead).
  const int me = std::max(set.indexOf(rank_), 0);
  std::vector<int64_t> shape = in.shape;
  shape[0] = reducescatterRows(in.shape[0], static_cast<int>(set.ranks.size()))[static_cast<size_t>(me)];
  MGS_ENSURE(out.dtype == in.dtype && out.shape == shape && out.onCuda() == in.onCuda(), kInvalidArgument,
             "reducescatter of tensor '" << name << "': the output must be " << dtypeName(in.dtype) << " "
                                         << shapeString(shape) << " on the input's device, got "
                                         << dtypeName(out.dtype) << " " << shapeString(out.shape));
  Request req;
  req.name = name;
  req.sig = signatureOf(OpType::kReducescatter, in);
  req.sig.reduce_op = reduce_op;
  req.sig.prescale = prescale;
  req.sig.postscale = postscale;
  req.sig.process_set = process_set;
  req.input = in;
  req.output = out;
  return enqueue(std::move(req), handle);
}

Status Runtime::processSet(int32_t id, ProcessSetInfo* out) const {
  MGS_ENSURE(sets_.get(id, out), kInvalidArgument,
             "process set " << id << " does not exist (never added, or removed)");
  return Status::OK();
}

Status Runtime::addProcessSet(std::vector<int32_t> ranks, int32_t* id) {
  MGS_ENSURE(id != nullptr, kInvalidArgument, "add_process_set: the id pointer is NULL");
  MGS_RETURN_IF_ERROR(ProcessSetTable::validate(&ranks, size_));
  Request req;
  // Adds and removes share one count, so every rank must make them in the same order.
  req.name = "mgs.process_set." + std::to_string(process_set_count_.fetch_add(1));
  req.sig.type = OpType::kProcessSetAdd;
  req.sig.ranks = std::move(ranks);
  int64_t value = 0;
  MGS_RETURN_IF_ERROR(runBlocking(std::move(req), &value));
  *id = static_cast<int32_t>(value);
  return Status::OK();
}

Status Runtime::removeProcessSet(int32_t id) {
  MGS_ENSURE(id != 0, kInvalidArgument, "the global process set (0) cannot be removed");
  ProcessSetInfo info;
  MGS_RETURN_IF_ERROR(processSet(id, &info));
  Request req;
  req.name = "mgs.process_set." + std::to_string(process_set_count_.fetch_add(1));
  req.sig.type = OpType::kProcessSetRemove;
  req.sig.root = id;
  return runBlocking(std::move(req));
}

Status Runtime::join(int32_t* last_rank) {
  Request req;
  req.name = "mgs.join." + std::to_string(join_count_.fetch_add(1));
  req.sig.type = OpType::kJoin;
  int64_t value = -1;
  MGS_RETURN_IF_ERROR(runBlocking(std::move(req), &value));
  if (last_rank != nullptr) *last_rank = static_cast<int32_t>(value);
  return Status::OK();
}

}  // namespace mgs
