// Busy cores, as the merge planner sees them (core/host_load.h): the rule on
// two readings, and the readings of a real thread.
#include "core/host_load.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

namespace mgs {

TEST_CASE("host load: the steal estimate from two readings", "[host_load]") {
  // {thread cpu, thread wait, process cpu, wall}
  const ThreadSchedule a{10.0, 4.0, 100.0, 1000.0, true};
  // Over 2 s the coordinator ran 1 s; the rest of the process (training)
  // 0.8 s.
  // Waited 0.1 s: it finds a core when it wants one.
  CHECK(hostSteal(a, {11.0, 4.1, 101.8, 1002.0, true}, 4, 2) == 0.0);
  // Waited 1 s: busy cores. 4 ranks on 2 cores: 2 s of backward a second;
  // 2 ranks on 8 cores: still the rank's own training thread: 1.
  CHECK(hostSteal(a, {11.0, 5.0, 101.8, 1002.0, true}, 4, 2) == 2.0);
  CHECK(hostSteal(a, {11.0, 5.0, 101.8, 1002.0, true}, 2, 8) == 1.0);
  CHECK(hostSteal(a, {11.0, 5.0, 101.8, 1002.0, true}, 6, 4) == 1.5);
  // At the edges: a quarter of a second of wait per second of CPU, and the
  // rest of the process a quarter of a core.
  CHECK(hostSteal(a, {11.0, 4.0 + kBusyWait, 101.5, 1002.0, true}, 1, 1) == 1.0);
  // Busy cores but a process that hardly computes besides (a replay whose
  // compute sleeps): backward is not delayed.
  CHECK(hostSteal(a, {11.0, 5.0, 101.4, 1002.0, true}, 4, 2) == 0.0);
  // Nothing to judge by: a failed reading, too little CPU, a clock going back.
  CHECK(hostSteal(ThreadSchedule{}, {11.0, 5.0, 101.8, 1002.0, true}, 4, 2) == 0.0);
  CHECK(hostSteal(a, ThreadSchedule{}, 4, 2) == 0.0);
  CHECK(hostSteal(a, {10.0 + kMinCpu / 2, 5.0, 101.8, 1002.0, true}, 4, 2) == 0.0);
  CHECK(hostSteal(a, {11.0, 3.0, 101.8, 1002.0, true}, 4, 2) == 0.0);
  CHECK(hostSteal(a, {9.0, 5.0, 101.8, 1002.0, true}, 4, 2) == 0.0);
  CHECK(hostSteal(a, {11.0, 5.0, 101.8, 1000.0, true}, 4, 2) == 0.0);
  // Nonsense counts of ranks or cores count as one.
  CHECK(hostSteal(a, {11.0, 5.0, 101.8, 1002.0, true}, 0, 0) == 1.0);
}

TEST_CASE("host load: the coordinator's dilation from two readings", "[host_load]") {
  // {thread cpu, thread wait, process cpu, wall}
  const ThreadSchedule a{10.0, 4.0, 100.0, 1000.0, true};
  // Ran 1 s and waited 0.1 s for a core: finds one when it wants it.
  CHECK(hostDilation(a, {11.0, 4.1, 100.0, 1002.0, true}) == 1.0);
  // Waited 17 s for its 1 s (16 ranks' coordinators and the kernel on 2
  // cores): a second of its CPU takes 18. Whatever the rest of the process
  // did (a replay whose compute sleeps): the wait is the coordinator's own.
  CHECK(hostDilation(a, {11.0, 21.0, 100.0, 1020.0, true}) == Approx(18.0));
  CHECK(hostDilation(a, {11.0, 21.0, 150.0, 1020.0, true}) == Approx(18.0));
  // At the edge: a quarter of a second of wait per second of CPU.
  CHECK(hostDilation(a, {12.0, 4.0 + 2 * kBusyWait, 100.0, 1003.0, true}) == Approx(1.25));
  // Nothing to judge by: a failed reading, too little CPU, clocks going back.
  CHECK(hostDilation(ThreadSchedule{}, {11.0, 5.0, 100.0, 1002.0, true}) == 1.0);
  CHECK(hostDilation(a, ThreadSchedule{}) == 1.0);
  CHECK(hostDilation(a, {10.0 + kMinCpu / 2, 5.0, 100.0, 1002.0, true}) == 1.0);
  CHECK(hostDilation(a, {9.0, 5.0, 100.0, 1002.0, true}) == 1.0);
  CHECK(hostDilation(a, {11.0, 3.0, 100.0, 1002.0, true}) == 1.0);
}

TEST_CASE("host load: a thread's own readings count its CPU", "[host_load]") {
  const ThreadSchedule before = readThreadSchedule();
  const double clock_before = threadCpuSeconds();
#ifdef __linux__
  REQUIRE(before.ok);
#endif
  if (!before.ok) return;
  // Spin until this thread's CPU clock has run 30 ms (however long that
  // takes on a loaded machine), then sleep: the sleep is neither.
  REQUIRE(clock_before >= 0);
  const auto t0 = std::chrono::steady_clock::now();
  volatile double x = 0;
  while (threadCpuSeconds() - clock_before < 0.03 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    x = x + 1.0;
  const double clock_cpu = threadCpuSeconds() - clock_before;
  REQUIRE(clock_cpu >= 0.03);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const ThreadSchedule after = readThreadSchedule();
  REQUIRE(after.ok);
  // schedstat's run time agrees with the CPU clock (the two account a little
  // apart), and holds neither the sleep nor the wait for a core.
  const double cpu = after.cpu_s - before.cpu_s;
  CHECK(cpu > 0.02);
  CHECK(cpu < 0.075);
  CHECK(after.wait_s >= before.wait_s);
  // The process holds the thread (the two clocks account a little apart).
  CHECK(after.process_cpu_s - before.process_cpu_s >= cpu * 0.8);
  CHECK(after.wall_s - before.wall_s >= 0.08);
  // Another thread's readings are its own, not this one's.
  ThreadSchedule other;
  std::thread([&] { other = readThreadSchedule(); }).join();
  REQUIRE(other.ok);
  CHECK(other.cpu_s < after.cpu_s);
}

}  // namespace mgs
