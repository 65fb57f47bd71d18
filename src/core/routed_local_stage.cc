#include "core/routed_local_stage.h"

#include "common/check.h"
#include "common/logging.h"
#include "core/sparse_block.h"

namespace mgs {

struct RoutedLocalStage::Slab : LocalSlab {
  std::unique_ptr<LocalSlab> inner;
  bool resident = false;
  size_t size() const override { return inner->size(); }
};

RoutedLocalStage::RoutedLocalStage(const LocalStageOptions& options, std::unique_ptr<LocalStage> host,
                                   ResidentFactory factory)
    : opt_(options), host_(std::move(host)), factory_(std::move(factory)) {
  factory_done_ = !factory_;
}

RoutedLocalStage::~RoutedLocalStage() {
  if (!resident_) return;
  // Residuals stay readable through the C ABI after the pipeline is gone.
  Status st = resident_->evictAll();
  if (!st.ok()) MGS_LOG_WARN("rank {}: residuals in device memory are lost at shutdown: {}", opt_.rank, st.message());
  opt_.residuals->setExternal(nullptr);
}

void RoutedLocalStage::makeResident(const LocalJob& job) {
  if (factory_done_) return;
  std::unique_ptr<ResidentLocalStage> r;
  Status st = factory_(job, &r);
  if (!st.ok()) {
    factory_done_ = true;
    MGS_LOG_WARN(
        "rank {}: no device local stage ({}); sparse buckets of CUDA tensors are staged through host "
        "memory and selected on the CPU",
        opt_.rank, st.message());
  } else if (r) {
    factory_done_ = true;
    resident_ = std::move(r);
    opt_.residuals->setExternal(resident_.get());
  }
}

bool RoutedLocalStage::prepareDevice(const LocalJob& job) {
  makeResident(job);
  return resident_ && resident_->runsDeviceBuckets();
}

Status RoutedLocalStage::timeResidentSelection(const LocalJob& job, const std::vector<size_t>& sizes,
                                               std::vector<double>* seconds) {
  makeResident(job);
  MGS_ENSURE(resident_ && job.selector != nullptr && (resident_->runsDeviceBuckets() || resident_->accepts(job)),
             kUnsupported, "this bucket is not selected by a resident stage");
  return resident_->timeSelection(*job.selector, sizes, seconds);
}

namespace {

// The resident stage's pending bucket, its slab wrapped for settle().
class RoutedPending final : public PendingDeviceBucket {
 public:
  RoutedPending(std::unique_ptr<PendingDeviceBucket> inner,
                std::function<std::unique_ptr<LocalSlab>(std::unique_ptr<LocalSlab>)> wrap)
      : inner_(std::move(inner)), wrap_(std::move(wrap)) {}
  Status test(bool* done) override { return inner_->test(done); }
  Status wait() override { return inner_->wait(); }
  Status result(DeviceBucketResult* out) override { return inner_->result(out); }
  std::unique_ptr<LocalSlab> takeSlab() override {
    std::unique_ptr<LocalSlab> s = inner_->takeSlab();
    return s ? wrap_(std::move(s)) : nullptr;
  }

 private:
  std::unique_ptr<PendingDeviceBucket> inner_;
  std::function<std::unique_ptr<LocalSlab>(std::unique_ptr<LocalSlab>)> wrap_;
};

}  // namespace

Status RoutedLocalStage::startBucket(const DeviceBucketJob& job, std::unique_ptr<PendingDeviceBucket>* out) {
  MGS_ENSURE(job.job != nullptr && job.job->members != nullptr, kInvalidArgument, "device bucket without a job");
  if (!resident_ || !resident_->runsDeviceBuckets())
    return Status(Code::kInternal, "rank " + std::to_string(opt_.rank) + ": device bucket " +
                                       bucketName(*job.job->members) + " but no device local stage runs them");
  std::unique_ptr<PendingDeviceBucket> inner;
  MGS_RETURN_IF_ERROR(resident_->startBucket(job, &inner));
  ++device_runs_;
  *out = std::make_unique<RoutedPending>(std::move(inner), [](std::unique_ptr<LocalSlab> s) {
    auto w = std::make_unique<Slab>();
    w->inner = std::move(s);
    w->resident = true;
    return std::unique_ptr<LocalSlab>(std::move(w));
  });
  return Status::OK();
}

void RoutedLocalStage::run(const LocalJob& job, LocalOutcome* out) {
  makeResident(job);
  auto slab = std::make_unique<Slab>();
  if (resident_ && !job.acc_in && resident_->accepts(job)) {
    resident_->run(job, out);
    out->resident = true;
    ++resident_runs_;
    slab->resident = true;
  } else {
    // Whatever residual of these tensors lives in the resident stage comes
    // back to the host store first.
    const Status back = resident_ ? resident_->evict(*job.members) : Status::OK();
    host_->run(job, out);
    ++host_runs_;
    if (!back.ok()) {
      // The host stage computed with the wrong residual: the bucket fails on
      // this rank (every rank learns it from the block), nothing commits.
      out->status = Status(back.code(), "rank " + std::to_string(opt_.rank) + ": moving the residual of " +
                                            bucketName(*job.members) + " to host memory failed: " + back.message());
      out->count = 0;
      out->bad_member = -1;
      if (job.block && job.dense_acc == nullptr) {
        if (job.index_block)
          block::IndexBlock(job.block, job.cap).finish(block::failureCode(-1));
        else
          block::AllgatherBlock(job.block, job.cap).finish(block::failureCode(-1));
      }
    }
  }
  if (out->slab) {
    slab->inner = std::move(out->slab);
    out->slab = std::move(slab);
  }
}

Status RoutedLocalStage::extract(LocalSlab& slab, const uint32_t* idx, size_t count, float* vals) {
  auto& s = static_cast<Slab&>(slab);
  return (s.resident ? static_cast<LocalStage*>(resident_.get()) : host_.get())->extract(*s.inner, idx, count, vals);
}

void RoutedLocalStage::settle(const std::vector<Request>& members, std::unique_ptr<LocalSlab> slab, bool commit) {
  if (!slab) return;
  auto& s = static_cast<Slab&>(*slab);
  (s.resident ? static_cast<LocalStage*>(resident_.get()) : host_.get())->settle(members, std::move(s.inner), commit);
}

void RoutedLocalStage::zeroResidual(const std::vector<Request>& members) {
  // Everything was sent: the residual is +0 wherever it lived. Dense buckets
  // ran on the host stage, which took the residuals back already; a name the
  // resident stage still holds is simply forgotten there.
  if (resident_) {
    auto lk = opt_.residuals->lock();
    for (const auto& m : members) resident_->drop(m.name);
  }
  host_->zeroResidual(members);
}

Status RoutedLocalStage::readSlab(const LocalSlab& slab, float* dst) {
  const auto& s = static_cast<const Slab&>(slab);
  return (s.resident ? static_cast<LocalStage*>(resident_.get()) : host_.get())->readSlab(*s.inner, dst);
}

}  // namespace mgs
