// Whether the cores this rank runs on are busy with training (issue 11):
// on a host with more busy threads than cores (4 ranks on 2 cores, or a GPU
// node whose cores feed data loaders), every second of the coordinator's CPU
// comes out of somebody's backward, and the merge planner has to count it
// (plan::CostModel::host_steal). Read from the coordinator thread's scheduler
// statistics (the time it ran and the time it waited, runnable, for a core)
// and from its process's CPU clock (whether the training itself computes on
// the CPU: a replay whose "compute" sleeps leaves backward untouched however
// the coordinators crowd the cores).
#pragma once

namespace mgs {

struct ThreadSchedule {
  double cpu_s = 0;          // the calling thread's time on a core
  double wait_s = 0;         // ... and runnable but waiting for one
  double process_cpu_s = 0;  // every thread of the process, on a core
  double wall_s = 0;         // a monotonic clock
  bool ok = false;           // false where the kernel does not provide them
};

// The calling thread's totals (Linux /proc/thread-self/schedstat) and its
// process's.
ThreadSchedule readThreadSchedule();

// The calling thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID): what a
// call costs the cores, whoever else runs; -1 where the clock fails.
double threadCpuSeconds();

// From two readings of the coordinator thread: about how many seconds of
// backward each second of its CPU costs, or 0 when its work leaves backward
// alone. That is when it hardly waited (under kBusyWait of a second per
// second of CPU: it finds a core when it wants one), or when the rest of its
// process hardly computed (under kTrainingCpu of a core: backward is not on
// this CPU). Otherwise every core it may use is busy with training, and with
// the `local_ranks` ranks of the node alike, the node's step grows by their
// combined coordinator CPU over its `cores`: local_ranks / cores a second,
// and at least 1 (the rank's own training thread waits for it). 0 when
// either reading failed or the thread ran less than kMinCpu between them.
double hostSteal(const ThreadSchedule& before, const ThreadSchedule& after, int local_ranks, int cores);

// From the same two readings: how many seconds of wall time a second of the
// coordinator's CPU took, (CPU + run-queue wait) / CPU, when the thread
// waited for a core at least kBusyWait of a second per second of CPU; 1
// otherwise, or when a reading failed or it ran less than kMinCpu. Whoever
// else holds the cores (the node's other ranks, other jobs, the kernel), a
// bucket's fixed CPU (plan::CostModel::group_host_s, measured on the
// thread's CPU clock) ends this much later than its CPU time.
double hostDilation(const ThreadSchedule& before, const ThreadSchedule& after);

constexpr double kBusyWait = 0.25;
constexpr double kTrainingCpu = 0.25;
constexpr double kMinCpu = 1e-3;

}  // namespace mgs
