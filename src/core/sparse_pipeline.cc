#include "core/sparse_pipeline.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "common/check.h"
#include "common/logging.h"
#include "common/threads.h"
#include "core/calibration.h"
#include "core/cpu_local_stage.h"
#include "core/device.h"
#include "core/routed_local_stage.h"

namespace mgs {
namespace {

// Extreme but valid settings must not overflow inside the pipeline:
// MGS_WARMUP_STEPS = INT64_MAX (W + 1) and a tiny MGS_CYCLE_TIME_MS (cycles
// per second cast to int). Neither clamp changes what any job can observe:
// no job reaches 2^63 steps, and a cycle never lasts under a microsecond.
Config clamped(Config c) {
  c.warmup_steps = std::min<int64_t>(c.effectiveWarmupSteps(), INT64_MAX - 1);  // 'auto' resolved here, once
  c.cycle_time_ms = std::max(c.cycle_time_ms, 1e-3);
  return c;
}

}  // namespace

SparsePipeline::SparsePipeline(Communicator& comm, const Config& config, ResidualStore& residuals, Complete complete,
                               SparseProgress* progress)
    : comm_(comm),
      config_(clamped(config)),
      complete_(std::move(complete)),
      threads_(threadBudget(config.threads, comm.localSize())),
      cost_(comm, config_),
      schedule_(comm, config_, cost_, stats_,
                [this](std::vector<Request>& members, int plan_bucket) { runBucket(members, plan_bucket); }),
      exchange_(comm, progress),
      scatter_(comm.size()),
      ctx_(comm, config_, stats_, cost_.online(), exchange_, scatter_) {
  if (config_.compressor != "none") stats_.warmup_steps = static_cast<uint64_t>(config_.warmup_steps);
  schedule_.setProgress(progress);
  // The host stage serves every bucket but those of CUDA tensors that a
  // device stage accepts (routed_local_stage.h); where none can be made,
  // CUDA inputs are staged through the host.
  LocalStageOptions o;
  o.rank = comm.rank();
  o.error_feedback = config_.error_feedback;
  o.residuals = &residuals;
  // Buckets in flight plus a few committed ones' predecessors.
  o.max_slabs = 2 * BlockExchange::kMaxInFlight + 2;
  // On the device communicator's device once device buckets are considered
  // (a rank whose first tensor is on another device must not make its
  // stage there), else the first CUDA tensor's.
  auto device_stage = [o, this](const LocalJob& job, std::unique_ptr<ResidentLocalStage>* out) -> Status {
    const TensorDesc& first = (*job.members)[0].input;
    if (!first.onCuda()) return Status::OK();
    return device::createLocalStage(o, device_hint_ >= 0 ? device_hint_ : first.device, out);
  };
  local_options_ = o;
  local_ = std::make_unique<RoutedLocalStage>(o, std::make_unique<CpuLocalStage>(o), device_stage);
  ctx_.local = local_.get();
  ctx_.selector = [this](double density) -> const compress::Selector& { return selectorFor(density); };
  ctx_.step = [this]() { return schedule_.step(); };
  ctx_.device_bucket = [this](const std::vector<Request>& members, const LocalJob& job) {
    return deviceBucket(members, job);
  };
  ctx_.device_comm = [this]() { return device_comm_(); };
}

void SparsePipeline::setResidentFactory(ResidentFactory factory) {
  local_.reset();  // gives the residual store's External slot back first
  local_ = std::make_unique<RoutedLocalStage>(local_options_, std::make_unique<CpuLocalStage>(local_options_),
                                              std::move(factory));
  ctx_.local = local_.get();
}

Status SparsePipeline::setupAsync() {
  // Collective (every rank has the same backend). The owner must call
  // pumpInFlight() from every blocking wait of this rank (negotiation, a dense
  // allreduce, the oldest allgather: Communicator::setWaitHook), so that a
  // rank blocked in a collective is never the one holding back a phase
  // another rank waits for.
  if (!comm_.asyncCollectives()) return Status::OK();
  MGS_RETURN_IF_ERROR(comm_.duplicate(&ctx_.values_comm));
  MGS_RETURN_IF_ERROR(comm_.duplicate(&ctx_.names_comm));
  return Status::OK();
}

Status SparsePipeline::create(Communicator& comm, const Config& config, ResidualStore& residuals, Complete complete,
                              std::unique_ptr<SparsePipeline>* out, SparseProgress* progress) {
  std::unique_ptr<SparsePipeline> p(new SparsePipeline(comm, config, residuals, std::move(complete), progress));
  MGS_RETURN_IF_ERROR(p->init());
  if (p->config_.compressor != "none") {
    MGS_RETURN_IF_ERROR(p->setupAsync());
    // The cost model (collectives, in this order on every rank): resolved,
    // then the job's nodes grouped and their terms added.
    MGS_RETURN_IF_ERROR(p->cost_.resolve(p->selectorFor(p->config_.density)));
    MGS_RETURN_IF_ERROR(setupNodes(comm, p->config_, &p->ctx_.nodes));
    MGS_RETURN_IF_ERROR(p->cost_.useNodes(p->ctx_.nodes));
    // MGS_PLAN_FILE (collective): a saved plan replaces profiling and planning.
    SparsePipeline* q = p.get();
    MGS_RETURN_IF_ERROR(p->schedule_.usePlanFile([q](Request& r, Status st) { q->complete_(r, std::move(st)); }));
  }
  *out = std::move(p);
  return Status::OK();
}

compress::SelectorOptions SparsePipeline::selectorOptions(double density) const {
  compress::SelectorOptions opts;
  opts.density = density;
  opts.numThreads = threads_;
  opts.gpuPerPassLaunches = config_.gpu_launches == "per-pass";  // the device stage's GPU selector takes it up
  return opts;
}

Status SparsePipeline::init() {
  if (config_.compressor == "none") return Status::OK();
  std::unique_ptr<compress::Selector> sel;
  MGS_RETURN_IF_ERROR(compress::Selector::create(config_.compressor, selectorOptions(config_.density), &sel));
  selectors_.emplace(config_.density, std::move(sel));
  return Status::OK();
}

bool SparsePipeline::eligible(const Signature& sig) const {
  if (config_.compressor == "none" || !(sig.flags & MGS_FLAG_SPARSE_OK) || sig.type != OpType::kAllreduce) return false;
  if (sig.dtype != MGS_FLOAT32 && sig.dtype != MGS_FLOAT16 && sig.dtype != MGS_BFLOAT16) return false;
  int64_t n = 1;
  for (int64_t d : sig.shape) n *= d;
  return n >= config_.min_sparse_elements && n > 0 && n < (int64_t{1} << 32);
}

const compress::Selector& SparsePipeline::selectorFor(double density) {
  auto it = selectors_.find(density);
  if (it != selectors_.end()) return *it->second;
  std::unique_ptr<compress::Selector> sel;
  // The name was validated by init(); only the density differs.
  (void)compress::Selector::create(config_.compressor, selectorOptions(density), &sel);
  return *selectors_.emplace(density, std::move(sel)).first->second;
}

void SparsePipeline::calibrateDeviceSelection(std::vector<Request>& members, size_t n) {
  LocalJob job;
  job.members = &members;
  job.n = n;
  job.selector = &selectorFor(config_.density);
  std::vector<double> mine;
  const Status own = local_->timeResidentSelection(job, calibrationSelectionSizes(), &mine);
  cost_.agreeDeviceSelection(own, mine);
}

void SparsePipeline::calibrateDeviceCollectives(std::vector<Request>& members, size_t n) {
  LocalJob probe;
  probe.members = &members;
  probe.n = n;
  // The same answer on every rank: either none times, or every rank does.
  if (!deviceBucket(members, probe) || !local_->resident()) {
    cost_.skipDeviceCollectives();
    return;
  }
  device::DeviceComm* dc = device_comm_();
  std::vector<double> mine;
  const Status own = local_->resident()->timeCollectives(*dc->comm, deviceCollectiveSizes(comm_.size()), &mine);
  cost_.agreeDeviceCollectives(own, mine);
}

plan::Exchange SparsePipeline::chooseExchange(std::vector<Request>& members, size_t n, double density) {
  const int P = comm_.size();
  // on_cuda is negotiated: every rank takes the same branch.
  const bool cuda_bucket = std::all_of(members.begin(), members.end(), [](const Request& m) { return m.sig.on_cuda; });
  if (cuda_bucket && config_.exchange == "auto" && P > 1) {
    // A bucket of CUDA tensors that every rank can keep on the GPU never
    // takes an exchange that would stage its gradient through host memory
    // and select it on the CPU, whatever the MPI-calibrated cost model says.
    //  - Device buckets (NCCL, every rank with a device stage: deviceBucket
    //    agrees on that once): the allgather, or where the model was given
    //    the device communicator's terms (devicePriced) its choice among
    //    the exchanges 'auto' allows (allowedExchanges: the allgather and
    //    the dense fallback) that have a device bucket.
    //  - A resident stage on every rank without device buckets (no NCCL):
    //    the allgather selects on the GPU and sends only compact data
    //    through MPI. (The agreed exchange does too, and is kept should the
    //    allowed set include it.)
    // Dense only where the 1/P rule says sparse cannot pay: a device
    // bucket too where the resident stage runs them (runsDenseDeviceBuckets),
    // else through host memory.
    LocalJob probe;
    probe.members = &members;
    probe.n = n;
    const bool device = deviceBucket(members, probe);
    if (device || residentEverywhere(members, n)) {
      if (config_.dense_fallback && density * P >= 1.0) return plan::Exchange::kDense;
      if (device && !cost_.devicePriced()) return plan::Exchange::kAllgather;
      const plan::Exchange e = schedule_.exchangeFor(members, n, density);
      if (e == plan::Exchange::kAgreed) return e;
      if (e == plan::Exchange::kDense && device && local_->resident()->runsDenseDeviceBuckets()) return e;
      return plan::Exchange::kAllgather;
    }
  }
  // The cost model's choice, or the plan file's (MGS_PLAN_FILE).
  return schedule_.exchangeFor(members, n, density);
}

void SparsePipeline::runBucket(std::vector<Request>& members, int plan_bucket) {
  if (members.empty()) return;
  const auto t0 = Clock::now();
  size_t n = 0;
  for (auto& m : members) n += m.input.numel();
  if (cost_.wantsDeviceSelection() &&
      std::all_of(members.begin(), members.end(), [](const Request& m) { return m.sig.on_cuda; }))
    calibrateDeviceSelection(members, n);
  if (cost_.wantsDeviceCollectives() &&
      std::all_of(members.begin(), members.end(), [](const Request& m) { return m.sig.on_cuda; }))
    calibrateDeviceCollectives(members, n);
  const double density = schedule_.currentDensity();
  // The same choice on every rank.
  const plan::Exchange exchange = chooseExchange(members, n, density);
  BucketStart b{members, n, density, bucketName(members), t0};
  // The exchange runs the local stage. A local error (staging a CUDA tensor,
  // a non-finite value) is announced in its collective part, so that every
  // rank takes the same verdict for the bucket.
  std::unique_ptr<BucketExchange> ex;
  for (const ExchangeEntry& e : exchangeRegistry())
    if (e.exchange == exchange && (e.claims == nullptr || e.claims(ctx_, b))) {
      ex = e.start(ctx_, b);
      break;
    }
  if (!ex) {  // a registry without the plan's exchange: the same on every rank
    const Status st(Code::kInternal, std::string("no exchange registered for ") + plan::exchangeName(exchange));
    for (auto& m : members) complete_(m, st);
    return;
  }
  ex->setPlanBucket(plan_bucket, schedule_.step(), schedule_.declared());
  if (!ex->queued()) {  // it ran to its end (dense; phased ones without nonblocking collectives)
    complete(*ex);
    return;
  }
  pushInFlight(std::move(ex));
}

void SparsePipeline::publishStats() {
  if (publish_) publish_(stats_);
}

void SparsePipeline::complete(BucketExchange& ex) {
  const Status st = ex.finish();
  if (st.ok() && ex.planBucket() >= 0)
    cost_.online().bucketFinished(ex.planBucket(), ex.planStep(), ex.planDeclared(), Clock::now());
  // Before the handles complete: a caller woken by them reads statistics
  // that include this bucket, and the next step may enqueue these names.
  publishStats();
  for (auto& m : ex.members()) complete_(m, st);
  ex.release();
}

void SparsePipeline::pushInFlight(std::unique_ptr<BucketExchange> ex) {
  const size_t max_in_flight = ex->maxInFlight();
  inflight_.push_back(std::move(ex));
  stats_.in_flight_max = std::max<uint64_t>(stats_.in_flight_max, inflight_.size());
  while (inflight_.size() > max_in_flight) finishOldest();
  poll();
}

void SparsePipeline::finishOldest() {
  if (inflight_.front()->phased()) waitPhasedFront();
  std::unique_ptr<BucketExchange> ex = std::move(inflight_.front());
  inflight_.pop_front();
  complete(*ex);
}

void SparsePipeline::pumpInFlight() {
  if (in_pump_ || !ctx_.phasesInFlight()) return;
  in_pump_ = true;
  // A bucket's next phase starts only if it started for every earlier
  // bucket that needs it: the same order on every rank, per communicator.
  PhaseOrder order;
  for (auto& ex : inflight_) ex->progress(order);
  in_pump_ = false;
}

void SparsePipeline::waitPhasedFront() {
  auto pause = std::chrono::microseconds(5);
  while (true) {
    pumpInFlight();  // tests every phase's collective: MPI progresses them all
    if (inflight_.front()->ready()) return;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(100));
  }
}

void SparsePipeline::poll() {
  pumpInFlight();
  while (!inflight_.empty()) {
    if (!inflight_.front()->ready()) return;
    finishOldest();
  }
}

void SparsePipeline::drain() {
  while (!inflight_.empty()) finishOldest();
}

void SparsePipeline::failHeld(const Status& st) {
  // Exchanges still in flight after a fatal error are abandoned, not waited
  // for (a peer may be gone): each leaks what a collective may still write into.
  for (auto& ex : inflight_) {
    for (auto& m : ex->members()) complete_(m, st);
    ex->abandon();
  }
  inflight_.clear();
  schedule_.failHeld(st, complete_);
}

}  // namespace mgs
