// Alltoall and reducescatter on the coordinator thread (see executor.h).
#include <cstring>

#include "common/check.h"
#include "core/device.h"
#include "core/executor.h"
#include "core/fusion.h"
#include "core/handle_table.h"

namespace mgs {

Status Executor::alltoall(Request& r) {
  const auto t0 = Clock::now();
  const size_t p = static_cast<size_t>(comm_.size()), me = static_cast<size_t>(comm_.rank());
  MGS_ENSURE(r.splits.size() == p, kInternal,
             "alltoall has " << r.splits.size() << " splits for " << p << " ranks (checked at enqueue)");
  // Every rank's splits: row s holds what rank s sends to each rank.
  std::vector<int64_t> all(p * p);
  MGS_RETURN_IF_ERROR(comm_.allgather(r.splits.data(), p * sizeof(int64_t), all.data()));
  std::vector<int64_t> received(p);
  for (size_t s = 0; s < p; ++s) received[s] = all[s * p + me];
  AllgatherLayout layout;
  Status layout_st = allgatherLayout(r.input.shape, r.input.dtype, received, &layout);
  AllgatherResult& out = r.handle->allgather;
  std::string why = layout_st.ok() ? "" : "the result: " + layout_st.message();
  if (why.empty() && r.input.onCuda()) {
    try {
      stage_.resize(r.input.bytes());
    } catch (const std::exception&) {
      why = "could not allocate " + std::to_string(r.input.bytes()) + " bytes of host staging";
    }
  }
  MGS_RETURN_IF_ERROR(agreeAllocation(r, layout.total_bytes, &out.data, "alltoall result", why));
  // Bytes of one row: the same on every rank (negotiated).
  AllgatherLayout one;
  MGS_RETURN_IF_ERROR(allgatherLayout(r.input.shape, r.input.dtype, {1}, &one));
  std::vector<size_t> send_bytes(p);
  for (size_t q = 0; q < p; ++q) send_bytes[q] = static_cast<size_t>(r.splits[q]) * one.total_bytes;
  const void* send = r.input.data;
  if (r.input.onCuda()) {
    MGS_RETURN_IF_ERROR(device::waitReady(r.input));
    MGS_RETURN_IF_ERROR(device::copyToHost(stage_.data(), r.input, r.input.bytes()));
    send = stage_.data();
  }
  MGS_RETURN_IF_ERROR(comm_.alltoallv(send, send_bytes, out.data.data(), layout.rank_bytes));
  out.rank_sizes = received;
  out.shape = r.input.shape;
  out.shape[0] = layout.rows;
  span({&r}, "ALLTOALL", t0);
  return Status::OK();
}

Status Executor::reducescatter(Request& r) {
  const auto t0 = Clock::now();
  const Signature& sig = r.sig;
  const int p = comm_.size(), me = comm_.rank();
  const size_t n = r.input.numel(), esize = dtypeSize(sig.dtype);
  const int64_t dim0 = r.input.shape.at(0);
  const size_t row = dim0 > 0 ? n / static_cast<size_t>(dim0) : 0;
  const std::vector<int64_t> rows = reducescatterRows(dim0, p);
  const size_t count = static_cast<size_t>(rows[static_cast<size_t>(me)]) * row;
  MGS_ENSURE(r.output.numel() == count, kInternal,
             "reducescatter output holds " << r.output.numel() << " elements, " << count << " expected");
  const void* in = r.input.data;
  if (r.input.onCuda()) {
    stage_.resize(r.input.bytes());
    MGS_RETURN_IF_ERROR(device::waitReady(r.input));
    MGS_RETURN_IF_ERROR(device::copyToHost(stage_.data(), r.input, stage_.size()));
    in = stage_.data();
  }
  MGS_RETURN_IF_ERROR(agreeFinite({&r}, {in}));
  // A prescaled copy of the whole tensor is reduce-scattered: this rank
  // receives the sum of its rows only (Open MPI's reduce-scatter where MPI
  // has the type; else an allreduce of the copy, Communicator's default).
  packFusion({in}, {n}, sig.dtype, sig.prescale, &wire_);
  std::vector<size_t> counts(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) counts[static_cast<size_t>(q)] = static_cast<size_t>(rows[static_cast<size_t>(q)]) * row;
  scatter_out_.resize(count * esize);
  char* mine = scatter_out_.data();
  MGS_RETURN_IF_ERROR(comm_.reduceScatter(wire_.data(), mine, counts, sig.dtype, CommOp::kSum));
  scaleHost(mine, sig.dtype, count, finalFactor(sig));
  if (r.output.onCuda()) {
    MGS_RETURN_IF_ERROR(device::copyFromHost(r.output, mine, count * esize));
  } else if (count) {
    std::memcpy(r.output.data, mine, count * esize);
  }
  span({&r}, "REDUCESCATTER", t0);
  return Status::OK();
}

}  // namespace mgs
