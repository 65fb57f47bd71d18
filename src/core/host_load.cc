#include "core/host_load.h"

#include <algorithm>
#include <ctime>
#include <fstream>

namespace mgs {
namespace {

double clockSeconds(clockid_t id) {
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

double threadCpuSeconds() { return clockSeconds(CLOCK_THREAD_CPUTIME_ID); }

ThreadSchedule readThreadSchedule() {
  ThreadSchedule s;
  std::ifstream f("/proc/thread-self/schedstat");
  unsigned long long run_ns = 0, wait_ns = 0;
  if (f >> run_ns >> wait_ns) {
    s.cpu_s = static_cast<double>(run_ns) * 1e-9;
    s.wait_s = static_cast<double>(wait_ns) * 1e-9;
    s.process_cpu_s = clockSeconds(CLOCK_PROCESS_CPUTIME_ID);
    s.wall_s = clockSeconds(CLOCK_MONOTONIC);
    s.ok = s.process_cpu_s >= 0 && s.wall_s >= 0;
  }
  return s;
}

double hostSteal(const ThreadSchedule& before, const ThreadSchedule& after, int local_ranks, int cores) {
  if (!before.ok || !after.ok) return 0.0;
  const double cpu = after.cpu_s - before.cpu_s, wait = after.wait_s - before.wait_s;
  const double wall = after.wall_s - before.wall_s;
  const double others = (after.process_cpu_s - before.process_cpu_s) - cpu;
  if (!(cpu >= kMinCpu) || !(wait >= 0) || !(wall > 0)) return 0.0;
  if (wait < kBusyWait * cpu) return 0.0;
  if (others < kTrainingCpu * wall) return 0.0;
  return std::max(1.0, static_cast<double>(std::max(local_ranks, 1)) / std::max(cores, 1));
}

double hostDilation(const ThreadSchedule& before, const ThreadSchedule& after) {
  if (!before.ok || !after.ok) return 1.0;
  const double cpu = after.cpu_s - before.cpu_s, wait = after.wait_s - before.wait_s;
  if (!(cpu >= kMinCpu) || !(wait >= kBusyWait * cpu)) return 1.0;
  return (cpu + wait) / cpu;
}

}  // namespace mgs
