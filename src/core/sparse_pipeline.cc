#include "core/sparse_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "common/check.h"
#include "common/logging.h"
#include "common/threads.h"
#include "core/calibration.h"
#include "core/device.h"
#include "core/handle_table.h"
#include "core/wire.h"
#include "plan/plan.h"

namespace mgs {

std::string SparsePipeline::bucketName(const std::vector<Request>& m) {
  if (m.size() == 1) return m[0].name;
  return "bucket[" + m.front().name + " .. " + m.back().name + "] (" + std::to_string(m.size()) + " tensors)";
}

SparsePipeline::SparsePipeline(Communicator& comm, const Config& config, Timeline* timeline, ResidualStore& residuals,
                               Complete complete)
    : comm_(comm),
      config_(config),
      timeline_(timeline),
      residuals_(residuals),
      complete_(std::move(complete)),
      threads_(threadBudget(config.threads, comm.localSize())),
      online_(OnlineCost::Options{config.replan_tolerance}) {}

Status SparsePipeline::init() {
  if (config_.compressor == "none") return Status::OK();
  compress::SelectorOptions opts;
  opts.density = config_.density;
  opts.numThreads = threads_;
  std::unique_ptr<compress::Selector> sel;
  MGS_RETURN_IF_ERROR(compress::Selector::create(config_.compressor, opts, &sel));
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

double SparsePipeline::currentDensity() const {
  const double rho = config_.density;
  if (static_cast<int64_t>(step_) >= config_.warmup_steps) return rho;
  // DGC warm-up (algorithms.md 8.3): coeff = rho^(1/(W+1)), density = max(coeff^(step+1), rho).
  const double coeff = std::pow(rho, 1.0 / (config_.warmup_steps + 1));
  return std::max(std::pow(coeff, static_cast<double>(step_ + 1)), rho);
}

const compress::Selector& SparsePipeline::selectorFor(double density) {
  auto it = selectors_.find(density);
  if (it != selectors_.end()) return *it->second;
  compress::SelectorOptions opts;
  opts.density = density;
  opts.numThreads = threads_;
  std::unique_ptr<compress::Selector> sel;
  // The name was validated by init(); only the density differs.
  (void)compress::Selector::create(config_.compressor, opts, &sel);
  return *selectors_.emplace(density, std::move(sel)).first->second;
}

void SparsePipeline::submit(std::vector<Request> reqs) {
  for (auto& req : reqs) {
    if (seen_.count(req.name)) onStepBoundary();
    if (seen_.empty()) online_.stepStarted(req.enqueued);
    seen_.insert(req.name);
    elements_[req.name] = static_cast<int64_t>(req.input.numel());
    const uint64_t profiled = step_ - profile_start_;
    if (comm_.rank() == 0 && (!have_plan_ || online_.enabled()) &&
        profiled < static_cast<uint64_t>(config_.profile_steps)) {
      if (profile_.size() <= profiled) profile_.resize(profiled + 1);
      profile_[profiled].emplace_back(req.name, req.enqueued);
    }
    auto it = have_plan_ ? bucket_of_.find(req.name) : bucket_of_.end();
    if (it == bucket_of_.end()) {
      if (have_plan_) plan_stale_ = true;  // a tensor the plan does not know: re-plan
      std::vector<Request> single;
      single.push_back(std::move(req));
      runBucket(single);
      continue;
    }
    Bucket& b = buckets_[it->second];
    std::string name = req.name;
    b.ready.emplace(std::move(name), std::move(req));
    if (b.ready.size() == b.members.size()) {
      std::vector<Request> members;
      for (const auto& m : b.members) members.push_back(std::move(b.ready[m]));
      b.ready.clear();
      runBucket(members);
    }
  }
}

int SparsePipeline::idleFlushCycles() const {
  // Counted in cycles, not seconds: cycles are collective, so every rank
  // reaches the count in the same cycle. Cycles last at least MGS_CYCLE_TIME_MS.
  return std::max(100, static_cast<int>(1000.0 / config_.cycle_time_ms));
}

void SparsePipeline::endCycle(bool nothing_ready) {
  bool holding = false;
  for (const auto& b : buckets_) holding |= !b.ready.empty();
  idle_cycles_ = (holding && nothing_ready) ? idle_cycles_ + 1 : 0;
  if (idle_cycles_ >= idleFlushCycles()) {
    MGS_LOG_DEBUG("running partially filled buckets after {} idle cycles", idle_cycles_);
    flushPartialBuckets();
    idle_cycles_ = 0;
  }
}

void SparsePipeline::onStepBoundary() {
  // A bucket whose members did not all arrive this step runs with what it
  // has, so a tensor skipped by the framework cannot hold the others forever.
  flushPartialBuckets();
  ++step_;
  ++stats_.steps;
  seen_.clear();
  checkPlan();
  if (have_plan_ && plan_stale_) {
    MGS_LOG_INFO("new sparse tensors appeared: dropping the merge plan and profiling again");
    have_plan_ = plan_stale_ = false;
    bucket_of_.clear();
    buckets_.clear();
    stats_.plan_buckets = 0;
    profile_start_ = step_;
    profile_.clear();
  }
  if (!have_plan_ && step_ - profile_start_ >= static_cast<uint64_t>(config_.profile_steps)) {
    Status st = replan();
    if (!st.ok()) {
      MGS_LOG_ERROR("merge planning failed, staying layer-wise: {}", st.toString());
      profile_start_ = step_;  // try again after another profile
      profile_.clear();
    }
  }
}

void SparsePipeline::flushPartialBuckets() {
  for (auto& b : buckets_) {
    if (b.ready.empty()) continue;
    std::vector<Request> members;
    for (const auto& m : b.members) {
      auto it = b.ready.find(m);
      if (it != b.ready.end()) members.push_back(std::move(it->second));
    }
    b.ready.clear();
    runBucket(members);
  }
}

void SparsePipeline::checkPlan() {
  // Every rank reaches this boundary at the same point of the negotiated
  // order, and active-or-not depends only on collective state: so every rank
  // runs the allreduce below, or none does.
  if (!have_plan_ || !online_.enabled() || !online_.havePrediction() ||
      static_cast<int64_t>(step_) <= config_.warmup_steps) {
    online_.discardStep();
    return;
  }
  // Rank 0 keeps only the last MGS_PROFILE_STEPS steps of timings.
  while (step_ - profile_start_ >= static_cast<uint64_t>(config_.profile_steps)) {
    if (!profile_.empty()) profile_.erase(profile_.begin());
    ++profile_start_;
  }
  std::vector<int64_t> wire;
  online_.pack(&wire);
  const auto t0 = Clock::now();
  Status st = comm_.allreduce(wire.data(), wire.size(), MGS_INT64, CommOp::kSum);
  online_.reduceCost(std::chrono::duration<double>(Clock::now() - t0).count());
  if (!st.ok()) {
    MGS_LOG_ERROR("online plan check failed, keeping the plan: {}", st.toString());
    return;
  }
  const OnlineCost::Decision d = online_.onReduced(wire);
  if (!d.replan) return;
  const plan::CostModel old = cost_;
  cost_ = online_.refit();
  MGS_LOG_INFO(
      "re-planning at step {}: measured {:.3f} ms per step (mean over ranks) vs predicted {:.3f} ms ({:+.0f}%) "
      "for {} steps in a row (tolerance {:.0f}%); refitted allgather {:.3f} -> {:.3f} ms at 64 KiB, allreduce "
      "{:.3f} -> {:.3f} ms at 4 MiB, selection {:.3g} -> {:.3g} s/element (the check costs {:.0f} us per step)",
      step_, d.measured_s * 1e3, d.predicted_s * 1e3, 100.0 * (d.measured_s / d.predicted_s - 1.0), d.steps_off,
      config_.replan_tolerance * 100, old.allgather.seconds(65536.0) * 1e3, cost_.allgather.seconds(65536.0) * 1e3,
      old.allreduce.seconds(4194304.0) * 1e3, cost_.allreduce.seconds(4194304.0) * 1e3, old.sparsify.c_s,
      cost_.sparsify.c_s, online_.meanReduceSeconds() * 1e6);
  st = replan();
  if (!st.ok()) MGS_LOG_ERROR("online re-planning failed, keeping the plan: {}", st.toString());
}

Status SparsePipeline::replan() {
  if (!have_cost_) {
    MGS_RETURN_IF_ERROR(resolveCostModel(comm_, config_, selectorFor(config_.density), &cost_));
    have_cost_ = true;
  }
  if (!online_.haveBase()) online_.setBase(cost_);  // refits stay relative to the calibration
  std::string text;
  if (comm_.rank() == 0) {
    // Backward time of a tensor = gap since the previous gradient of the same
    // step, averaged over the profiled steps (the first one is warm-up when
    // there are more).
    const size_t first = profile_.size() > 1 ? 1 : 0;
    std::unordered_map<std::string, std::pair<double, int>> gaps;
    std::vector<std::string> order;
    for (size_t s = first; s < profile_.size(); ++s) {
      auto step = profile_[s];
      std::stable_sort(step.begin(), step.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      if (s + 1 == profile_.size())
        for (const auto& e : step) order.push_back(e.first);
      for (size_t i = 1; i < step.size(); ++i) {
        auto& g = gaps[step[i].first];
        g.first += std::chrono::duration<double>(step[i].second - step[i - 1].second).count();
        g.second += 1;
      }
    }
    plan::PlanInput in;
    in.cost = cost_;
    in.cost.density = config_.density;
    in.cost.exchanges = allowedExchanges();  // plan with what runBucket will choose
    in.sparse = true;
    // The coordinator selects while backward goes on, and a bucket's
    // allgather overlaps the next bucket's selection: the two-stage model.
    in.selection = plan::Selection::kSeparate;
    in.fusion_threshold_bytes = config_.fusion_threshold_bytes;
    double mean_gap = 0;
    int counted = 0;
    for (const auto& name : order) {
      auto it = gaps.find(name);
      const double gap = (it != gaps.end() && it->second.second) ? it->second.first / it->second.second : -1;
      in.layers.push_back({name, elements_[name], gap});
      if (gap >= 0) {
        mean_gap += gap;
        ++counted;
      }
    }
    for (auto& l : in.layers)
      if (l.backward_s < 0) l.backward_s = counted ? mean_gap / counted : 0;  // the first gradient's gap is unknown
    plan::Plan plan;
    Status st = plan::computePlan(config_.effectivePlanner(), in, &plan);
    if (!st.ok()) {
      MGS_LOG_ERROR("planner {}: {}", config_.effectivePlanner(), st.toString());
    } else {
      if (plan.front_capped)
        MGS_LOG_WARN("MGS planner hit its Pareto front cap ({}): the plan may not be optimal", plan.max_front);
      MGS_LOG_INFO("merge plan ({}): {} sparse tensors in {} buckets, predicted {:.3f} ms per step", plan.planner,
                   in.layers.size(), plan.groups.size(), plan.predicted_s * 1e3);
      WireWriter w;
      w.put(static_cast<uint32_t>(plan.groups.size()));
      for (const auto& g : plan.groups) {
        w.put(static_cast<uint32_t>(g.size()));
        for (int i : g) w.putString(in.layers[i].name);
      }
      // What the online check compares against: first gradient -> last
      // exchange end (the plan's time starts with backward, one gap earlier).
      w.put(plan.predicted_s - (in.layers.empty() ? 0.0 : in.layers.front().backward_s));
      text = std::move(w.str());
    }
  }
  MGS_RETURN_IF_ERROR(comm_.broadcastString(&text, 0));
  MGS_ENSURE(!text.empty(), kInternal, "rank 0 could not compute a merge plan (see its log)");
  WireReader r(text);
  uint32_t groups = 0;
  MGS_ENSURE(r.get(&groups), kInternal, "corrupt plan from rank 0");
  buckets_.assign(groups, Bucket{});
  bucket_of_.clear();
  for (uint32_t g = 0; g < groups; ++g) {
    uint32_t members = 0;
    MGS_ENSURE(r.get(&members), kInternal, "corrupt plan from rank 0");
    for (uint32_t i = 0; i < members; ++i) {
      std::string name;
      MGS_ENSURE(r.getString(&name), kInternal, "corrupt plan from rank 0");
      buckets_[g].members.push_back(name);
      bucket_of_[name] = g;
    }
  }
  double predicted_span = 0;
  MGS_ENSURE(r.get(&predicted_span), kInternal, "corrupt plan from rank 0");
  online_.planned(predicted_span);
  have_plan_ = true;
  stats_.plan_buckets = groups;
  ++stats_.plans;
  return Status::OK();
}

void SparsePipeline::runBucket(std::vector<Request>& members) {
  if (members.empty()) return;
  const auto t0 = Clock::now();
  size_t n = 0;
  for (auto& m : members) n += m.input.numel();
  const double density = currentDensity();
  const int P = comm_.size();
  const std::string name = bucketName(members);
  // Allgather, agreed or dense: the same choice on every rank (sparse_agreed.cc).
  const plan::Exchange exchange = pickExchange(n, density);
  const bool dense = exchange == plan::Exchange::kDense, agreed = exchange == plan::Exchange::kAgreed;
  // The agreed exchange's leader (agreedLeader: the same on every rank);
  // only it selects.
  const int leader = agreed ? agreedLeader(name) : 0;
  const bool select_here = !agreed || comm_.rank() == leader;

  // Local part, the same for both sparse exchanges: acc = gradient +
  // residual into a scratch slab (the residual itself changes only when the
  // bucket commits: sparse_commit.cc), then select in place in acc (the
  // agreed exchange: only its leader selects; the others give up their acc
  // at the leader's indices in runAgreed). A local error (staging a CUDA
  // tensor, a non-finite value) is announced in the collective part, so that
  // every rank takes the same verdict for the bucket.
  Status local;
  int bad_member = -1;  // the first member with non-finite values in acc
  size_t count = 0, cap = 1, non_finite = 0;
  std::vector<char> block;
  compress::SelectResult sel_res;
  std::shared_ptr<std::vector<float>> acc_slab;
  float* acc;
  if (dense) {
    out_.resize(n + P);  // + one verdict slot per rank (exchangeDense)
    acc = out_.data();
  } else {
    acc_slab = takeSlab(n);
    acc = acc_slab->data();
  }
  // One f32 host tensor going sparse: the selector reads it and the residual
  // directly (acc = x + r written to acc in its single pass), under the lock.
  const Request& m0 = members[0];
  const bool direct = !dense && select_here && members.size() == 1 && config_.error_feedback && !m0.input.onCuda() &&
                      m0.input.dtype == MGS_FLOAT32 && m0.sig.prescale == 1.0;
  std::unique_lock<std::mutex> lk;
  const float* r = nullptr;  // no residual without error feedback
  if (config_.error_feedback) {
    lk = residuals_.lock();
    std::vector<ResidualStore::Member> ms;
    for (auto& m : members) ms.push_back({&m.name, m.input.numel()});
    r = residuals_.contiguous(ms);
  }
  if (!direct) {
    local = fuseMembers(members, r, acc, &bad_member, &non_finite);
    if (lk.owns_lock()) lk.unlock();
  }
  if (local.ok() && non_finite > 0) local = nonFiniteStatus(members, bad_member, non_finite, n);
  if (timeline_)
    for (auto& m : members) timeline_->span(m.name, "FUSE", t0, Clock::now());

  if (!dense) {
    // cap depends only on n and the density, so every rank sends blocks of
    // the same size, whatever its local verdict or role.
    const compress::Selector& sel = selectorFor(density);
    cap = std::max<size_t>(sel.maxCount(n), 1);
    block = takeBuffer(agreed ? indexBlockBytes(cap) : blockBytes(cap));
    if (agreed) agreed_vals_.resize(cap + kAgreedFlags);
    if (local.ok() && select_here) {
      const auto ts = Clock::now();
      workspace_.resize(sel.workspaceBytes(n));
      compress::SelectArgs a;
      a.x = direct ? m0.input.data : nullptr;  // else in place: acc holds gradient + residual
      a.dtype = MGS_FLOAT32;
      a.residualIn = direct ? r : nullptr;
      a.residual = acc;
      a.n = n;
      // Allgather block [count | values[cap] | indices[cap] | seal]; agreed:
      // the values apart (they go into the allreduce), the index block
      // [count | indices[cap] | seal] is broadcast.
      a.outValues = agreed ? agreed_vals_.data() : reinterpret_cast<float*>(block.data() + 8);
      a.outIndices = reinterpret_cast<uint32_t*>(block.data() + 8 + (agreed ? 0 : 4 * cap));
      a.workspace = workspace_.data();
      a.workspaceBytes = workspace_.size();
      a.step = step_;
      a.name = name.c_str();
      local = sel.select(a, &sel_res);
      online_.selected(static_cast<int64_t>(n), std::chrono::duration<double>(Clock::now() - ts).count());
      if (local.ok()) {
        count = sel_res.count;
      } else if (direct && local.code() == Code::kNumeric) {
        bad_member = 0;
        local = nonFiniteStatus(members, 0, sel_res.nonFinite, n);
      } else {
        local = Status(local.code(), "rank " + std::to_string(comm_.rank()) + ": " + local.message());
      }
      if (timeline_)
        for (auto& m : members)
          timeline_->span(m.name, "SELECT", ts, Clock::now(),
                          "{\"count\":" + std::to_string(sel_res.count) + ",\"k\":" + std::to_string(sel_res.k) + "}");
    }
  }

  if (lk.owns_lock()) lk.unlock();

  // Collective part: every rank runs it for this bucket.
  if (dense) {
    bool sent = false;
    Status st = exchangeDense(members, n, local, bad_member, &sent);
    if (sent) zeroResidual(members);  // everything was delivered, on every rank
    publishStats();
    for (auto& m : members) complete_(m, st);
    return;
  }
  const size_t k = compress::kForDensity(n, density);
  if (agreed) {
    runAgreed(members, n, cap, leader, count, k, local, bad_member, std::move(block), std::move(acc_slab));
    return;
  }
  startSparse(members, n, cap, count, k, local, bad_member, std::move(block), std::move(acc_slab));
}

void SparsePipeline::publishStats() {
  if (publish_) publish_(stats_);
}

void SparsePipeline::failHeld(const Status& st) {
  // Exchanges still in flight after a fatal error are abandoned, not waited
  // for (a peer may be gone): their requests and buffers are left to MPI.
  for (auto& f : inflight_) {
    for (auto& m : f.members) complete_(m, st);
    (void)f.op.release();
    (void)new std::vector<char>(std::move(f.recv));
    (void)new std::vector<char>(std::move(f.send));
  }
  inflight_.clear();
  for (auto& b : buckets_) {
    for (auto& [name, req] : b.ready) complete_(req, st);
    b.ready.clear();
  }
}

}  // namespace mgs
