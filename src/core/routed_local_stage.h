// The local stage the sparse pipeline runs (core/local_stage.h has the
// contract): it routes each bucket to the host stage (CpuLocalStage) or to a
// resident stage, one whose slabs and residuals live in memory of its own,
// a GPU's (the CUDA stage made by device::createLocalStage). A resident stage
// serves the buckets it accepts (every member a CUDA tensor on its device,
// the allgather exchange) without the gradient crossing to the host.
//
// One residual per tensor, wherever it lives. The resident stage registers
// as the ResidualStore's External holder, so mgs_residual_copy/restore reach
// residuals in device memory. A tensor's residual moves with its bucket:
//  - to the resident stage when a bucket it accepts first holds the tensor
//    (ResidualStore::takeLocked: the host copy is gone from then on);
//  - back to the host store (evict) before any other bucket holding that
//    tensor runs on the host stage: a dense bucket, the agreed exchange, a
//    bucket mixing host and device tensors.
// If handing a residual back fails, the bucket fails on this rank (a failure
// code in its block, or a failed local status for a dense bucket), so no rank
// commits it and the residual stays where it was.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/local_stage.h"
#include "core/residual_store.h"

namespace mgs {

class ResidentLocalStage : public LocalStage, public ResidualStore::External {
 public:
  // Whether `job` runs here. Pure: the same answer for the same job.
  virtual bool accepts(const LocalJob& job) const = 0;
  // Hand the residuals of `members` that are held here to the ResidualStore
  // (putLocked) and forget them here. Takes the store's lock.
  virtual Status evict(const std::vector<Request>& members) = 0;
  // The same for every residual held here (at shutdown: residuals stay
  // readable through the C ABI after the pipeline is gone).
  virtual Status evictAll() = 0;
  // Whether scatterBlocks can write these members' outputs (e.g. all CUDA
  // tensors on this stage's device). Pure.
  virtual bool acceptsScatter(const std::vector<Request>& members) const = 0;
  // The allgather's scatter into the outputs, in this stage's memory: `recv`
  // holds the P received blocks of capacity `cap` in rank order (host memory,
  // validated: every header a count); member m's output gets the sum over
  // ranks from +0, in rank order, of the values at its indices, each touched
  // entry scaled once by factors[m], every other entry +0: bitwise what
  // ScatterStage::scatterBlocks writes. Synchronous: the outputs are final
  // when it returns.
  virtual Status scatterBlocks(const std::vector<Request>& members, const char* recv, int P, size_t cap,
                               const std::vector<double>& factors) = 0;
};

// Asked for a job while no resident stage exists: OK with *out null when
// the job is not for one (host tensors); OK with a stage; or the reason none
// can exist here, after which it is not asked again.
using ResidentFactory = std::function<Status(const LocalJob& job, std::unique_ptr<ResidentLocalStage>* out)>;

class RoutedLocalStage final : public LocalStage {
 public:
  RoutedLocalStage(const LocalStageOptions& options, std::unique_ptr<LocalStage> host, ResidentFactory factory);
  ~RoutedLocalStage() override;
  RoutedLocalStage(const RoutedLocalStage&) = delete;
  RoutedLocalStage& operator=(const RoutedLocalStage&) = delete;

  void run(const LocalJob& job, LocalOutcome* outcome) override;
  void extract(LocalSlab& slab, const uint32_t* idx, size_t count, float* vals) override;
  void settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> slab, bool commit) override;
  void zeroResidual(const std::vector<Request>& members) override;
  Status readSlab(const LocalSlab& slab, float* dst) override;

  // The resident stage, once made (tests, statistics); null before.
  ResidentLocalStage* resident() const { return resident_.get(); }
  // Buckets each stage ran so far.
  uint64_t residentBuckets() const { return resident_runs_; }
  uint64_t hostBuckets() const { return host_runs_; }

 private:
  struct Slab;
  LocalStageOptions opt_;
  std::unique_ptr<LocalStage> host_;
  ResidentFactory factory_;
  bool factory_done_ = false;
  std::unique_ptr<ResidentLocalStage> resident_;
  uint64_t resident_runs_ = 0, host_runs_ = 0;
};

}  // namespace mgs
