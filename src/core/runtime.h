// Runtime: the one object mgs_init creates (no mutable globals, so tests can
// run several ranks as threads in one process). It owns the request queue,
// the handle table and the coordinator thread.
//
// Threading contract: framework threads call the enqueue* functions and read
// handles; everything else -- the communicator, negotiation state, fusion
// buffers, the timeline -- belongs to the coordinator thread, which is the
// only thread that communicates. No exception escapes the coordinator loop: a
// failure becomes the status of the affected handles.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/communicator.h"
#include "common/params.h"
#include "core/calibration.h"
#include "core/device.h"
#include "core/handle_table.h"
#include "core/process_set_runner.h"
#include "core/process_sets.h"
#include "core/request_queue.h"
#include "core/residual_store.h"
#include "core/sparse_pipeline.h"
#include "core/sparse_progress.h"

namespace mgs {

class DeviceBackend;

// The checks every enqueued tensor passes (dtype, shape, size, data, device),
// naming the tensor and its role ("input"); and the signature of an op on it.
Status checkTensor(const std::string& name, const char* role, const TensorDesc& t);
Signature signatureOf(OpType type, const TensorDesc& t);

// Negotiation counters, published by the coordinator after every cycle.
// Only cycles with work pending count, so idle cycles between steps do not
// dilute the figures.
struct NegotiationStats {
  uint64_t cycles = 0;       // cycles with work pending
  uint64_t fast_cycles = 0;  // decided by the bit-vector allreduce alone
  uint64_t slow_cycles = 0;  // needed the gather to rank 0
  double seconds = 0;        // time spent negotiating in those cycles
  uint64_t ops_completed = 0;
  uint64_t bytes_reduced = 0;
  uint64_t cached_names = 0;  // names in the negotiation cache (bounded)
  uint64_t idle_cycles = 0;   // cycles with nothing pending on this rank (these wait longer)
  uint64_t cuda_nccl_ops = 0;    // collectives of CUDA tensors run on the device communicator (NCCL)
  uint64_t cuda_staged_ops = 0;  // ... staged through host memory for MPI
  uint64_t device_host_syncs = 0;  // times runtime code blocked the host on the GPU (process-wide)
  uint64_t set_sparse_buckets = 0;     // sparse buckets of process sets other than the global one
  uint64_t set_sparse_bytes_sent = 0;  // ... values + indices this rank sent for them
  // The global set's host allreduces (float sums of 64 KiB and more) since
  // init, by algorithm (Communicator::allreduceCounts), and the bound between
  // them (0: the communicator has no choice).
  uint64_t allreduce_ring_ops = 0, allreduce_library_ops = 0, allreduce_ring_min_bytes = 0;
  uint64_t fusion_threshold_bytes = 0;  // the dense fusion threshold in use (core/fusion_trials.h)
  uint64_t fusion_trials = 0;           // thresholds run on trial
  uint64_t fusion_max_tensor_bytes = 0;  // host tensors below this may be fused (calibration.h)
};

class Runtime {
 public:
  using CommFactory = std::function<Status(std::unique_ptr<Communicator>*)>;

  // Start the coordinator; returns once the communicator is up (or failed).
  // `device`: a device communicator in place of NCCL (tests with several
  // ranks on one GPU; DeviceBackend::init).
  static Status start(const Config& config, CommFactory factory, std::unique_ptr<Runtime>* out,
                      device::DeviceCommFactory device = nullptr);
  ~Runtime();  // shuts down if still running

  // Why a rank stops; other ranks' messages name it.
  enum class StopReason : int32_t { kShutdownCalled = 1, kProcessExit = 2 };

  // Negotiated shutdown: every rank's coordinator stops in the same cycle;
  // pending operations complete with kShutdown. Idempotent.
  void shutdown(StopReason reason = StopReason::kShutdownCalled);
  bool running() const { return running_.load(); }
  // shutdown() was called on this rank (as opposed to a stop caused by
  // another rank or by a fatal error).
  bool stoppedLocally() const { return shutdown_requested_.load(); }
  // Once stopped: kShutdown with why (which rank stopped the job and its
  // reason, or the fatal error), for calls that need a running coordinator.
  Status stoppedStatus();
  // Non-empty if this runtime saw a fatal error or a stall abort: the ranks
  // may then be out of step, and a collective MPI_Finalize could hang.
  std::string exitHazard() const;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int localRank() const { return local_rank_; }
  int localSize() const { return local_size_; }
  const Config& config() const { return config_; }

  // `process_set`: the set the op runs in (0: every rank); a broadcast's
  // root is a world rank, which must be in the set.
  Status enqueueAllreduce(const std::string& name, const TensorDesc& in, const TensorDesc& out, int reduce_op,
                          double prescale, double postscale, uint32_t flags, uint64_t* handle,
                          int32_t process_set = 0);
  Status enqueueAllgather(const std::string& name, const TensorDesc& in, uint64_t* handle, int32_t process_set = 0);
  Status enqueueBroadcast(const std::string& name, const TensorDesc& t, int root, uint64_t* handle,
                          int32_t process_set = 0);
  // runtime_sets.cc: alltoall (splits: rows to each rank of the set; empty:
  // equal parts), reducescatter, process sets and join.
  Status enqueueAlltoall(const std::string& name, const TensorDesc& in, std::vector<int64_t> splits,
                         int32_t process_set, uint64_t* handle);
  Status enqueueReducescatter(const std::string& name, const TensorDesc& in, const TensorDesc& out, int reduce_op,
                              double prescale, double postscale, int32_t process_set, uint64_t* handle);
  // Blocking, collective over every rank: a new process set's id.
  Status addProcessSet(std::vector<int32_t> ranks, int32_t* id);
  Status removeProcessSet(int32_t id);
  // The set `id` (kInvalidArgument if there is none).
  Status processSet(int32_t id, ProcessSetInfo* out) const;
  // Blocking: this rank has no more data; serves the others' allreduces until
  // every rank joined. *last_rank: the last rank to join.
  Status join(int32_t* last_rank);
  // Blocking barrier across the ranks of a process set.
  Status barrier(int32_t process_set = 0);

  HandleTable& handles() { return handles_; }
  NegotiationStats negotiationStats() const;
  SparseStats sparseStats() const;
  ResidualStore& residuals() { return residuals_; }
  // The sparse pipeline's step counter and agreed leaders (checkpoints).
  SparseProgress& sparseProgress() { return progress_; }

 private:
  explicit Runtime(const Config& config) : config_(config) {}
  Status enqueue(Request req, uint64_t* handle);
  // Enqueue, wait and release: the blocking operations.
  Status runBlocking(Request req, int64_t* value = nullptr);
  void loop(std::unique_ptr<Communicator> comm, std::unique_ptr<SparsePipeline> sparse,
            std::unique_ptr<DeviceBackend> backend);
  // Every operation ends here (coordinator thread): counters, then the handle.
  void completeRequest(Request& req, Status st);

  const Config config_;
  device::DeviceCommFactory device_factory_;  // tests: in place of NCCL (start())
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  RequestQueue queue_;
  HandleTable handles_;
  std::atomic<bool> running_{false};
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<int32_t> stop_reason_{0};
  // Set by the coordinator when it completes an op: they colour the reason
  // this rank gives when it stops (see stopWord()).
  std::atomic<bool> saw_stall_{false}, saw_error_{false};
  int32_t stopWord() const;
  mutable std::mutex hazard_mu_;
  std::string exit_hazard_;
  void addHazard(const std::string& why);
  std::mutex count_mu_;
  std::map<int32_t, uint64_t> barrier_counts_;  // per process set
  std::atomic<uint64_t> process_set_count_{0}, join_count_{0};
  ProcessSetTable sets_;
  // Written by the coordinator, read by anyone.
  std::atomic<uint64_t> idle_cycles_{0}, cycles_{0}, fast_cycles_{0}, slow_cycles_{0}, ops_completed_{0}, bytes_reduced_{0};
  std::atomic<uint64_t> cached_names_{0};
  std::atomic<uint64_t> cuda_nccl_ops_{0}, cuda_staged_ops_{0};
  std::atomic<uint64_t> fusion_threshold_{0}, fusion_trials_{0}, fusion_max_tensor_bytes_{0};
  std::atomic<uint64_t> ring_ops_{0}, library_ops_{0}, ring_min_bytes_{0};
  ProcessSetRunner::SetTotals set_totals_;
  std::atomic<double> negotiation_s_{0};
  RingChoice ring_choice_;  // what init measured (chooseAllreduceAlgorithm), logged by rank 0
  mutable std::mutex stats_mu_;
  SparseStats sparse_stats_;
  ResidualStore residuals_;
  SparseProgress progress_;
  std::thread thread_;
};

}  // namespace mgs
