// The coordinator between steps: cycles with nothing pending are counted as
// idle (and only those), work after an idle spell completes correctly, and
// shutdown is prompt.
//   mpirun -np N mgs_mpi_idle_test
// Counts come from mgs_get_stats; bounds are loose (a loaded host only makes
// cycles slower, never more frequent).
#include <chrono>
#include <thread>
#include <vector>

#include "mpi_harness.h"

namespace {

using Clock = std::chrono::steady_clock;
using mpitest::cpuTensor;

mgs_stats_t stats() {
  mgs_stats_t s{};
  EXPECT_OK(mgs_get_stats(&s, sizeof s));
  return s;
}

// Allreduce (sum) of `n` floats, each rank contributing rank + 1; checks the result.
void sumAndCheck(const char* name, size_t n) {
  int rank = 0, size = 1;
  EXPECT_OK(mgs_rank(&rank));
  EXPECT_OK(mgs_size(&size));
  std::vector<float> x(n, static_cast<float>(rank + 1));
  std::vector<int64_t> shape{static_cast<int64_t>(n)};
  mgs_tensor_t t = cpuTensor(x.data(), MGS_FLOAT32, shape);
  mgs_handle_t h = 0;
  EXPECT_OK(mgs_allreduce_async(name, &t, &t, MGS_REDUCE_SUM, 1.0, 1.0, 0, &h));
  EXPECT_OK(mgs_wait(h));
  mgs_release(h);
  const float want = static_cast<float>(size * (size + 1) / 2);
  for (size_t i = 0; i < n; ++i) {
    EXPECT(x[i] == want, "%s[%zu] = %g, want %g", name, i, x[i], want);
    if (x[i] != want) break;
  }
}

}  // namespace

int main() {
  if (mgs_init() != MGS_SUCCESS) {
    std::fprintf(stderr, "mgs_init failed: %s\n", mgs_last_error());
    return 1;
  }
  EXPECT_OK(mgs_rank(&mpitest::g_rank));
  sumAndCheck("before", 1000);

  // One idle second at the default 1 ms cycle: idle cycles counted, none
  // counted as having work.
  const mgs_stats_t a = stats();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const mgs_stats_t b = stats();
  const uint64_t idle = b.idle_cycles - a.idle_cycles;
  const uint64_t busy = b.negotiation_cycles - a.negotiation_cycles;
  if (mpitest::g_rank == 0) std::printf("idle second: %llu idle cycles\n", (unsigned long long)idle);
  EXPECT(idle >= 1, "no idle cycle counted in 1 s (is the coordinator running?)");
  EXPECT(busy == 0, "%llu cycles with work pending while nothing was enqueued", (unsigned long long)busy);

  // Work after the idle spell: correct on every rank, and the ranks arrive at
  // different moments (rank r enqueues r * 30 ms late), which must not matter.
  int rank = 0;
  EXPECT_OK(mgs_rank(&rank));
  std::this_thread::sleep_for(std::chrono::milliseconds(30 * rank));
  sumAndCheck("after_idle", 100000);
  // A burst of tensors right after idling: all complete, none lost.
  for (int i = 0; i < 20; ++i) sumAndCheck(("burst." + std::to_string(i)).c_str(), 64);

  const int rc = mpitest::finish();
  const auto t0 = Clock::now();
  EXPECT_OK(mgs_shutdown());
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  // Shutdown after an idle spell wakes the coordinator; bound it loosely.
  if (s > 5.0) {
    std::fprintf(stderr, "[rank %d] mgs_shutdown took %.2f s\n", mpitest::g_rank, s);
    return 1;
  }
  return rc;
}
