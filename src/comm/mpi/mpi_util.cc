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

namespace {
// Calls test() until it reports done: spins for policy.spin_us, then sleeps
// with a doubling pause capped at policy.max_sleep_us between tests.
template <typename Test>
Status pollUntil(const WaitPolicy& policy, Test test) {
  using Clock = std::chrono::steady_clock;
  const auto spin_until = Clock::now() + std::chrono::microseconds(policy.spin_us);
  auto pause = std::chrono::microseconds(5);
  const auto cap = std::chrono::microseconds(std::max(policy.max_sleep_us, 1));
  while (true) {
    bool done = false;
    MGS_RETURN_IF_ERROR(test(&done));
    if (done) return Status::OK();
    if (*policy.hook) (*policy.hook)();
    if (Clock::now() < spin_until) continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, cap);
  }
}
}  // namespace

Status mpiWaitAll(int n, MPI_Request* reqs, const WaitPolicy& policy) {
  return pollUntil(policy, [&](bool* done) -> Status {
    int flag = 0;
    MGS_MPI_CHECK(MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE));
    *done = flag != 0;
    return Status::OK();
  });
}

Status mpiWaitSome(int n, MPI_Request* reqs, int* done, int* indices, const WaitPolicy& policy) {
  return pollUntil(policy, [&](bool* finished) -> Status {
    MGS_MPI_CHECK(MPI_Testsome(n, reqs, done, indices, MPI_STATUSES_IGNORE));
    MGS_ENSURE(*done != MPI_UNDEFINED, kInternal, "mpiWaitSome: no active request");
    *finished = *done > 0;
    return Status::OK();
  });
}

}  // namespace mgs
