// Whether the cores this rank runs on are busy with training (issue 11):
// on a host with more busy threads than cores (4 ranks on 2 cores, or a GPU
// node whose cores feed data loaders), every second of the coordinator's CPU
// comes out of somebody's backward, and the merge planner has to count it
// (plan::CostModel::host_steal). Read from the calling thread's scheduler
// statistics: the time it ran and the time it waited, runnable, for a core.
#pragma once

namespace mgs {

struct ThreadSchedule {
  double cpu_s = 0;   // time on a core
  double wait_s = 0;  // time runnable but waiting for one
  bool ok = false;    // false where the kernel does not provide them
};

// The calling thread's totals (Linux /proc/thread-self/schedstat).
ThreadSchedule readThreadSchedule();

// From two readings of the coordinator thread: about how many seconds of
// backward each second of its CPU costs, or 0 when it hardly waited (under
// kBusyWait of a second per second of CPU: it finds a core when it wants
// one, and its work only delays the exchanges). When it did wait, every core
// it may use is busy, and with the `local_ranks` ranks of the node alike, the
// node's step grows by their combined coordinator CPU over its `cores`:
// local_ranks / cores a second, and at least 1 (the rank's own training
// thread waits for it). 0 when either reading failed or the thread ran less
// than kMinCpu between them.
double hostSteal(const ThreadSchedule& before, const ThreadSchedule& after, int local_ranks, int cores);

constexpr double kBusyWait = 0.25;
constexpr double kMinCpu = 1e-3;

}  // namespace mgs
