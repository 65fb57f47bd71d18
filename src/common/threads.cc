#include "common/threads.h"

#include <algorithm>
#include <thread>

#ifdef __linux__
#include <sched.h>
#endif

namespace mgs {

int availableCores() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(CPU_COUNT(&set), 1);
#endif
  return std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

int threadBudgetFor(int64_t requested, int cores, int localSize) {
  if (requested > 0) return static_cast<int>(std::min<int64_t>(requested, 1024));
  const int share = std::max(cores, 1) / std::max(localSize, 1);
  return std::clamp(share, 1, kMaxAutoThreads);
}

int threadBudget(int64_t requested, int localSize) { return threadBudgetFor(requested, availableCores(), localSize); }

int threadsFor(size_t n, int budget) {
  const size_t useful = std::max<size_t>(n / kMinElementsPerThread, 1);
  return static_cast<int>(std::min<size_t>(useful, static_cast<size_t>(std::max(budget, 1))));
}

}  // namespace mgs
