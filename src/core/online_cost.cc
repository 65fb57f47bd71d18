#include "core/online_cost.h"

#include <algorithm>
#include <cmath>

namespace mgs {
namespace {

// Rounded and clamped into the wire's units, so that a rank's sums cannot
// overflow: x <= 2^24 units (4 GiB, 16 Gi elements), y <= 2^26 us (67 s), so
// x*y < 2^50 and a window of 2^12 calls on each of 2^1 .. 2^10 ranks is safe.
int64_t quantise(double v, double unit, double max_units) {
  const double u = std::clamp(v / unit, 0.0, max_units);
  return std::llround(u);
}
constexpr double kMaxX = 16777216.0, kMaxY = 67108864.0;

double seconds(OnlineCost::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A comm model is never negative when every breakpoint, evaluated on the
// segments on both sides of it, is >= 0 and the last slope is >= 0.
bool nonNegative(const std::vector<plan::CommModel::Segment>& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i].alpha_s + s[i].beta_s_per_byte * s[i].from_bytes < 0) return false;
    if (i + 1 < s.size() && s[i].alpha_s + s[i].beta_s_per_byte * s[i + 1].from_bytes < 0) return false;
  }
  return s.empty() || s.back().beta_s_per_byte >= 0;
}

}  // namespace

void OnlineCost::planned(double predicted_span_s, const std::vector<double>& predicted_ends_s,
                         const std::vector<double>& predicted_ready_s) {
  predicted_span_s_ = predicted_span_s;
  buckets_.assign(predicted_ends_s.size(), BucketFigures{});
  for (size_t i = 0; i < predicted_ends_s.size(); ++i) {
    buckets_[i].predicted_end_s = predicted_ends_s[i];
    if (i < predicted_ready_s.size()) buckets_[i].predicted_ready_s = predicted_ready_s[i];
  }
  bucket_end_.assign(buckets_.size(), Clock::time_point{});
  bucket_ready_.assign(buckets_.size(), Clock::time_point{});
  packed_bucket_end_.clear();
  window_.clear();
  steps_since_plan_ = 0;
  strikes_ = 0;
  good_ = 0;
  fixed_since_plan_ = false;
}

void OnlineCost::stepStarted(Clock::time_point first_enqueue, uint64_t step, Clock::time_point declared) {
  if (started_ || !enabled()) return;
  started_ = true;
  first_ = first_enqueue;
  declared_ = std::max(first_enqueue, declared);
  step_ = step;
}

void OnlineCost::bucketFinished(int index, uint64_t step, Clock::time_point ready, Clock::time_point end) {
  if (!enabled() || !started_ || step != step_ || index < 0 || static_cast<size_t>(index) >= bucket_end_.size()) return;
  bucket_end_[index] = std::max(bucket_end_[index], end);
  bucket_ready_[index] = std::max(bucket_ready_[index], ready);
}

void OnlineCost::add(Term t, double x, double y, double yhat) {
  if (!enabled()) return;
  double* f = &local_[2 + kTermFields * t];
  f[0] += 1;
  f[1] += x;
  f[2] += x * x;
  f[3] += y;
  f[4] += x * y;
  f[5] += yhat;
  f[6] += x * yhat;
}

void OnlineCost::exchanged(Term term, double bytes, Clock::time_point start, Clock::time_point end) {
  if (!enabled()) return;
  // Served one after the other: this call's time starts when the previous ended.
  const bool queued = start < last_end_;
  // A blocking allreduce starts only after the exchange before it ended:
  // one started within a coordinator cycle of that end ran back to back.
  const bool back_to_back =
      last_end_ != Clock::time_point{} &&
      start - last_end_ < std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt_.cycle_s));
  const auto from = std::max(start, last_end_);
  last_end_ = std::max(last_end_, end);
  step_end_ = std::max(step_end_, end);
  const double y = end > from ? seconds(end - from) : 0.0;
  const plan::CommModel& m = term == kAllreduce ? base_.allreduce : base_.allgather;
  // What the plan charges the call there (CostModel::overlapSeconds): an
  // allgather started behind one in flight, or an allreduce back to back,
  // ends its time less the overlap after the one before it, so that is what
  // its service time is compared with; otherwise the refit would take the
  // overlap off the start-up and the planner would take it off again.
  double yhat = m.seconds(bytes);
  if (term == kAllgather ? queued : back_to_back)
    yhat -= std::min(
        base_.overlapStartupSeconds(term == kAllreduce ? plan::Exchange::kDense : plan::Exchange::kAllgather), yhat);
  add(term, static_cast<double>(quantise(bytes, kByteUnit, kMaxX)), static_cast<double>(quantise(y, kTimeUnit, kMaxY)),
      static_cast<double>(quantise(yhat, kTimeUnit, kMaxY)));
}

void OnlineCost::selected(int64_t elements, double secs) {
  if (!enabled()) return;
  add(kSelection, static_cast<double>(quantise(static_cast<double>(elements), kElementUnit, kMaxX)),
      static_cast<double>(quantise(secs, kTimeUnit, kMaxY)),
      static_cast<double>(quantise(base_.sparsify.seconds(elements), kTimeUnit, kMaxY)));
}

void OnlineCost::pack(std::vector<int64_t>* wire) {
  wire->assign(kWireLength, 0);
  // Times from the step's first declaration (onReduced adds the lead back).
  packed_span_ = started_ && step_end_ > declared_;
  if (packed_span_) {
    (*wire)[0] = quantise(seconds(step_end_ - declared_), kTimeUnit, kMaxY);
    (*wire)[1] = 1;
    packed_first_ = first_;
    packed_declared_ = declared_;
    packed_end_ = step_end_;
  }
  // The per-call values are whole units, so these sums are whole numbers
  // (exact below 2^53; one step of one rank stays far below). The clamp only
  // keeps a pathological step from overflowing the cast.
  for (size_t i = 2; i < kWireLength; ++i) (*wire)[i] = static_cast<int64_t>(std::min(local_[i], 0x1p62));
  packed_bucket_end_ = bucket_end_;
  for (size_t b = 0; b < bucket_end_.size(); ++b) {
    const bool seen = started_ && bucket_end_[b] > declared_;
    wire->push_back(seen ? quantise(seconds(bucket_end_[b] - declared_), kTimeUnit, kMaxY) : 0);
    wire->push_back(
        seen && bucket_ready_[b] > declared_ ? quantise(seconds(bucket_ready_[b] - declared_), kTimeUnit, kMaxY) : 0);
    wire->push_back(seen ? 1 : 0);
    if (!seen) packed_bucket_end_[b] = Clock::time_point{};
  }
  // The lead of this rank's first gradient over the first declaration: in
  // the sum (with the span's rank count), and in its slot.
  const int64_t lead = packed_span_ ? quantise(seconds(declared_ - first_), kTimeUnit, kMaxY) : 0;
  wire->push_back(lead);
  if (ranks_ <= kMaxLeadRanks) {
    const size_t slots = wire->size();
    wire->resize(slots + static_cast<size_t>(ranks_), 0);
    if (packed_span_ && rank_ >= 0 && rank_ < ranks_) (*wire)[slots + static_cast<size_t>(rank_)] = lead + 1;
  }
  discardStep();
}

void OnlineCost::discardStep() {
  std::fill(local_.begin(), local_.end(), 0.0);
  started_ = false;
  step_end_ = Clock::time_point{};
  std::fill(bucket_end_.begin(), bucket_end_.end(), Clock::time_point{});
  std::fill(bucket_ready_.begin(), bucket_ready_.end(), Clock::time_point{});
}

OnlineCost::Decision OnlineCost::onReduced(const std::vector<int64_t>& sums) {
  Decision d;
  if (!enabled() || !havePrediction() || sums.size() != wireLength()) return d;
  // The first step under a new plan still holds exchanges of the old one.
  if (++steps_since_plan_ == 1) return d;
  const int64_t ranks = sums[1];
  // The lead added back: the smallest of the ranks' (the one that started
  // last) when every rank has its slot filled, else the mean.
  const size_t lead_at = kWireLength + kBucketFields * buckets_.size();
  double lead_units = ranks > 0 ? static_cast<double>(sums[lead_at]) / static_cast<double>(ranks) : 0.0;
  if (ranks_ <= kMaxLeadRanks) {
    int64_t least = -1;
    bool all = true;
    for (int r = 0; r < ranks_; ++r) {
      const int64_t v = sums[lead_at + 1 + static_cast<size_t>(r)];
      if (v <= 0) all = false;
      if (v > 0 && (least < 0 || v - 1 < least)) least = v - 1;
    }
    if (all && least >= 0) lead_units = static_cast<double>(least);
  }
  const double lead_s = lead_units * kTimeUnit;
  if (packed_span_)
    packed_first_ =
        packed_declared_ - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(lead_s));
  // Per bucket: counted only in a step where every rank finished it (a
  // bucket some rank ran after the boundary is not this step's).
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const int64_t* f = &sums[kWireLength + kBucketFields * b];
    if (ranks <= 0 || f[2] != ranks) continue;
    const double end = static_cast<double>(f[0]) / static_cast<double>(ranks) * kTimeUnit + lead_s;
    const double ready = static_cast<double>(f[1]) / static_cast<double>(ranks) * kTimeUnit + lead_s;
    buckets_[b].last_measured_end_s = end;
    buckets_[b].measured_end_sum_s += end;
    buckets_[b].last_measured_ready_s = ready;
    buckets_[b].measured_ready_sum_s += ready;
    ++buckets_[b].checks;
  }
  window_.emplace_back(sums.begin(), sums.begin() + kWireLength);
  if (window_.size() > static_cast<size_t>(std::max(1, opt_.window))) window_.erase(window_.begin());
  if (sums[1] <= 0) return d;
  d.checked = true;
  d.measured_s = static_cast<double>(sums[0]) / static_cast<double>(sums[1]) * kTimeUnit + lead_s;
  d.predicted_s = predicted_span_s_;
  if (std::fabs(d.measured_s - d.predicted_s) > opt_.tolerance * d.predicted_s) {
    ++strikes_;
    good_ = 0;
  } else {
    strikes_ = 0;
    // Held for as many steps as it takes to condemn a plan: this plan works,
    // so the cool-down goes back to its base (one lucky step is not enough).
    if (++good_ >= opt_.strikes) {
      fixed_since_plan_ = true;
      failures_ = 0;
    }
  }
  d.steps_off = strikes_;
  const int cooldown = opt_.cooldown << std::min(failures_, 4);
  if (strikes_ >= opt_.strikes && steps_since_plan_ >= cooldown) {
    d.replan = true;
    // This plan never matched its prediction: the next one waits longer.
    if (!fixed_since_plan_) failures_ = std::min(failures_ + 1, 4);
  }
  return d;
}

plan::CommModel OnlineCost::correct(const plan::CommModel& m, const int64_t* t) {
  const double n = static_cast<double>(t[0]);
  if (n < 1 || m.segments().empty()) return m;
  const double mx = t[1] / n, mr = (static_cast<double>(t[3]) - t[5]) / n;
  const double var = t[2] / n - mx * mx;
  const double cov = (static_cast<double>(t[4]) - t[6]) / n - mx * mr;
  auto shifted = [&](double a_units, double b_units, plan::CommModel* out) {
    const double da = a_units * kTimeUnit, db = b_units * kTimeUnit / kByteUnit;
    std::vector<plan::CommModel::Segment> s = m.segments();
    for (auto& g : s) {
      g.alpha_s += da;
      g.beta_s_per_byte += db;
    }
    return nonNegative(s) && plan::CommModel::fromSegments(s, out).ok();
  };
  plan::CommModel out;
  // A slope only when the sizes spread (coefficient of variation >= 0.3):
  // otherwise the line is noise through one cluster of points.
  if (n >= 3 && mx > 0 && var > 0.09 * mx * mx) {
    const double b = cov / var;
    if (shifted(mr - b * mx, b, &out)) return out;
  }
  if (shifted(mr, 0, &out)) return out;
  // Faster than the model at every size by more than its startup: scale.
  const double factor = t[5] > 0 ? static_cast<double>(t[3]) / static_cast<double>(t[5]) : 1.0;
  std::vector<plan::CommModel::Segment> s = m.segments();
  for (auto& g : s) {
    g.alpha_s *= factor;
    g.beta_s_per_byte *= factor;
  }
  if (plan::CommModel::fromSegments(s, &out).ok()) return out;
  return m;
}

plan::CostModel OnlineCost::refit() const {
  std::vector<int64_t> s(kWireLength, 0);
  for (const auto& w : window_)
    for (size_t i = 0; i < kWireLength; ++i) s[i] += w[i];
  plan::CostModel m = base_;
  m.allgather = correct(base_.allgather, &s[2 + kTermFields * kAllgather]);
  m.allreduce = correct(base_.allreduce, &s[2 + kTermFields * kAllreduce]);
  const int64_t* sel = &s[2 + kTermFields * kSelection];
  if (sel[0] > 0 && sel[5] > 0 && sel[3] > 0)
    m.sparsify.c_s = base_.sparsify.c_s * static_cast<double>(sel[3]) / static_cast<double>(sel[5]);
  return m;
}

}  // namespace mgs
