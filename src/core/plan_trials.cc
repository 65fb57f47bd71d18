#include "core/plan_trials.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace mgs {

bool replanWorthTrial(double running_s, double replan_s, double margin) {
  if (!(std::isfinite(running_s) && std::isfinite(replan_s)) || running_s <= 0 || replan_s <= 0) return false;
  return replan_s < (1 - margin) * running_s;
}

std::vector<size_t> trialOrder(size_t candidates, int rounds) {
  std::vector<size_t> order;
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < candidates; ++i) order.push_back(r % 2 == 0 ? i : candidates - 1 - i);
  return order;
}

void TrialVisits::start(size_t candidates, int rounds, bool skip_first, bool timed, Clock::time_point now) {
  order_ = trialOrder(candidates, rounds);
  visit_ = 0;
  visit_steps_ = 0;
  skip_first_ = skip_first;
  timed_ = timed;
  first_run_ = true;
  samples_.assign(candidates, {});
  started_.assign(candidates, 0);
  started_count_ = 0;
  if (order_.empty()) return;
  started_[order_[0]] = 1;
  started_count_ = 1;
  last_ = now;
}

TrialVisits::Step TrialVisits::boundary(Clock::time_point now) {
  if (!active() || visit_ >= order_.size()) return Step::kDone;
  if (timed_ && !(skip_first_ && visit_steps_ == 0))
    samples_[order_[visit_]].push_back(std::chrono::duration<double>(now - last_).count());
  last_ = now;
  if (++visit_steps_ < kTrialVisitSteps) return Step::kOn;
  visit_steps_ = 0;
  const size_t was = order_[visit_];
  if (++visit_ >= order_.size()) return Step::kDone;
  const size_t next = order_[visit_];
  if (next == was) return Step::kOn;  // at a round's turn the same candidate runs on
  first_run_ = !started_[next];
  if (first_run_) {
    started_[next] = 1;
    ++started_count_;
  }
  return Step::kSwitched;
}

void TrialVisits::clear() {
  order_.clear();
  samples_.clear();
  started_.clear();
  visit_ = 0;
  visit_steps_ = 0;
}

namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// The candidate with the shortest mean among those with at least
// `min_samples` samples (0, with *best_mean 0, if none has).
size_t fastestMean(const std::vector<std::vector<double>>& samples, size_t min_samples, double* best_mean) {
  size_t best = 0;
  *best_mean = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].size() < min_samples) continue;
    const double m = mean(samples[i]);
    if (*best_mean == 0 || m < *best_mean) {
      best = i;
      *best_mean = m;
    }
  }
  return best;
}

// The candidate with the shortest mean step among those with at least
// `min_samples` samples replaces the first if its gain exceeds the margin
// and noise(first's samples, its samples); `first_name` and `noise_name`
// name the first and the noise in the log line. `*undecided` (may be null):
// that candidate where its gain exceeds the margin but not the noise, else 0.
template <typename Noise>
size_t choose(const std::vector<std::vector<double>>& samples, size_t min_samples, double margin,
              const char* first_name, const char* noise_name, Noise noise, std::string* why, size_t* undecided) {
  double best_mean = 0;
  size_t best = fastestMean(samples, min_samples, &best_mean);
  if (undecided) *undecided = 0;
  std::string reason;
  if (samples.empty() || samples[0].size() < min_samples) {
    reason = std::string(first_name) + " was not timed";
    best = 0;
  } else if (best != 0) {
    const double first = mean(samples[0]);
    const double gain = first - best_mean;
    const double n = noise(samples[0], samples[best]);
    char buf[200];
    if (gain <= margin * first || gain <= n) {
      std::snprintf(buf, sizeof buf, "gain %.1f ms is within the margin (%.1f ms) or %s (%.1f ms)", gain * 1e3,
                    margin * first * 1e3, noise_name, n * 1e3);
      if (undecided && gain > margin * first) *undecided = best;
      best = 0;
    } else {
      std::snprintf(buf, sizeof buf, "gain %.1f ms over the first exceeds the margin (%.1f ms) and %s (%.1f ms)",
                    gain * 1e3, margin * first * 1e3, noise_name, n * 1e3);
    }
    reason = buf;
  } else {
    reason = std::string(first_name) + " is the fastest";
  }
  if (why) *why = reason;
  return best;
}

}  // namespace

Status broadcastTrialChoice(Communicator& comm, size_t candidates, size_t* choice) {
  std::string text = comm.rank() == 0 ? std::to_string(*choice) : std::string();
  Status st = comm.broadcastString(&text, 0);
  *choice = 0;
  if (!st.ok()) return st;
  char* end = nullptr;
  const unsigned long v = std::strtoul(text.c_str(), &end, 10);
  if (!end || *end != '\0' || text.empty() || v >= candidates)
    return Status(Code::kInternal, "corrupt trial choice from rank 0: '" + text + "'");
  *choice = v;
  return Status::OK();
}

size_t chooseTrial(const std::vector<std::vector<double>>& samples, double margin, std::string* why, size_t* run_off) {
  // What the clock cannot tell apart: the standard error of the difference
  // of two means, from the scatter of every candidate's visits about its own
  // mean (pooled: the candidates run alike, and two visits each say little
  // on their own). Unlike the range of each candidate's visits, it narrows
  // as visits are added. Without two visits of any candidate it is 0 and
  // the margin alone decides.
  double ss = 0;
  size_t df = 0;
  for (const auto& v : samples) {
    if (v.size() < 2) continue;
    const double m = mean(v);
    for (double x : v) ss += (x - m) * (x - m);
    df += v.size() - 1;
  }
  const double sd = df > 0 ? std::sqrt(ss / static_cast<double>(df)) : 0.0;
  return choose(
      samples, 1, margin, "the first plan", "the standard error of the difference",
      [sd](const std::vector<double>& a, const std::vector<double>& b) {
        return sd * std::sqrt(1.0 / static_cast<double>(a.size()) + 1.0 / static_cast<double>(b.size()));
      },
      why, run_off);
}

size_t chooseFastest(const std::vector<std::vector<double>>& samples, std::string* why) {
  constexpr size_t kMinSamples = 2;
  double best_mean = 0;
  size_t best = fastestMean(samples, kMinSamples, &best_mean);
  char buf[160];
  if (samples.empty() || samples[0].size() < kMinSamples) {
    best = 0;
    std::snprintf(buf, sizeof buf, "the first candidate was not timed");
  } else if (best == 0) {
    std::snprintf(buf, sizeof buf, "the first candidate is the fastest (mean %.1f ms)", mean(samples[0]) * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "the fastest mean step, %.1f ms against %.1f ms for the first", best_mean * 1e3,
                  mean(samples[0]) * 1e3);
  }
  if (why) *why = buf;
  return best;
}

}  // namespace mgs
