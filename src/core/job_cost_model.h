// The job's cost model (plan::CostModel) and its one owner. The runtime
// prices buckets in two places, and both ask this object: the exchange
// each bucket takes (exchangeFor) and the re-planner (replanner.h, model()).
// The model is assembled here only, in this order:
//
//   resolve()     MGS_CALIBRATION: 'off' (the papers' 10 GbE preset nearest
//                 P), 'auto' (measured at init, core/calibration.h) or a file
//                 (rank 0 reads it and broadcasts the text; measured when the
//                 file does not exist)
//   useNodes()    the job's ranks per node (SparsePipeline groups the ranks
//                 between the two calls) and, with a hierarchy, the node and
//                 leader terms, measured unless the file had them. Then, once,
//                 rank 0 saves the calibration file if this job measured
//                 anything that belongs in it.
//   agreeDeviceSelection()  the selection term timed where CUDA buckets
//                 are selected (the first such bucket, MGS_CALIBRATION=auto)
//   agreeDeviceCollectives()  the collective terms timed on the device
//                 communicator (NCCL) where CUDA buckets run as device
//                 buckets (the same bucket)
//   pin()         a saved plan's model (MGS_PLAN_FILE) replaces the measured
//                 one; nothing measured changes it afterwards
//   refit()       the online re-planning's correction (online_cost.h)
//
// What belongs to the job, not to the cluster (the density MGS_DENSITY, the
// exchanges MGS_EXCHANGE and MGS_DENSE_FALLBACK allow), is written into every
// model this object takes in one place (stamp), so the planner and the
// exchange choice price the same model.
//
// Every rank holds the same model: measurements are max-reduced before a
// fit, files are read by rank 0 and broadcast, refits depend only on reduced
// integer sums (online_cost.h). Each step that changes the model is a
// collective or a function of collective state, taken on every rank alike.
//
// Threading: owned by the sparse pipeline, used on the coordinator thread
// only.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "compress/selector.h"
#include "core/online_cost.h"
#include "plan/cost_model.h"

namespace mgs {

struct NodeGroups;  // core/bucket_exchange.h

class JobCostModel {
 public:
  // `config` must outlive this object.
  JobCostModel(Communicator& comm, const Config& config);
  JobCostModel(const JobCostModel&) = delete;
  JobCostModel& operator=(const JobCostModel&) = delete;

  // The model of MGS_CALIBRATION (collective). A file measured on another
  // number of ranks is used as it is, with a warning naming both counts.
  Status resolve(const compress::Selector& selector);
  // The job's nodes (collective with a hierarchy): see above. Always after
  // resolve(); the model is ready() once it returns OK.
  Status useNodes(const NodeGroups& nodes);
  bool ready() const { return ready_; }
  const plan::CostModel& model() const { return model_; }

  // The exchange of a sparse bucket of n elements selected at `density`
  // (MGS_DENSITY, or a warm-up step's): the allowed exchange the model
  // prices lowest (plan::CostModel::chooseExchange). The same on every rank.
  plan::Exchange exchangeFor(size_t n, double density) const;

  // Whether the next bucket of CUDA tensors is to time the selection on the
  // device (MGS_CALIBRATION=auto, once per job; every rank answers alike).
  bool wantsDeviceSelection() const { return !device_asked_ && ready_ && config_.calibration == "auto"; }
  // Collective, at that bucket: `own` and `seconds` are this rank's timing
  // of the selection at calibrationSelectionSizes(); a rank that could not
  // time it keeps every rank on calibration's figure. The slowest rank's
  // figure replaces the selection term, in the model and in the online
  // refit's base, unless a plan file pinned the model.
  void agreeDeviceSelection(const Status& own, const std::vector<double>& seconds);

  // Whether the next bucket of CUDA tensors, if it runs as a device bucket,
  // is to time the device communicator's collectives (MGS_CALIBRATION=auto,
  // once per job). Collective at that bucket: `own` and `seconds` are this
  // rank's measureCollectives at deviceCollectiveSizes(P); the slowest rank's
  // figures replace the allreduce, allgather and broadcast terms (in the
  // model and the online refit's base) unless a plan file pinned the model,
  // and from then on devicePriced(): the exchange choice of device buckets
  // follows the model. A rank that could not time them keeps every rank on
  // the MPI terms (and device buckets on the allgather).
  bool wantsDeviceCollectives() const { return !device_comm_asked_ && ready_ && config_.calibration == "auto"; }
  void skipDeviceCollectives() { device_comm_asked_ = true; }
  void agreeDeviceCollectives(const Status& own, const std::vector<double>& seconds);
  bool devicePriced() const { return device_priced_; }

  // A saved plan's model (MGS_PLAN_FILE) replaces this one; the job's ranks
  // per node stay. Collective state: every rank pins the same bytes.
  void pin(const plan::CostModel& saved);
  bool pinned() const { return pinned_; }

  // The online re-planning: exchanges and selections report into online();
  // refit() replaces the model by the base corrected by the window of
  // measurements and returns the model it replaced (for the log).
  OnlineCost& online() { return online_; }
  const OnlineCost& online() const { return online_; }
  plan::CostModel refit();

 private:
  // The job's fields, written into every model taken in.
  void stamp(plan::CostModel* m) const;
  // MGS_CALIBRATION=<file> (collective): parsed, or measured when missing.
  Status readFile(const compress::Selector& selector, plan::CostModel* m);

  Communicator& comm_;
  const Config& config_;
  plan::CostModel model_;
  OnlineCost online_;
  bool ready_ = false, pinned_ = false, device_asked_ = false;
  bool device_comm_asked_ = false, device_priced_ = false;
  // Rank 0 saves MGS_CALIBRATION=<file> once, in useNodes(): set when the
  // file was missing (measured here) or lacked the node terms.
  bool save_ = false;
};

}  // namespace mgs
