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

// The coordinator thread's CPU and run-queue wait between two readings;
// false when either reading failed or it ran less than kMinCpu.
bool threadDeltas(const ThreadSchedule& before, const ThreadSchedule& after, double* cpu, double* wait) {
  if (!before.ok || !after.ok) return false;
  *cpu = after.cpu_s - before.cpu_s;
  *wait = after.wait_s - before.wait_s;
  return *cpu >= kMinCpu;
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
  double cpu = 0, wait = 0;
  if (!threadDeltas(before, after, &cpu, &wait)) return 0.0;
  const double wall = after.wall_s - before.wall_s;
  const double others = (after.process_cpu_s - before.process_cpu_s) - cpu;
  if (!(wait >= 0) || !(wall > 0)) return 0.0;
  if (wait < kBusyWait * cpu) return 0.0;
  if (others < kTrainingCpu * wall) return 0.0;
  return std::max(1.0, static_cast<double>(std::max(local_ranks, 1)) / std::max(cores, 1));
}

double hostDilation(const ThreadSchedule& before, const ThreadSchedule& after) {
  double cpu = 0, wait = 0;
  if (!threadDeltas(before, after, &cpu, &wait) || !(wait >= kBusyWait * cpu)) return 1.0;
  return (cpu + wait) / cpu;
}

}  // namespace mgs
