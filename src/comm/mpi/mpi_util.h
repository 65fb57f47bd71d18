// Shared by the MPI backend's files: the check macro every MPI call goes
// through, and a wait that does not busy-poll.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "common/check.h"

namespace mgs {

std::string mpiErrorString(int code);

// How a rank waits for an MPI request. MPI's own blocking calls busy-poll,
// and a rank busy-polling on a core its training (or another local rank)
// needs slows the very rank it waits for: every wait here tests, spins for
// at most `spin_us` (0 where the node's cores are shared), then sleeps with
// a backoff capped at `max_sleep_us`, testing after each sleep (MPI only
// progresses inside its calls; the kernel keeps moving bytes meanwhile).
struct WaitPolicy {
  int spin_us = 0;
  int max_sleep_us = 100;
  // Called after each test that found the wait unfinished
  // (Communicator::setWaitHook); shared by a communicator and those made
  // from it, so setting it once reaches them all.
  std::shared_ptr<std::function<void()>> hook = std::make_shared<std::function<void()>>();
};

Status mpiWaitAll(int n, MPI_Request* reqs, const WaitPolicy& policy);
inline Status mpiWait(MPI_Request* req, const WaitPolicy& policy) { return mpiWaitAll(1, req, policy); }
// Waits (as mpiWaitAll does) until at least one of the active requests among
// `reqs` completes; their positions go to indices[0..*done). At least one
// request must be active.
Status mpiWaitSome(int n, MPI_Request* reqs, int* done, int* indices, const WaitPolicy& policy);

}  // namespace mgs

// Wrap one MPI call: a failure becomes a kCommunication Status naming the call.
#define MGS_MPI_CHECK(call)                                                                                \
  do {                                                                                                     \
    const int _mgs_rc = (call);                                                                            \
    if (_mgs_rc != MPI_SUCCESS)                                                                            \
      return ::mgs::Status(::mgs::Code::kCommunication, std::string(#call) +                               \
                                                            " failed: " + ::mgs::mpiErrorString(_mgs_rc) + \
                                                            ::mgs::detail::where(__FILE__, __LINE__));     \
  } while (0)
