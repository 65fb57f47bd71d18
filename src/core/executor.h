// Runs the operations negotiation declared ready, in the negotiated order,
// on the coordinator thread: fusion of small allreduces, dense allreduce,
// allgather with per-rank first dimensions, broadcast and barrier. Sparse
// buckets (merge plan + selectors) plug in here as another kind of group.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/controller.h"
#include "core/fusion.h"
#include "core/handle_table.h"
#include "core/device_backend.h"
#include "core/fusion_trials.h"
#include "core/sparse_pipeline.h"
#include "core/timeline.h"

namespace mgs {

class Executor {
 public:
  // `complete` is called exactly once per op, after its outputs are final.
  using Complete = std::function<void(Request& req, Status status)>;

  // `sparse` (may be null) takes the allreduces it declares eligible;
  // `backend` (may be null: MPI host staging) says whether CUDA tensors go
  // through NCCL.
  Executor(Communicator& comm, const Config& config, Timeline* timeline, SparsePipeline* sparse, Complete complete,
           DeviceBackend* backend = nullptr)
      : comm_(comm),
        config_(config),
        timeline_(timeline),
        sparse_(sparse),
        complete_(std::move(complete)),
        backend_(backend) {}

  // Collectives of CUDA tensors by the path they took: NCCL on the device,
  // or staged through host memory for MPI (the slow path). Read by other
  // threads (mgs_get_stats).
  void countCudaPaths(std::atomic<uint64_t>* nccl, std::atomic<uint64_t>* staged) {
    cuda_nccl_ = nccl;
    cuda_staged_ = staged;
  }

  // The job's dense fusion threshold is chosen by trials (fusion_trials.h):
  // the global set's executor only; `threshold` and `trials` are published
  // for mgs_get_stats (read by other threads).
  void tuneFusion(std::atomic<uint64_t>* threshold, std::atomic<uint64_t>* trials) {
    fusion_trials_ = std::make_unique<FusionTrials>(comm_, config_);
    fusion_threshold_out_ = threshold;
    fusion_trials_out_ = trials;
    threshold->store(static_cast<uint64_t>(config_.fusion_threshold_bytes), std::memory_order_relaxed);
  }

  // Host tensors below `bytes` may be fused (calibration.h); the same on
  // every rank of the executor's communicator.
  void setFusionMaxTensorBytes(size_t bytes) { fusion_max_tensor_bytes_ = bytes; }

  void run(std::vector<ReadyOp>& ops);
  // Completes the allreduces in flight that have finished (every cycle, and
  // from the communicator's wait hook while negotiating).
  void poll();
  // Waits for every allreduce in flight (a negotiated shutdown: every rank
  // started the same ones).
  void drain();
  // After a fatal error: completes them with `st`, without waiting (a peer
  // may be gone); their buffers are left to MPI.
  void failInFlight(const Status& st);
  bool idle() const { return inflight_.empty(); }

 private:
  std::atomic<uint64_t>*cuda_nccl_ = nullptr, *cuda_staged_ = nullptr;
  std::unique_ptr<FusionTrials> fusion_trials_;  // null: MGS_FUSION_THRESHOLD_BYTES as set
  std::atomic<uint64_t>*fusion_threshold_out_ = nullptr, *fusion_trials_out_ = nullptr;
  // The threshold this cycle's allreduces fuse with.
  int64_t fusionThreshold(const std::vector<Request*>& ok, const std::vector<size_t>& bytes);
  size_t fusion_max_tensor_bytes_ = kFusionMaxTensorBytes;
  int64_t cycle_threshold_ = 0;  // ... as fusionThreshold returned it this cycle
  bool cycle_trying_ = false;    // ... a candidate of the fusion trials
  // The timeline args of a host allreduce of `tensors` tensors, `bytes` in
  // all: what it fused and under which threshold ("" without a timeline).
  std::string allreduceArgs(size_t tensors, size_t bytes) const;
  // A host allreduce in flight: its requests (moved out of the cycle's ops),
  // the buffer being reduced, and how to write the outputs.
  struct InFlight {
    std::vector<Request> reqs;
    std::vector<char> wire;  // fused: the packed inputs; unfused: unused (reduced in the output)
    std::vector<size_t> counts;
    double factor = 1.0;
    std::unique_ptr<PendingCollective> op;
    Clock::time_point started;
    std::string args;  // the ALLREDUCE span's timeline args
  };
  // Starts `group` in flight if it qualifies; false: run it now.
  bool startInFlight(std::vector<Request*>& group, Status* st);
  void finish(InFlight& f, Status st);
  Status allreduceGroup(std::vector<Request*>& group);
  // A host allreduce group's buffer: the output itself for one tensor
  // (input copied, prescaled), else the inputs packed into `wire`; counts
  // and their total. unpackGroup writes the outputs from the sums, scaled.
  void* packGroup(const std::vector<Request*>& group, std::vector<char>* wire, std::vector<size_t>* counts,
                  size_t* total);
  void unpackGroup(const std::vector<void*>& outputs, DataType dtype, double factor, std::vector<char>& wire,
                   const std::vector<size_t>& counts);
  Status allreduceCuda(Request& req);
  // A fused group of CUDA allreduces without NCCL: each member copied to one
  // host buffer, one MPI allreduce, the sums copied back (never ran on a GPU).
  Status allreduceCudaGroup(std::vector<Request*>& group);
  // A fused group over NCCL: the members copied into one device fusion
  // buffer on the NCCL stream, one allreduce, copied back, one host wait for
  // the group (never ran on a GPU).
  Status allreduceNcclGroup(std::vector<Request*>& group, device::DeviceComm& dc);
  // NCCL on device pointers, on its stream (ran on an H100 at np 1): the stream
  // waits for the ready event, no host staging; one host wait at the end so
  // the output is final when the op completes.
  Status allreduceNccl(Request& req, device::DeviceComm& dc);
  Status broadcastNccl(Request& req, device::DeviceComm& dc);
  device::DeviceComm* ncclFor(const Request& req);
  // MGS_NONFINITE=error: agree, before the data moves, on whether any rank's
  // input holds NaN/Inf (one 8-byte allreduce; not run under 'propagate').
  // `inputs` are host copies of the group's inputs, in group order.
  Status agreeFinite(const std::vector<Request*>& group, const std::vector<const void*>& inputs);
  Status allgather(Request& req);
  Status broadcast(Request& req);
  // executor_collectives.cc: alltoall (splits exchanged, then one
  // alltoallv; the result held like an allgather's) and reducescatter (a
  // full allreduce of a copy, of which each rank keeps its rows).
  Status alltoall(Request& req);
  Status reducescatter(Request& req);
  // Agree that every rank can allocate `bytes` (and hold them on this host)
  // before a collective writes there; the same verdict on every rank.
  // `failed_before`: why this rank cannot take part at all (it still joins
  // the agreement, so that no rank waits alone).
  Status agreeAllocation(const Request& req, size_t bytes, HostBuffer* out, const char* what,
                         const std::string& failed_before = std::string());
  double finalFactor(const Signature& sig) const;
  void span(const std::vector<Request*>& group, const char* activity, Clock::time_point start,
            const std::string& args = "");

  Communicator& comm_;
  const Config& config_;
  Timeline* timeline_;
  SparsePipeline* sparse_;
  Complete complete_;
  DeviceBackend* backend_;
  std::vector<char> wire_;   // fusion buffer, reused across cycles
  std::vector<char> stage_;  // host staging for CUDA tensors
  std::shared_ptr<void> fusion_dev_;  // device fusion buffer of fused CUDA groups (NCCL)
  size_t fusion_dev_bytes_ = 0;
  int fusion_dev_device_ = -1;
  std::vector<char> scatter_out_;  // this rank's part of a reducescatter
  std::deque<InFlight> inflight_;
  std::vector<std::vector<char>> wire_pool_;
  bool in_poll_ = false;
};

}  // namespace mgs
