// The runtime's own parallel loop (selection passes, scatter), in place of
// OpenMP. Why not OpenMP: on a rank whose node is busy training, libgomp's
// workers spin after every parallel region (GOMP_SPINCOUNT, read once when
// the framework loads libgomp, so mgs cannot turn it off), and the caller
// waits at each region's barrier for workers the scheduler has given to
// training. A ResNet-50 job on 4 ranks sharing 2 cores spent 0.34 CPU
// seconds per rank and step in the coordinator, most of it spinning in
// libgomp, taken straight out of forward/backward.
//
// parallelFor instead:
//   - hands tasks out one at a time (an atomic counter), so whoever runs
//     takes the next task;
//   - the caller works too, and never waits for a helper that has not
//     started: on a loaded host a loop degrades to one thread's speed, not to
//     one scheduler quantum per region;
//   - helpers sleep on a condition variable between loops (no spinning).
// Results must not depend on which thread ran a task: callers write per-task
// slots and combine them in task order (bitwise the same for any thread count).
#pragma once

#include <functional>

namespace mgs {

// Runs fn(0), ..., fn(count - 1), each once, on the calling thread and up to
// threads - 1 pool helpers; returns when all have returned. threads <= 1 or
// count <= 1 runs inline. An exception thrown by a task is rethrown here
// (the first one; the other tasks still run). Safe to call from several
// threads at once, and from inside a task (the nested loop runs inline).
void parallelFor(int count, int threads, const std::function<void(int)>& fn);

// Helper threads the pool has started so far (for tests and diagnostics).
int parallelPoolThreads();

}  // namespace mgs
