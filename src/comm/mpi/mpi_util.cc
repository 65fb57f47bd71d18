#include "comm/mpi/mpi_util.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace mgs {

std::string mpiErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

Status mpiWaitAll(int n, MPI_Request* reqs, const WaitPolicy& policy) {
  using Clock = std::chrono::steady_clock;
  using us = std::chrono::microseconds;
  const auto start = Clock::now();
  const auto spin_until = start + us(policy.spin_us);
  auto pause = us(5);
  const auto cap = us(std::max(policy.max_sleep_us, 1));
  const auto long_cap = std::max(cap, us(policy.max_long_sleep_us));
  while (true) {
    int flag = 0;
    MGS_MPI_CHECK(MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE));
    if (flag) return Status::OK();
    const auto now = Clock::now();
    if (now < spin_until) continue;
    std::this_thread::sleep_for(pause);
    const auto limit = std::clamp(std::chrono::duration_cast<us>(now - start) / 16, cap, long_cap);
    pause = std::min(pause * 2, limit);
  }
}

}  // namespace mgs
