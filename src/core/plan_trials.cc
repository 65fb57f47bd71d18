#include "core/plan_trials.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mgs {

std::vector<size_t> trialOrder(size_t candidates, int rounds) {
  std::vector<size_t> order;
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < candidates; ++i) order.push_back(r % 2 == 0 ? i : candidates - 1 - i);
  return order;
}

namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *hi - *lo;
}

}  // namespace

size_t chooseTrial(const std::vector<std::vector<double>>& samples, double margin, std::string* why) {
  size_t best = 0;
  double best_mean = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].empty()) continue;
    const double m = mean(samples[i]);
    if (best_mean == 0 || m < best_mean) {
      best = i;
      best_mean = m;
    }
  }
  std::string reason;
  if (samples.empty() || samples[0].empty()) {
    reason = "the first plan was not timed";
    best = 0;
  } else if (best != 0) {
    const double first = mean(samples[0]);
    const double gain = first - best_mean;
    // The spread between visits of the same plan is what the clock cannot
    // tell apart: a gain must exceed it, and the margin.
    const double noise = 0.5 * (spread(samples[0]) + spread(samples[best]));
    char buf[160];
    if (gain <= margin * first || gain <= noise) {
      std::snprintf(buf, sizeof buf, "gain %.1f ms is within the margin (%.1f ms) or the spread between visits (%.1f ms)",
                    gain * 1e3, margin * first * 1e3, noise * 1e3);
      best = 0;
    } else {
      std::snprintf(buf, sizeof buf, "gain %.1f ms over the first exceeds the margin (%.1f ms) and the spread (%.1f ms)",
                    gain * 1e3, margin * first * 1e3, noise * 1e3);
    }
    reason = buf;
  } else {
    reason = "the first plan is the fastest";
  }
  if (why) *why = reason;
  return best;
}

size_t chooseTrialByError(const std::vector<std::vector<double>>& samples, double margin, double z, std::string* why) {
  auto variance = [](const std::vector<double>& v) {
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return s / static_cast<double>(v.size() - 1);
  };
  size_t best = 0;
  double best_mean = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].size() < 2) continue;
    const double m = mean(samples[i]);
    if (best_mean == 0 || m < best_mean) {
      best = i;
      best_mean = m;
    }
  }
  std::string reason;
  if (samples.empty() || samples[0].size() < 2) {
    reason = "the first candidate was not timed twice";
    best = 0;
  } else if (best != 0) {
    const double first = mean(samples[0]);
    const double gain = first - best_mean;
    const double se = std::sqrt(variance(samples[0]) / static_cast<double>(samples[0].size()) +
                                variance(samples[best]) / static_cast<double>(samples[best].size()));
    char buf[200];
    if (gain <= margin * first || gain <= z * se) {
      std::snprintf(buf, sizeof buf, "gain %.1f ms is within the margin (%.1f ms) or %.3g standard errors (%.1f ms)",
                    gain * 1e3, margin * first * 1e3, z, z * se * 1e3);
      best = 0;
    } else {
      std::snprintf(buf, sizeof buf,
                    "gain %.1f ms over the first exceeds the margin (%.1f ms) and %.3g standard errors (%.1f ms)",
                    gain * 1e3, margin * first * 1e3, z, z * se * 1e3);
    }
    reason = buf;
  } else {
    reason = "the first candidate is the fastest";
  }
  if (why) *why = reason;
  return best;
}

}  // namespace mgs
