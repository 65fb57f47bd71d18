// The local stage of the sparse pipeline (docs/architecture.md "Sparse
// pipeline stages"): for one bucket, fuse the members' gradients and their
// error-feedback residual into the bucket's acc slab, select in place in acc,
// and pack the selection into a typed block (core/sparse_block.h). It does
// no communication. CpuLocalStage (core/cpu_local_stage.h) implements it on
// the host; a device implementation is made by device::createLocalStage
// (core/device.h), which cuda/ implements and the top-level CMakeLists.txt
// links in (MGS_DEVICE_IMPL). This header names no CUDA type.
//
// Contract, for every implementation:
//
// Threading. Every call comes from the coordinator thread, one at a time.
// The stage may take the ResidualStore's lock (framework threads read and
// restore residuals under it); it holds it only inside a call.
//
// Slabs. A slab holds n floats, the bucket's acc = prescale * gradient +
// residual (the residual term only with error feedback), members back to back
// in bucket order. The stage owns slab memory (host or device, its choice)
// and hands out a LocalSlab that the caller keeps while the bucket's exchange
// is in flight and returns through settle(). The residual itself is never
// written during run(): a bucket that fails, or that some rank's non-finite
// value stops, must leave every rank's residual bitwise as it was.
//
// run(). On return (synchronously: the block and the outcome are final, the
// caller may send the block at once):
//  - dense job (job.dense_acc set): dense_acc[0..n) = acc, no slab, no
//    selection, no block;
//  - sparse job: outcome->slab holds acc; if job.select and the fuse was
//    clean, the selector ran in place: the selected entries were written to
//    the block (values, indices) and are zero in acc, so that sent + kept ==
//    acc bitwise, entry by entry; the rest of acc is the new residual;
//  - if job.block is set (the allgather's block, or the agreed exchange's
//    index block on its leader), its header and seal are written: the count,
//    or block::failureCode(outcome->bad_member) when outcome->status is not
//    ok (the bucket still runs its collective part on every rank);
//  - outcome->status: ok, or kNumeric for NaN/Inf in acc (message from
//    nonFiniteStatus, bad_member = the first member holding one, non_finite
//    the number of such values), or the error of staging or selection,
//    prefixed with "rank r" (bad_member = -1). A non-finite value is found
//    either by the fuse or by the selector's scan; either way the status and
//    message are the same.
//
// extract(): the agreed exchange's non-leader ranks give up their acc at the
// leader's indices: vals[j] = acc[idx[j]], then acc[idx[j]] = 0 (distinct
// indices < n, validated; vals and idx are host memory).
//
// settle(): commit = true makes the slab the members' residual (under the
// ResidualStore's lock; the old storage may become a later bucket's slab);
// false drops the slab (reused). Called exactly once per sparse job's slab,
// before the bucket's handles complete (the next step may reuse the names).
// zeroResidual(): a dense bucket sent everything: the members' residual is 0.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "compress/selector.h"
#include "core/request.h"
#include "core/residual_store.h"

namespace mgs {

// A bucket's acc slab; what it holds is the implementation's business.
class LocalSlab {
 public:
  virtual ~LocalSlab() = default;
  virtual size_t size() const = 0;  // n
};

struct LocalJob {
  const std::vector<Request>* members = nullptr;  // bucket order; at least one
  size_t n = 0;                                   // sum of the members' numel()
  // Dense bucket: acc goes to this host buffer (n floats), nothing else runs.
  float* dense_acc = nullptr;
  // Sparse bucket.
  bool select = false;                            // run the selector (the agreed exchange: leader only)
  const compress::Selector* selector = nullptr;   // with select; its maxCount(n) <= cap
  size_t cap = 0;                                 // the block's capacity
  // Where the block goes: the allgather block (values and indices), or the
  // agreed exchange's index block, whose values go to agreed_values (cap
  // floats) instead. Null: nothing is packed (agreed non-leaders). Host
  // memory in this version (the exchange is MPI).
  char* block = nullptr;
  bool index_block = false;
  float* agreed_values = nullptr;
  uint64_t step = 0;                              // passed to the selector (its sampling seed)
  const char* name = "";                          // the bucket's name, for the selector's messages
};

struct LocalOutcome {
  Status status;
  int bad_member = -1;
  size_t non_finite = 0;
  std::unique_ptr<LocalSlab> slab;   // sparse jobs
  size_t count = 0;                  // entries selected (0 when nothing ran)
  size_t k = 0;                      // the selector's target (SelectResult::k)
  size_t reported = 0;               // the selector's count even if it failed (the timeline)
  bool selected = false;             // the selector ran
  // For the timeline and the online cost model.
  std::chrono::steady_clock::time_point fuse_end, select_begin, select_end;
};

class LocalStage {
 public:
  virtual ~LocalStage() = default;
  virtual void run(const LocalJob& job, LocalOutcome* outcome) = 0;
  virtual void extract(LocalSlab& slab, const uint32_t* idx, size_t count, float* vals) = 0;
  virtual void settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> slab, bool commit) = 0;
  virtual void zeroResidual(const std::vector<Request>& members) = 0;
  // Copy the slab's n floats to host memory (tests, diagnostics).
  virtual Status readSlab(const LocalSlab& slab, float* dst) = 0;
};

struct LocalStageOptions {
  int rank = 0;                   // for messages
  bool error_feedback = true;     // MGS_ERROR_FEEDBACK
  ResidualStore* residuals = nullptr;
  size_t max_slabs = 10;          // pooled slabs kept for reuse
};

// "name" for one tensor, "bucket[first .. last] (n tensors)" otherwise.
std::string bucketName(const std::vector<Request>& members);
// The kNumeric status of a bucket with non-finite values in acc (the same
// text from every implementation).
Status nonFiniteStatus(int rank, const std::vector<Request>& members, int bad_member, size_t non_finite, size_t n);

}  // namespace mgs
