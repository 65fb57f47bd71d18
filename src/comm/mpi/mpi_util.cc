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
  const auto spin_until = Clock::now() + std::chrono::microseconds(policy.spin_us);
  auto pause = std::chrono::microseconds(5);
  const auto cap = std::chrono::microseconds(std::max(policy.max_sleep_us, 1));
  while (true) {
    int flag = 0;
    MGS_MPI_CHECK(MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE));
    if (flag) return Status::OK();
    if (Clock::now() < spin_until) continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, cap);
  }
}

}  // namespace mgs
