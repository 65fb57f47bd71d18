// Runs each negotiated cycle's ops where they belong: ops of the global set
// on the runtime's executor, ops of every other process set on that set's
// own communicator and executor, in ascending set order, then the process
// set changes (on every rank, over the world communicator). The order is the
// same on every rank, so a rank in several sets never waits in one set for a
// rank that waits for it in another.
//
// Each set has its own sparse pipeline (for a sparse job): its own merge
// plan, profile and cost model over the set's communicator, and residuals
// under the set-qualified names (qualifiedName) in the runtime's one
// residual store. A set's pipeline never reads or writes MGS_PLAN_FILE or a
// calibration file: those describe the global set's job.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/controller.h"
#include "core/executor.h"
#include "core/process_sets.h"
#include "core/residual_store.h"
#include "core/sparse_pipeline.h"
#include "core/timeline.h"

namespace mgs {

class ProcessSetRunner {
 public:
  // Sparse buckets of every set but the global one, and the bytes this rank
  // sent for them (mgs_stats_t set_sparse_*), added to as they finish.
  struct SetTotals {
    std::atomic<uint64_t> buckets{0}, bytes_sent{0};
  };
  ProcessSetRunner(Communicator& world, const Config& config, Timeline* timeline, Executor::Complete complete,
                   ProcessSetTable& table, Controller& controller, ResidualStore& residuals, SetTotals& totals);

  void run(std::vector<ReadyOp>& ready, Executor& global);
  // The executors' in-flight allreduces: completed when finished (poll),
  // waited for (drain, a negotiated shutdown), or failed (after a fatal error).
  void poll();
  void drain();
  void failInFlight(const Status& st);
  bool idle() const;
  // Moves the sets' phased sparse buckets on (from every blocking wait of
  // this rank, as SparsePipeline::pumpInFlight for the global set).
  void pumpInFlight();

 private:
  Status add(Request& req);
  Status remove(Request& req);

  // Declared so that each is destroyed before what it uses: exec, sparse, comm.
  struct Set {
    std::unique_ptr<Communicator> comm;
    std::unique_ptr<SparsePipeline> sparse;  // null: a dense job
    std::unique_ptr<Executor> exec;
  };
  Status createSparse(int32_t id, Set& set);
  Communicator& world_;
  const Config& config_;
  Timeline* timeline_;
  Executor::Complete complete_;
  ProcessSetTable& table_;
  Controller& controller_;
  ResidualStore& residuals_;
  SetTotals& totals_;
  Config set_config_;  // config_ without the files that describe the global set's job
  std::map<int32_t, Set> sets_;  // the sets this rank is in (not the global one)
};

}  // namespace mgs
