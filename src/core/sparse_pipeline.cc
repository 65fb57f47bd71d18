#include "core/sparse_pipeline.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "common/check.h"
#include "common/logging.h"
#include "common/threads.h"
#include "core/calibration.h"
#include "core/cpu_local_stage.h"
#include "core/device.h"
#include "core/routed_local_stage.h"
#include "plan/cost_model_io.h"

namespace mgs {
namespace {

// Extreme but valid settings must not overflow inside the pipeline:
// MGS_WARMUP_STEPS = INT64_MAX (W + 1) and a tiny MGS_CYCLE_TIME_MS (cycles
// per second cast to int). Neither clamp changes what any job can observe:
// no job reaches 2^63 steps, and a cycle never lasts under a microsecond.
Config clamped(Config c) {
  c.warmup_steps = std::min<int64_t>(c.warmup_steps, INT64_MAX - 1);
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
      online_(OnlineCost::Options{config.replan_tolerance}),
      schedule_(
          comm, config_, online_, stats_,
          [this]() -> const compress::Selector& { return selectorFor(config_.density); },
          [this](std::vector<Request>& members) { runBucket(members); }),
      exchange_(comm, progress),
      scatter_(comm.size()) {
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
}

void SparsePipeline::setResidentFactory(ResidentFactory factory) {
  local_.reset();  // gives the residual store's External slot back first
  local_ = std::make_unique<RoutedLocalStage>(local_options_, std::make_unique<CpuLocalStage>(local_options_),
                                              std::move(factory));
}

Status SparsePipeline::setupAsync() {
  // Collective (every rank has the same backend). The owner must call
  // pumpInFlight() from every blocking wait of this rank (negotiation, a dense
  // allreduce, the oldest allgather: Communicator::setWaitHook), so that a
  // rank blocked in a collective is never the one holding back a phase
  // another rank waits for.
  if (!comm_.asyncCollectives()) return Status::OK();
  MGS_RETURN_IF_ERROR(comm_.duplicate(&values_comm_));
  MGS_RETURN_IF_ERROR(comm_.duplicate(&names_comm_));
  return Status::OK();
}

Status SparsePipeline::create(Communicator& comm, const Config& config, ResidualStore& residuals, Complete complete,
                              std::unique_ptr<SparsePipeline>* out, SparseProgress* progress) {
  std::unique_ptr<SparsePipeline> p(new SparsePipeline(comm, config, residuals, std::move(complete), progress));
  MGS_RETURN_IF_ERROR(p->init());
  if (p->config_.compressor != "none") {
    MGS_RETURN_IF_ERROR(p->setupAsync());
    plan::CostModel cost;
    MGS_RETURN_IF_ERROR(resolveCostModel(comm, config, p->selectorFor(p->config_.density), &cost));
    MGS_RETURN_IF_ERROR(p->setupNodes());
    // The hierarchical exchange is a candidate only with the job's nodes.
    cost.ranks_per_node = p->hierarchy_ ? p->ranks_per_node_ : 1;
    // The same branch on every rank (the model is identical everywhere).
    if (p->hierarchy_ && config.calibration != "off" && cost.node.segments().empty()) {
      MGS_RETURN_IF_ERROR(p->measureNodes(&cost));
      // A calibration file gets the node terms too (mgs-plan, later jobs).
      if (config.calibration != "auto" && comm.rank() == 0) {
        std::ofstream f(config.calibration);
        f << plan::costModelToJson(cost);
        if (!f) MGS_LOG_WARN("could not save the node terms to the calibration {}", config.calibration);
      }
    }
    p->schedule_.setCostModel(cost);
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
  device_selection_asked_ = true;
  const std::vector<size_t>& sizes = calibrationSelectionSizes();
  LocalJob job;
  job.members = &members;
  job.n = n;
  job.selector = &selectorFor(config_.density);
  std::vector<double> mine;
  const Status own = local_->timeResidentSelection(job, sizes, &mine);
  std::vector<double> t(sizes.size() + 1, 0.0);
  if (own.ok() && mine.size() == sizes.size())
    std::copy(mine.begin(), mine.end(), t.begin());
  else
    t.back() = 1.0;  // this rank selects elsewhere: every rank keeps calibration's figure
  const Status st = comm_.allreduce(t.data(), t.size(), MGS_FLOAT64, CommOp::kMax);
  if (!st.ok()) {
    MGS_LOG_WARN("rank {}: timing the selection on the device failed ({}); keeping the calibrated CPU figure",
                 comm_.rank(), st.message());
    return;
  }
  if (t.back() > 0) {
    if (!own.ok())
      MGS_LOG_DEBUG("rank {}: selection of CUDA buckets not timed on the device ({})", comm_.rank(), own.message());
    return;
  }
  std::vector<plan::Sample> samples;
  for (size_t i = 0; i < sizes.size(); ++i) samples.emplace_back(static_cast<double>(sizes[i]), t[i]);
  plan::SparsifyModel m;
  if (!plan::SparsifyModel::fit(plan::SparsifyModel::Kind::kLinear, samples, &m).ok()) return;
  if (comm_.rank() == 0)
    MGS_LOG_INFO(
        "selection of CUDA buckets timed on the device: {:.3g} ns per element (calibration's CPU figure {:.3g}); "
        "the exchange choice and the merge plan use it",
        m.c_s * 1e9, schedule_.cost().sparsify.c_s * 1e9);
  schedule_.setSelectionModel(m);
}

plan::Exchange SparsePipeline::chooseExchange(std::vector<Request>& members, size_t n, double density) {
  const int P = comm_.size();
  // on_cuda is negotiated: every rank takes the same branch.
  const bool cuda_bucket =
      std::all_of(members.begin(), members.end(), [](const Request& m) { return m.sig.on_cuda; });
  if (cuda_bucket && config_.exchange == "auto" && P > 1) {
    // A bucket of CUDA tensors that can run as a device bucket (NCCL, every
    // rank with a device stage: deviceBucket agrees on that once) takes the
    // allgather, the exchange with a device path: the agreed and
    // hierarchical exchanges would stage the gradients through host memory
    // and select them on the CPU, whatever the MPI-calibrated cost model
    // says (it prices host collectives, not NCCL). Dense only where the 1/P
    // rule says sparse cannot pay (then through host memory too).
    LocalJob probe;
    probe.members = &members;
    probe.n = n;
    // Without device buckets (no NCCL), a resident stage on every rank
    // still selects on the GPU, and only the compact blocks cross to the
    // host; only the allgather has that path too.
    if (deviceBucket(members, probe) || residentEverywhere(members, n)) {
      if (config_.dense_fallback && density * P >= 1.0) return plan::Exchange::kDense;
      return plan::Exchange::kAllgather;
    }
  }
  if (cuda_bucket && !cuda_exchange_warned_ && device_comm_ && P > 1 &&
      (config_.exchange == "agreed" || config_.exchange == "hierarchical")) {
    cuda_exchange_warned_ = true;
    MGS_LOG_WARN(
        "rank {}: MGS_EXCHANGE={} has no device path: sparse buckets of CUDA tensors are staged through host memory "
        "and selected on the CPU (MGS_EXCHANGE=auto or allgather keeps them on the GPU)",
        comm_.rank(), config_.exchange);
  }
  // The cost model's choice, or the plan file's (MGS_PLAN_FILE).
  return schedule_.exchangeFor(members, n, density);
}

void SparsePipeline::runBucket(std::vector<Request>& members) {
  if (members.empty()) return;
  const auto t0 = Clock::now();
  size_t n = 0;
  for (auto& m : members) n += m.input.numel();
  if (!device_selection_asked_ && config_.calibration == "auto" && schedule_.haveCost() &&
      std::all_of(members.begin(), members.end(), [](const Request& m) { return m.sig.on_cuda; }))
    calibrateDeviceSelection(members, n);
  const double density = schedule_.currentDensity();
  const int P = comm_.size();
  const std::string name = bucketName(members);
  // Allgather, agreed or dense: the same choice on every rank.
  const plan::Exchange exchange = chooseExchange(members, n, density);
  const bool dense = exchange == plan::Exchange::kDense, agreed = exchange == plan::Exchange::kAgreed;
  const bool hier = exchange == plan::Exchange::kHierarchical;
  // The agreed exchange's leader (the same on every rank); only it selects.
  const int leader = agreed ? exchange_.agreedLeader(name) : 0;
  const bool select_here = !agreed || comm_.rank() == leader;

  // The local stage. A local error (staging a CUDA tensor, a non-finite
  // value) is announced in the collective part, so that every rank takes the
  // same verdict for the bucket.
  LocalJob job;
  job.members = &members;
  job.n = n;
  size_t cap = 1;
  std::vector<char> block;
  std::vector<float> vals;  // the agreed exchange's values, or the hierarchical one's node sum
  if (dense) {
    job.dense_acc = scatter_.denseBuffer(n + P);  // + one verdict slot per rank (exchangeDense)
  } else if (hier) {
    // Every rank's acc goes whole into its node's sum; the leader selects
    // from that sum afterwards (sparse_hierarchical.cc).
    vals = takeVals(n + kHierFlags);
    job.dense_acc = vals.data();
  } else {
    // cap depends only on n and the density, so every rank sends blocks of
    // the same size, whatever its local verdict or role.
    const compress::Selector& sel = selectorFor(density);
    cap = std::max<size_t>(sel.maxCount(n), 1);
    block = exchange_.takeBuffer(agreed ? block::indexBytes(cap) : block::allgatherBytes(cap));
    if (agreed) vals = takeVals(cap + kAgreedFlags);
    job.select = select_here;
    job.selector = &sel;
    job.cap = cap;
    job.block = select_here ? block.data() : nullptr;  // agreed non-leaders receive the leader's block
    job.index_block = agreed;
    job.agreed_values = agreed ? vals.data() : nullptr;
    job.zero_inputs = agreed;  // its scatter writes every output element
    job.step = schedule_.step();
    job.name = name.c_str();
  }
  // Device buckets exist for the allgather exchange only; the agreed and
  // hierarchical exchanges of CUDA buckets run on the local stage's route.
  if (!dense && !agreed && !hier && deviceBucket(members, job)) {
    exchange_.giveBuffer(std::move(block));  // the block lives on the device
    startDevice(members, n, cap, compress::kForDensity(n, density), job);
    return;
  }
  LocalOutcome out;
  local_->run(job, &out);
  if (timeline_) {
    const std::string path_arg = std::string("{\"path\":\"") + bucketPathName(pathOf(members, out)) + "\"}";
    for (auto& m : members) timeline_->span(m.name, "FUSE", t0, out.fuse_end, path_arg);
    if (out.selected)
      for (auto& m : members)
        timeline_->span(m.name, "SELECT", out.select_begin, out.select_end,
                        "{\"count\":" + std::to_string(out.reported) + ",\"k\":" + std::to_string(out.k) + "}");
  }
  if (out.selected)
    online_.selected(static_cast<int64_t>(n), std::chrono::duration<double>(out.select_end - out.select_begin).count());

  // The collective part: every rank runs it for this bucket.
  if (hier) {
    startHierarchical(members, n, density, out, std::move(vals));
    return;
  }
  if (dense) {
    bool sent = false;
    Status st = exchangeDense(members, n, job.dense_acc, out.status, out.bad_member, &sent);
    if (sent) local_->zeroResidual(members);  // everything was delivered, on every rank
    publishStats();
    for (auto& m : members) complete_(m, st);
    return;
  }
  const size_t k = compress::kForDensity(n, density);
  if (agreed) {
    startAgreed(members, n, cap, leader, k, out, std::move(block), std::move(vals));
    return;
  }
  startSparse(members, n, cap, k, out, std::move(block));
}

BucketPath SparsePipeline::pathOf(const std::vector<Request>& members, const LocalOutcome& out) {
  if (out.resident) return BucketPath::kResident;
  for (const auto& m : members)
    if (m.sig.on_cuda) return BucketPath::kStaged;
  return BucketPath::kHost;
}

void SparsePipeline::publishStats() {
  if (publish_) publish_(stats_);
}

void SparsePipeline::poll() {
  pumpInFlight();
  while (!inflight_.empty()) {
    InFlight& f = inflight_.front();
    const bool ready = f.agreed() || f.hier() ? f.phasesDone() : (f.device ? deviceReady(f) : exchange_.ready(f.ex));
    if (!ready) return;
    finishOldest();
  }
}

void SparsePipeline::drain() {
  while (!inflight_.empty()) finishOldest();
}

void SparsePipeline::failHeld(const Status& st) {
  // Exchanges still in flight after a fatal error are abandoned, not waited
  // for (a peer may be gone): their requests and buffers are left to MPI.
  for (auto& f : inflight_) {
    for (auto& m : f.members) complete_(m, st);
    BlockExchange::abandon(f.ex);
    if (f.agreed()) {  // leaked like the allgather's: a collective may still write into them
      (void)f.ag.op.release();
      new std::vector<char>(std::move(f.ag.block));
      new std::vector<float>(std::move(f.ag.vals));
      new std::vector<uint64_t>(std::move(f.ag.codes));
    }
    if (f.hier()) {
      (void)f.hr.op.release();
      new std::vector<float>(std::move(f.hr.acc));
      new std::vector<uint64_t>(std::move(f.hr.codes));
    }
    // A device bucket's work may still be running on the GPU: its buffers
    // (slab, blocks) are leaked, never given back to the pool.
    if (f.dev) (void)f.dev.release();
  }
  inflight_.clear();
  schedule_.failHeld(st, complete_);
}

}  // namespace mgs
