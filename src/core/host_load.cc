#include "core/host_load.h"

#include <algorithm>
#include <fstream>

namespace mgs {

ThreadSchedule readThreadSchedule() {
  ThreadSchedule s;
  std::ifstream f("/proc/thread-self/schedstat");
  unsigned long long run_ns = 0, wait_ns = 0;
  if (f >> run_ns >> wait_ns) {
    s.cpu_s = static_cast<double>(run_ns) * 1e-9;
    s.wait_s = static_cast<double>(wait_ns) * 1e-9;
    s.ok = true;
  }
  return s;
}

double hostSteal(const ThreadSchedule& before, const ThreadSchedule& after, int local_ranks, int cores) {
  if (!before.ok || !after.ok) return 0.0;
  const double cpu = after.cpu_s - before.cpu_s, wait = after.wait_s - before.wait_s;
  if (!(cpu >= kMinCpu) || !(wait >= 0)) return 0.0;
  if (wait < kBusyWait * cpu) return 0.0;
  return std::max(1.0, static_cast<double>(std::max(local_ranks, 1)) / std::max(cores, 1));
}

}  // namespace mgs
