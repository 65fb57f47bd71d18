// One measurement row of mgs-bench-compress and its JSON / table output.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace mgs::bench {

struct Row {
  std::string selector, device, dist;
  size_t n = 0, k = 0, count = 0;
  double ms = 0, copyMs = 0, baselineMs = 0;
  int passes = 0, syncs = 0;
  bool inplace = false;  // CPU: SelectArgs::x == nullptr, the residual already holds acc
  std::string baseline;
  std::string launches;  // GPU rows: "one-launch" (the default) or "per-pass" (the shapes that ran on an H100)
};

inline void print(const Row& r, bool json) {
  const double err = r.k ? std::fabs(double(r.count) - double(r.k)) / double(r.k) : 0;
  const double gbps = r.ms > 0 ? r.n * 4.0 / (r.ms * 1e6) : 0;
  if (json) {
    std::printf(
        "{\"selector\":\"%s\",\"device\":\"%s\",\"dist\":\"%s\",\"n\":%zu,\"k\":%zu,\"count\":%zu,"
        "\"count_err\":%.4f,\"median_ms\":%.4f,\"passes\":%d,\"host_syncs\":%d,\"gbps\":%.3f,"
        "\"copy_ms\":%.4f,\"copy_ratio\":%.3f,\"baseline\":\"%s\",\"baseline_ms\":%.4f,"
        "\"speedup\":%.2f,\"inplace\":%s%s%s%s}\n",
        r.selector.c_str(), r.device.c_str(), r.dist.c_str(), r.n, r.k, r.count, err, r.ms, r.passes, r.syncs, gbps,
        r.copyMs, r.ms / r.copyMs, r.baseline.c_str(), r.baselineMs, r.baselineMs / r.ms, r.inplace ? "true" : "false",
        r.launches.empty() ? "" : ",\"launches\":\"", r.launches.c_str(), r.launches.empty() ? "" : "\"");
  } else {
    std::printf("%-9s %-4s%s %-7s %9zu %7zu %7zu %6.3f %9.3f %3d %7.2f %8.3f %6.2f %9.3f %7.2f\n", r.selector.c_str(),
                r.device.c_str(), r.inplace ? "*" : " ", r.dist.c_str(), r.n, r.k, r.count, err, r.ms, r.passes, gbps,
                r.copyMs, r.ms / r.copyMs, r.baselineMs, r.baselineMs / r.ms);
  }
  std::fflush(stdout);
}

}  // namespace mgs::bench
