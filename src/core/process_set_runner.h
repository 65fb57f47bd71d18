// Runs each negotiated cycle's ops where they belong: ops of the global set
// on the runtime's executor, ops of every other process set on that set's
// own communicator and executor, in ascending set order, then the process
// set changes (on every rank, over the world communicator). The order is the
// same on every rank, so a rank in several sets never waits in one set for a
// rank that waits for it in another.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/controller.h"
#include "core/executor.h"
#include "core/process_sets.h"
#include "core/timeline.h"

namespace mgs {

class ProcessSetRunner {
 public:
  ProcessSetRunner(Communicator& world, const Config& config, Timeline* timeline, Executor::Complete complete,
                   ProcessSetTable& table, Controller& controller)
      : world_(world),
        config_(config),
        timeline_(timeline),
        complete_(std::move(complete)),
        table_(table),
        controller_(controller) {}

  void run(std::vector<ReadyOp>& ready, Executor& global);
  // The executors' in-flight allreduces: completed when finished (poll),
  // waited for (drain, a negotiated shutdown), or failed (after a fatal error).
  void poll();
  void drain();
  void failInFlight(const Status& st);
  bool idle() const;

 private:
  Status add(Request& req);
  Status remove(Request& req);

  struct Set {
    std::unique_ptr<Communicator> comm;
    std::unique_ptr<Executor> exec;  // declared after comm: destroyed first
  };
  Communicator& world_;
  const Config& config_;
  Timeline* timeline_;
  Executor::Complete complete_;
  ProcessSetTable& table_;
  Controller& controller_;
  std::map<int32_t, Set> sets_;  // the sets this rank is in (not the global one)
};

}  // namespace mgs
