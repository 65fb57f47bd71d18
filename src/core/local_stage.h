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
// Threading and sync. Every call comes from the coordinator thread, one at a
// time, and is synchronous: when it returns, everything it promises below
// holds (a device implementation synchronises whatever the caller reads).
// The caller reads outcome fields and hands a host block to MPI right after
// run(). The stage may take the ResidualStore's lock (framework threads read
// and restore residuals under it, mgs_residual_copy/restore); it holds it only
// inside a call, never across calls.
//
// Ownership. The caller owns the job's buffers: dense_acc, block and
// agreed_values (host memory in this version: the exchange is MPI), valid
// for the call only. The stage owns slab memory (host or device, its choice)
// and hands each sparse job's slab out as a LocalSlab; the caller keeps it
// while the bucket's exchange is in flight and gives it back through
// settle(), exactly once. The ResidualStore (host memory) holds the
// committed residual of every tensor; the stage reads it (contiguous(),
// under the lock) and, on commit, makes the slab the residual (adopt()).
// Residual slabs on a device would need ResidualStore to hold device memory,
// which it does not in this version.
//
// run(job, outcome). *outcome is reset first. Then:
//  - acc[i] = fuse(member gradient, prescale) + residual[i] over the bucket's
//    n entries (members back to back in job order; the residual term only
//    with error feedback; fuse = core/nonfinite.h fuseIntoFloat, bitwise),
//    counting NaN/Inf in acc. The residual itself is never written here: a
//    bucket that fails, or that some rank's non-finite value stops, must
//    leave every rank's residual bitwise as it was.
//  - dense job (dense_acc set): dense_acc[0..n) = acc. No slab, no
//    selection, no block; select/block/cap are ignored.
//  - sparse job: outcome->slab holds acc. If job.select and the fuse found
//    no error, the selector ran in place on acc (x = the gradient directly,
//    in one pass, is allowed where bitwise the same: one f32 tensor,
//    prescale 1): outcome->count entries (<= cap) were written as (value,
//    index) pairs, value == acc[index] bitwise, to the block (allgather
//    layout) or to agreed_values + the index block's indices (index_block),
//    and those entries are +0 in the slab; every other entry of the slab is
//    acc bitwise. So sent + kept == acc, entry by entry. Entries past count
//    are unspecified (sent as padding, never read). outcome->selected says
//    the selector ran; k, reported and the time points are for statistics.
//  - if job.block is set (always for the allgather; for the agreed exchange
//    only on its leader), its header and seal are written last: the count
//    when outcome->status is ok, else block::failureCode(outcome->bad_member),
//    so that every rank still runs the bucket's collectives and learns the
//    failure from the block.
//  - outcome->status: ok; or kNumeric for NaN/Inf in acc (message from
//    nonFiniteStatus(rank, ...), bad_member = the first member holding one,
//    non_finite = how many values), whether the fuse or the selector's scan
//    found it; or the error of staging a device input ("rank r, tensor 't':
//    ...") or of the selector ("rank r: ..."), bad_member = -1. On any error
//    count is 0.
//
// extract(slab, idx, count, vals): the agreed exchange's non-leaders give up
// their acc at the leader's indices: vals[j] = slab[idx[j]], then
// slab[idx[j]] = +0 (idx: count distinct indices < n, validated; idx and
// vals are host memory). An error (a device copy that failed) leaves vals
// unspecified: the caller fails the bucket on every rank (its flag).
//
// settle(members, slab, commit): commit (and error feedback on) makes the
// slab the members' residual under the ResidualStore's lock (the previous
// storage may become a later bucket's slab); otherwise the slab is dropped
// (reused), and the residual stays bitwise as it was. Called before the
// bucket's handles complete (the next step may reuse the names).
// zeroResidual(members): a dense bucket sent everything, so the members'
// residual becomes +0 (nothing without error feedback).
// readSlab(slab, dst): dst[0..n) = the slab, host memory (tests, diagnostics).
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
  bool select = false;                           // run the selector (the agreed exchange: leader only)
  const compress::Selector* selector = nullptr;  // with select; its maxCount(n) <= cap
  size_t cap = 0;                                // the block's capacity
  // Where the block goes: the allgather block (values and indices), or the
  // agreed exchange's index block, whose values go to agreed_values (cap
  // floats) instead. Null: nothing is packed (agreed non-leaders). Host
  // memory in this version (the exchange is MPI).
  char* block = nullptr;
  bool index_block = false;
  float* agreed_values = nullptr;
  // Sparse bucket whose acc is given (host memory, n floats: the
  // hierarchical exchange's node sum on its leader): copied into the slab
  // instead of fusing the members' gradients and residual; the residual is
  // not read. Always runs on the host stage.
  const float* acc_in = nullptr;
  uint64_t step = 0;      // passed to the selector (its sampling seed)
  const char* name = "";  // the bucket's name, for the selector's messages
  // The scatter writes every output element (the agreed exchange): where
  // every member is reduced in place (output == input, float32, host
  // memory) and the stage fuses the members itself (no selection here), it
  // zeroes each input right after reading it, while it is in cache, and
  // says so in LocalOutcome::inputs_zeroed; the scatter then writes only the
  // selected entries instead of first zeroing the whole output (a separate
  // pass over the gradient that cost as much CPU as the fuse, see
  // bench/NOTES.md). A bucket that fails leaves such a tensor zeroed (or
  // NaN under MGS_NONFINITE=propagate), not holding its gradient.
  bool zero_inputs = false;
};

struct LocalOutcome {
  Status status;
  int bad_member = -1;
  size_t non_finite = 0;
  std::unique_ptr<LocalSlab> slab;  // sparse jobs
  size_t count = 0;                 // entries selected (0 when nothing ran)
  size_t k = 0;                     // the selector's target (SelectResult::k)
  size_t reported = 0;              // the selector's count even if it failed (the timeline)
  bool selected = false;            // the selector ran
  bool inputs_zeroed = false;       // every member's input (= output) is now zero (LocalJob::zero_inputs)
  bool resident = false;            // a resident (device) stage ran it (RoutedLocalStage), not the host stage
  // For the timeline and the online cost model.
  std::chrono::steady_clock::time_point fuse_end, select_begin, select_end;
};

class LocalStage {
 public:
  virtual ~LocalStage() = default;
  virtual void run(const LocalJob& job, LocalOutcome* outcome) = 0;
  virtual Status extract(LocalSlab& slab, const uint32_t* idx, size_t count, float* vals) = 0;
  virtual void settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> slab, bool commit) = 0;
  virtual void zeroResidual(const std::vector<Request>& members) = 0;
  // Copy the slab's n floats to host memory (tests, diagnostics).
  virtual Status readSlab(const LocalSlab& slab, float* dst) = 0;
};

struct LocalStageOptions {
  int rank = 0;                // for messages
  bool error_feedback = true;  // MGS_ERROR_FEEDBACK
  ResidualStore* residuals = nullptr;
  size_t max_slabs = 10;  // pooled slabs kept for reuse
};

// "name" for one tensor, "bucket[first .. last] (n tensors)" otherwise.
std::string bucketName(const std::vector<Request>& members);
// The kNumeric status of a bucket with non-finite values in acc (the same
// text from every implementation).
Status nonFiniteStatus(int rank, const std::vector<Request>& members, int bad_member, size_t non_finite, size_t n);

}  // namespace mgs
