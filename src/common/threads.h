// The runtime's CPU thread budget. A rank's coordinator shares its node with
// the training itself (forward/backward, data loaders) and with the other
// local ranks; an OpenMP team larger than the cores left to it makes every
// parallel region wait for threads the scheduler has given to training (a
// 4,096-element selection took 15.9 ms, in scheduler quanta, on a host whose
// cores were all busy). So the budget is the cores this process may run on
// (its affinity mask, which mpirun's binding narrows) shared among the ranks
// on the node, and a buffer too small to gain from threads runs on one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mgs {

// CPUs in this process's affinity mask (at least 1).
int availableCores();

// MGS_THREADS resolved: `requested` > 0 is taken as is; 0 (auto) gives
// clamp(availableCores() / localSize, 1, kMaxAutoThreads).
constexpr int kMaxAutoThreads = 8;
int threadBudget(int64_t requested, int localSize);
// The pure rule behind threadBudget, for tests.
int threadBudgetFor(int64_t requested, int cores, int localSize);

// Threads worth using on a pass over n elements with `budget` threads: one
// per kMinElementsPerThread, at least 1, at most budget.
constexpr size_t kMinElementsPerThread = size_t{1} << 18;
int threadsFor(size_t n, int budget);

}  // namespace mgs
