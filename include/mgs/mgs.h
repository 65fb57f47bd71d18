/*
 * mgs: merged-gradient sparsification runtime -- the public C ABI.
 *
 * This header is the only interface a framework adapter needs. It is C99, every
 * function returns an mgs_status_t, handles are opaque integers, and no C++
 * exception ever crosses it.
 *
 * Threading contract
 *   - mgs_init / mgs_shutdown must not race with each other or with any other
 *     call; call them from one thread.
 *   - The application must not call MPI itself while mgs runs unless it
 *     initialised MPI with MPI_THREAD_MULTIPLE (see mgs_init).
 *   - Every other function is thread-safe: any framework thread may enqueue,
 *     poll, wait and release concurrently.
 *   - All communication (MPI) happens on one background "coordinator" thread per
 *     process; enqueue functions only queue a request and return at once.
 *
 * Errors
 *   - A function that fails returns a non-zero status and stores a message for
 *     the calling thread, readable with mgs_last_error().
 *   - An asynchronous operation that fails (for example a shape mismatch across
 *     ranks, detected during negotiation) completes its handle with an error
 *     status; mgs_wait() returns that status and mgs_handle_error() the message.
 *     Such errors are reported on every rank, naming the tensor and the ranks.
 *
 *   - Sizes are checked: a shape whose element or byte count overflows, or a
 *     result that cannot be held, fails with an error naming the tensor, never
 *     a wrapped count.
 *
 * Names
 *   Collective operations are matched across ranks by their name. A name must be
 *   unique among the operations in flight on one rank; ranks may enqueue the same
 *   names in any order. Names are at most MGS_MAX_NAME_BYTES bytes. Each rank
 *   remembers recently used names to negotiate them cheaply; that table is
 *   bounded (least recently used names are forgotten, identically on every
 *   rank), so a job may use ever-new names without growing.
 *
 * End of a job
 *   Ranks may finish and exit in any order and after any delay, with or without
 *   mgs_shutdown(): the first rank to stop stops every rank's coordinator, and
 *   operations that did not run yet fail with MGS_ERR_SHUTDOWN and a message
 *   naming that rank and why it stopped (finished normally, after an error,
 *   after a stall abort). What a rank already has stays readable after another
 *   rank stopped: mgs_rank/size/local_rank/local_size, the handles and results
 *   of completed operations, statistics and residuals.
 *   At process exit, mgs finalises MPI if it initialised it. A rank that saw a
 *   fatal communication error or a stall abort does not wait forever there: if
 *   the other ranks do not reach exit within 10 s, it aborts the job
 *   (MPI_Abort), so the job ends non-zero instead of hanging.
 */
#ifndef MGS_MGS_H_
#define MGS_MGS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MGS_API __attribute__((visibility("default")))
#else
#define MGS_API
#endif

/* ---------------------------------------------------------------- status -- */

/** Result of every mgs function and of every asynchronous operation. */
typedef enum mgs_status {
  MGS_SUCCESS = 0,
  MGS_ERR_INVALID_ARGUMENT = 1, /**< bad pointer, dtype, shape, name, handle... */
  MGS_ERR_NOT_INITIALIZED = 2,  /**< called before mgs_init() or after mgs_shutdown() */
  MGS_ERR_ALREADY_INITIALIZED = 3,
  MGS_ERR_DUPLICATE_NAME = 4, /**< the name is already in flight on this rank */
  MGS_ERR_MISMATCH = 5,       /**< ranks disagree on dtype, shape, op, root or device */
  MGS_ERR_CONFIG = 6,         /**< an MGS_* environment variable is unknown or invalid */
  MGS_ERR_COMMUNICATION = 7,  /**< an MPI / NCCL call failed */
  MGS_ERR_CUDA = 8,           /**< a CUDA call failed */
  MGS_ERR_TIMEOUT = 9,        /**< the stall inspector aborted the operation */
  MGS_ERR_SHUTDOWN = 10,      /**< the runtime shut down before the operation ran */
  MGS_ERR_UNSUPPORTED = 11,   /**< valid request this build cannot serve (e.g. no CUDA) */
  MGS_ERR_NUMERIC = 12,       /**< non-finite values where they are not allowed */
  MGS_ERR_INTERNAL = 13,
  MGS_ERR_IN_PROGRESS = 14 /**< the operation has not completed yet */
} mgs_status_t;

/** A static, human-readable name for a status ("MGS_ERR_MISMATCH: ..."). Never NULL. */
MGS_API const char* mgs_status_string(mgs_status_t status);

/**
 * The message of the last failed mgs call on the calling thread (thread-local).
 * Empty string if the last call succeeded. Valid until the thread's next mgs call.
 */
MGS_API const char* mgs_last_error(void);

/* ---------------------------------------------------------------- tensors -- */

typedef enum mgs_dtype {
  MGS_FLOAT32 = 0,
  MGS_FLOAT64 = 1,
  MGS_FLOAT16 = 2,
  MGS_BFLOAT16 = 3,
  MGS_INT32 = 4,
  MGS_INT64 = 5,
  MGS_UINT8 = 6
} mgs_dtype_t;

/** Size in bytes of one element of `dtype`, or 0 for an unknown dtype. */
MGS_API size_t mgs_dtype_size(mgs_dtype_t dtype);

/** Value of mgs_tensor_t.device for host memory. */
#define MGS_DEVICE_CPU (-1)
/** Most dimensions a tensor may have. */
#define MGS_MAX_DIMS 8
/** Longest tensor name, in bytes. */
#define MGS_MAX_NAME_BYTES 65536

/**
 * A dense, contiguous (row-major) tensor owned by the caller. mgs reads `shape`
 * only during the enqueue call; `data` must stay valid until the operation's
 * handle completes.
 */
typedef struct mgs_tensor {
  void* data; /**< host pointer, or CUDA device pointer */
  mgs_dtype_t dtype;
  int32_t ndim;         /**< 0 (scalar) .. MGS_MAX_DIMS */
  const int64_t* shape; /**< ndim non-negative extents (may be NULL when ndim == 0) */
  int32_t device;       /**< MGS_DEVICE_CPU or a CUDA device ordinal */
  void* stream;         /**< CUDA: the framework's cudaStream_t producing `data` (may be NULL) */
  void* ready_event;    /**< CUDA: a cudaEvent_t recorded after `data` is written (may be NULL:
                             then mgs waits for `stream`) */
} mgs_tensor_t;

/* -------------------------------------------------------------- lifecycle -- */

/**
 * Initialise the runtime: read and validate every MGS_* environment variable,
 * initialise MPI if the caller has not, and start the coordinator thread.
 * Collective: every rank must call it.
 * MPI: mgs initialises it with MPI_THREAD_SERIALIZED (only one thread calls MPI
 * at a time: the coordinator, or the thread that re-initialises mgs); an MPI
 * the application initialised itself must provide MPI_THREAD_MULTIPLE, since
 * the application's threads may then call MPI while the coordinator does.
 * Re-initialising works: after mgs_shutdown (or after another rank stopped the
 * job) every rank may call mgs_init again and gets a fresh runtime on the same
 * MPI, which mgs finalises only at process exit.
 * Errors: MGS_ERR_CONFIG (names the variable, the value and what is allowed),
 * MGS_ERR_ALREADY_INITIALIZED, MGS_ERR_COMMUNICATION.
 */
MGS_API mgs_status_t mgs_init(void);

/**
 * Stop the coordinator and release resources. Operations still pending complete
 * with MGS_ERR_SHUTDOWN. Collective in spirit: ranks negotiate the shutdown, but a
 * rank that shuts down early never makes the others hang (they see
 * MGS_ERR_SHUTDOWN, naming this rank, for operations that can no longer run).
 * When it returns, the coordinator has stopped and touches no buffer of any
 * operation again, released or not. After it, calls fail with
 * MGS_ERR_NOT_INITIALIZED until the next mgs_init. Idempotent. Called
 * automatically at process exit.
 */
MGS_API mgs_status_t mgs_shutdown(void);

/**
 * 1 if the runtime is initialised and running, else 0 (also 0 once another rank
 * stopped the job). Never fails.
 */
MGS_API int mgs_is_initialized(void);

/* --------------------------------------------------------------- topology -- */

/**
 * Rank, world size, rank on this host and ranks on this host. MGS_ERR_NOT_INITIALIZED
 * before mgs_init and after mgs_shutdown on this rank; they keep working after
 * another rank stopped the job.
 */
MGS_API mgs_status_t mgs_rank(int* rank);
MGS_API mgs_status_t mgs_size(int* size);
MGS_API mgs_status_t mgs_local_rank(int* local_rank);
MGS_API mgs_status_t mgs_local_size(int* local_size);

/* ------------------------------------------------------------- operations -- */

/** Opaque handle of an asynchronous operation. 0 is never a valid handle. */
typedef uint64_t mgs_handle_t;

typedef enum mgs_reduce_op { MGS_REDUCE_SUM = 0, MGS_REDUCE_AVERAGE = 1 } mgs_reduce_op_t;

/** Flags for mgs_allreduce_async. */
#define MGS_FLAG_NONE 0u
/**
 * The tensor is a gradient that may be sparsified when MGS_COMPRESSOR is not
 * "none" (the result then equals the average of the selected entries, with the
 * rest kept as a per-tensor residual). Without it the reduction is always exact.
 */
#define MGS_FLAG_SPARSE_OK 1u

/**
 * Allreduce `input` into `output` (may be the same tensor: in place) across all
 * ranks. The result is prescale * sum_over_ranks(input) * postscale, divided by the
 * world size for MGS_REDUCE_AVERAGE. Integer tensors are scaled in double and
 * rounded toward zero. `input` and `output` must have the same dtype, shape and
 * device. Every rank must use the same name, dtype, shape, device kind, op, scale
 * factors and flags, or the operation fails on every rank with MGS_ERR_MISMATCH.
 * NaN or Inf in any rank's input (MGS_NONFINITE): by default ('propagate') the op
 * succeeds and the output carries them on every rank (for a sparsified gradient,
 * every output of its bucket is NaN), so loss scaling can skip the step; with
 * 'error' it fails with MGS_ERR_NUMERIC on every rank. Either way a skipped or
 * failed gradient step leaves every rank's residual as it was.
 * Errors at enqueue: MGS_ERR_NOT_INITIALIZED, MGS_ERR_INVALID_ARGUMENT,
 * MGS_ERR_DUPLICATE_NAME, MGS_ERR_UNSUPPORTED (CUDA tensor in a CPU-only build).
 */
MGS_API mgs_status_t mgs_allreduce_async(const char* name, const mgs_tensor_t* input, const mgs_tensor_t* output,
                                         mgs_reduce_op_t op, double prescale_factor, double postscale_factor,
                                         uint32_t flags, mgs_handle_t* handle);

/**
 * Concatenate every rank's `input` along the first dimension, in rank order. The
 * first dimension may differ per rank; dtype, the other dimensions and the device
 * kind must agree. The result is held by the runtime: after the handle completes,
 * query its shape with mgs_allgather_output_shape() and copy it out with
 * mgs_allgather_copy_output(); mgs_allgather_rank_sizes() gives each rank's first
 * dimension. `input` may be released as soon as the handle completes.
 */
MGS_API mgs_status_t mgs_allgather_async(const char* name, const mgs_tensor_t* input, mgs_handle_t* handle);

/**
 * After a successful allgather: the output's number of dimensions and extents
 * (`shape` must hold MGS_MAX_DIMS entries).
 */
MGS_API mgs_status_t mgs_allgather_output_shape(mgs_handle_t handle, int32_t* ndim, int64_t* shape);

/**
 * After a successful allgather: the first dimension of every rank (`sizes` holds one entry per rank of the
 * operation's process set: the world size for the global set). After an alltoall: the rows received from
 * each rank.
 */
MGS_API mgs_status_t mgs_allgather_rank_sizes(mgs_handle_t handle, int64_t* sizes);

/**
 * Copy an allgather's result into `output`, which must have the dtype and shape
 * reported by mgs_allgather_output_shape(). CPU or CUDA destinations.
 */
MGS_API mgs_status_t mgs_allgather_copy_output(mgs_handle_t handle, const mgs_tensor_t* output);

/**
 * Broadcast `tensor` (in place) from `root_rank` to every rank. Every rank must use
 * the same name, dtype, shape, device kind and root.
 */
MGS_API mgs_status_t mgs_broadcast_async(const char* name, const mgs_tensor_t* tensor, int root_rank,
                                         mgs_handle_t* handle);

/** Block until every rank has called mgs_barrier (negotiated like any other op). */
MGS_API mgs_status_t mgs_barrier(void);

/* ----------------------------------------------------------- process sets -- */

/**
 * Process sets (Horovod's): a subset of the ranks that runs collectives among
 * itself, with its own names (the same name may be in flight in several sets).
 * Set 0, MGS_GLOBAL_PROCESS_SET, is every rank and always exists.
 *
 * mgs_process_set_add and mgs_process_set_remove are collective over every
 * rank (not only the set's), blocking, and must be called in the same order on
 * every rank; every rank gets the same id. Ids are never reused while the
 * runtime runs. Adding a set whose ranks equal an existing set's fails
 * (MGS_ERR_INVALID_ARGUMENT, naming it). Removing a set fails on every rank,
 * naming the ranks, while some rank has an operation of the set that has not
 * run yet.
 *
 * An operation of a set waits for the set's ranks only. A broadcast's root is
 * a world rank, which must be in the set. Average divides by the set's size.
 * A rank outside the set that submits an operation to it fails that operation
 * on itself and on every rank of the set that submits the same name (and has
 * not run it yet), with a message naming the tensor, the rank and the set.
 * Gradients of a set are reduced exactly (MGS_FLAG_SPARSE_OK is ignored: the
 * sparse pipeline runs on the global set).
 */
#define MGS_GLOBAL_PROCESS_SET 0

/** Add a process set of the `n` ranks in `ranks` (any order, no repeats); *id receives its id. */
MGS_API mgs_status_t mgs_process_set_add(const int32_t* ranks, int32_t n, int32_t* id);
/** Remove process set `id` (not 0). */
MGS_API mgs_status_t mgs_process_set_remove(int32_t id);
/** The number of ranks in set `id`. */
MGS_API mgs_status_t mgs_process_set_size(int32_t id, int32_t* size);
/** This rank's index in set `id` (its rank within the set), or -1 if it is not in it. */
MGS_API mgs_status_t mgs_process_set_rank(int32_t id, int32_t* rank);
/** The world ranks of set `id`, ascending (`ranks` holds mgs_process_set_size entries). */
MGS_API mgs_status_t mgs_process_set_ranks(int32_t id, int32_t* ranks);

/** mgs_allreduce_async within process set `process_set`. */
MGS_API mgs_status_t mgs_allreduce_ps_async(const char* name, const mgs_tensor_t* input, const mgs_tensor_t* output,
                                            mgs_reduce_op_t op, double prescale_factor, double postscale_factor,
                                            uint32_t flags, int32_t process_set, mgs_handle_t* handle);
/** mgs_allgather_async within process set `process_set`; the result is in the set's rank order. */
MGS_API mgs_status_t mgs_allgather_ps_async(const char* name, const mgs_tensor_t* input, int32_t process_set,
                                            mgs_handle_t* handle);
/** mgs_broadcast_async within process set `process_set`; `root_rank` is a world rank in the set. */
MGS_API mgs_status_t mgs_broadcast_ps_async(const char* name, const mgs_tensor_t* tensor, int root_rank,
                                            int32_t process_set, mgs_handle_t* handle);
/** Block until every rank of process set `process_set` has called it. */
MGS_API mgs_status_t mgs_barrier_ps(int32_t process_set);

/* ---------------------------------------------- alltoall and reducescatter -- */

/**
 * Send rows of `input` to every rank of `process_set`: splits[q] rows (along
 * the first dimension, consecutive, in order) to the set's q-th rank, and
 * receive each rank's rows for this one, concatenated in the set's rank order.
 * `splits` holds one entry per rank of the set, non-negative, adding up to the
 * first dimension; NULL sends equal parts (the first dimension must then be a
 * multiple of the set's size). dtype, the dimensions after the first and the
 * device kind must agree on every rank. The result is held by the runtime and
 * read like an allgather's: mgs_allgather_output_shape, mgs_allgather_copy_output,
 * and mgs_allgather_rank_sizes for the rows received from each rank.
 * Errors at enqueue (MGS_ERR_INVALID_ARGUMENT): a scalar, splits that are
 * negative or do not add up to the first dimension, unequal parts without splits.
 */
MGS_API mgs_status_t mgs_alltoall_async(const char* name, const mgs_tensor_t* input, const int64_t* splits,
                                        int32_t process_set, mgs_handle_t* handle);

/**
 * Reduce `input` over the ranks of `process_set` (as mgs_allreduce_async: sum
 * or average, pre- and postscaled) and give each rank its part of the first
 * dimension in `output`: with d rows over n ranks, the set's q-th rank gets
 * d / n rows, one more for q < d % n, starting after the rows of the ranks
 * before it. `output` has the input's dtype and device and that shape. Every
 * rank must use the same name, dtype, shape, device kind, op and scale factors.
 */
MGS_API mgs_status_t mgs_reducescatter_async(const char* name, const mgs_tensor_t* input,
                                             const mgs_tensor_t* output, mgs_reduce_op_t op, double prescale_factor,
                                             double postscale_factor, int32_t process_set, mgs_handle_t* handle);

/* ------------------------------------------------------------------- join -- */

/**
 * Horovod's join: call when this rank has no more data. Blocks until every rank
 * has called it; *last_rank receives the last rank to join. Meanwhile this
 * rank takes part in the other ranks' allreduces of the global set with zeros
 * (an Average still divides by the world size), so training ranks are never
 * left waiting for it. Any other operation of the global set submitted while
 * some rank has joined (allgather, broadcast, alltoall, reducescatter,
 * barrier, an allreduce of CUDA tensors) fails at once with
 * MGS_ERR_UNSUPPORTED on each rank that submits it, naming the joined ranks.
 */
MGS_API mgs_status_t mgs_join(int32_t* last_rank);

/* ---------------------------------------------------------------- handles -- */

/** Set *done to 1 if the operation completed (successfully or not), else 0. Never blocks. */
MGS_API mgs_status_t mgs_poll(mgs_handle_t handle, int* done);

/**
 * Block until the operation completes; returns its status (MGS_SUCCESS or the
 * error it failed with). For CUDA outputs, completion means the result is ready
 * to use on the tensor's stream (mgs makes that stream wait for its own work).
 */
MGS_API mgs_status_t mgs_wait(mgs_handle_t handle);

/**
 * The message of a failed operation ("" while pending or after success). Valid
 * until mgs_release(handle).
 */
MGS_API const char* mgs_handle_error(mgs_handle_t handle);

/**
 * Forget a handle. Releasing a pending operation is allowed: it still runs, but
 * its result and its completion can no longer be observed. Its buffers must
 * therefore stay valid until mgs_shutdown() returns (after which mgs touches
 * no buffer), or until the process exits. To free them earlier, mgs_wait()
 * (or poll until done) before releasing.
 */
MGS_API mgs_status_t mgs_release(mgs_handle_t handle);

/* ------------------------------------------------------------ introspection -- */

/**
 * Counters of this rank's runtime since mgs_init. Fields are only ever added at
 * the end; pass sizeof(mgs_stats_t) so older callers keep working.
 */
typedef struct mgs_stats {
  uint64_t negotiation_cycles;      /**< coordinator cycles that had work pending */
  uint64_t negotiation_fast_cycles; /**< ... decided by the cached bit-vector allreduce alone */
  uint64_t negotiation_slow_cycles; /**< ... that needed the gather to rank 0 */
  double negotiation_seconds;       /**< time spent negotiating in cycles with work */
  uint64_t ops_completed;           /**< operations completed (any status) */
  uint64_t bytes_reduced;           /**< payload bytes of completed allreduces */
  /* The sparse pipeline (MGS_COMPRESSOR != none), for gradients enqueued with MGS_FLAG_SPARSE_OK. */
  uint64_t sparse_steps;         /**< training steps seen (a step ends when a gradient name recurs) */
  uint64_t sparse_buckets;       /**< merged buckets exchanged sparsely */
  uint64_t sparse_dense_buckets; /**< buckets the cost model sent as a dense allreduce */
  uint64_t sparse_selected;      /**< entries this rank selected and sent, summed over buckets */
  uint64_t sparse_target;        /**< k summed over the same buckets (selected/target ~ 1) */
  uint64_t sparse_bytes_sent;    /**< bytes this rank sent for gradients (values + indices) */
  uint64_t sparse_dense_bytes;   /**< bytes a dense allreduce of the same gradients would send */
  uint64_t plan_buckets;         /**< buckets in the current merge plan (0 while profiling) */
  uint64_t plans;                /**< merge plans computed so far */
  uint64_t name_cache_entries;   /**< names in the negotiation cache (at most 8192: least
                                      recently used names are evicted) */
  uint64_t idle_cycles;          /**< coordinator cycles with nothing pending on this rank */
  uint64_t sparse_agreed_buckets; /**< of sparse_buckets, those exchanged by the agreed-index exchange
                                       (MGS_EXCHANGE; the rest went by allgather) */
  uint64_t sparse_in_flight_max;  /**< most sparse buckets whose exchange was in flight at once (the
                                       coordinator went on meanwhile), device buckets included */
  uint64_t plan_trials;           /**< candidate merge plans run on trial so far (MGS_PLAN_TRIAL_STEPS);
                                       plan_buckets follows each candidate while they run */
  /* Which path each finished bucket of the sparse pipeline (sparse or dense, every exchange) took;
     the four sum to sparse_buckets + sparse_dense_buckets, their bytes to sparse_bytes_sent. */
  uint64_t path_host_buckets;     /**< host tensors: fused, selected and exchanged in host memory */
  uint64_t path_staged_buckets;   /**< CUDA tensors copied to host memory and selected on the CPU (the slow
                                       fallback: MGS_EXCHANGE=hierarchical, no device stage, or a
                                       library built without CUDA) */
  uint64_t path_resident_buckets; /**< CUDA tensors selected on their GPU; only compact data (the allgather's
                                       (value, index) block, the agreed exchange's indices and values)
                                       crossed to the host for MPI */
  uint64_t path_device_buckets;   /**< the whole bucket on the GPU: selection, NCCL allgather and scatter */
  uint64_t path_host_bytes;       /**< bytes this rank sent for path_host_buckets */
  uint64_t path_staged_bytes;     /**< ... for path_staged_buckets */
  uint64_t path_resident_bytes;   /**< ... for path_resident_buckets */
  uint64_t path_device_bytes;     /**< ... for path_device_buckets */
  uint64_t cuda_nccl_ops;         /**< other collectives of CUDA tensors (dense allreduce, broadcast) run on NCCL */
  uint64_t cuda_staged_ops;       /**< ... staged through host memory for MPI */
  uint64_t device_host_syncs;     /**< times the runtime blocked the host on a GPU (stream/event syncs, blocking
                                       copies), process-wide; 0 without CUDA */
  /* The merge plan's prediction against the job (the online check, MGS_REPLAN_TOLERANCE > 0): */
  uint64_t plan_span_checks;       /**< steps whose span was compared with the plan's prediction */
  uint64_t plan_span_predicted_us; /**< the last compared step's span (first gradient to last exchange) as the
                                        plan predicted it, microseconds */
  uint64_t plan_span_measured_us;  /**< ... as measured, from the first gradient of the rank that started the
                                        step last, mean over ranks (the same on every rank) */
  /* Process sets other than the global one (each has its own sparse pipeline; the fields above are the global's): */
  uint64_t set_sparse_buckets;     /**< their buckets exchanged sparsely, on this rank */
  uint64_t set_sparse_bytes_sent;  /**< values + indices this rank sent for them */
  uint64_t sparse_warmup_steps;    /**< density warm-up steps of this job (MGS_WARMUP_STEPS resolved: 'auto' gives
                                        50 at density 0.01, 100 at 0.001, 0 at >= 0.1); sparse_steps says how far it is */
  uint64_t plan_span_plan_checks;      /**< compared steps of the plan that runs now (reset when a plan, a trial
                                            candidate included, is chosen) */
  uint64_t plan_span_predicted_sum_us; /**< plan_span_predicted_us summed over those steps */
  uint64_t plan_span_measured_sum_us;  /**< plan_span_measured_us summed likewise: predicted_sum / measured_sum
                                            is how well the plan that runs predicts its steps */
  /* The dense allreduces of host memory (float sums of 64 KiB and more, the global set's), by algorithm: */
  uint64_t allreduce_ring_ops;       /**< on mgs's ring (bandwidth-optimal, 2(P-1) start-ups) */
  uint64_t allreduce_library_ops;    /**< on the MPI library's own algorithms (fewer start-ups) */
  uint64_t allreduce_ring_min_bytes; /**< the bound between them: float sums of at least this many bytes take
                                          the ring (measured at init unless MGS_CALIBRATION=off or
                                          MGS_PLAN_FILE is set; 64 KiB then) */
  uint64_t sparse_hierarchical_buckets; /**< of sparse_buckets, those exchanged by the hierarchical exchange
                                             (MGS_EXCHANGE=hierarchical; 'auto' takes the allgather, never it
                                             or the agreed exchange) */
  uint64_t plan_replans_rejected;       /**< online re-plans whose plan lost its trial against the plan that ran
                                             (MGS_PLAN_TRIAL_STEPS: visits alternate; the running plan stays unless
                                             the new one is faster by more than 3 % and the spread between visits),
                                             or that the refitted model priced no more than 3 % faster than the
                                             running plan, which then stays without a trial */
  uint64_t plan_span_predicted_total_us; /**< plan_span_predicted_us summed over every compared step of the job, of
                                              every plan that ran (trial candidates included; plan_span_checks of
                                              them) */
  uint64_t plan_span_measured_total_us;  /**< plan_span_measured_us summed likewise: predicted_total / measured_total
                                              is how well the plans predicted the job's steps */
  uint64_t
      fusion_threshold_bytes; /**< the largest fused buffer of small dense allreduces now: MGS_FUSION_THRESHOLD_BYTES,
                                   or the candidate on trial, or the one the trials kept (MGS_FUSION_TRIALS) */
  uint64_t fusion_trials;     /**< fusion thresholds run on trial so far (0: none; a job without a compressor
                                   tries up to 4 after its fifth step) */
  uint64_t fusion_max_tensor_bytes; /**< dense tensors below this size may be fused: where init measured a
                                         collective start-up longer than copying 64 KiB in and out, the size
                                         whose copies take one start-up; else 65536 (0 before the coordinator
                                         started) */
  uint64_t plan_round_us;           /**< rank 0 (0 elsewhere): the negotiation round the last merge plan was priced at,
                                         in microseconds: the mean of plan_rounds_timed rounds the coordinator timed
                                         (docs/planner.md §2), or the calibration's when it timed fewer than 4;
                                         0 when the cost model has no rounds (negotiation_s 0) */
  uint64_t plan_rounds_timed;       /**< rank 0: the rounds behind plan_round_us (0: the calibration's) */
  uint64_t plan_trial_running;      /**< 1 while candidate merge plans run on trial (the first plan's, a re-plan's,
                                         or their run-off: plan_trials does not rise during a run-off), 0 when one
                                         plan runs; the same on every rank at every step */
} mgs_stats_t;

/** Copy up to `size` bytes of the current counters into *stats. */
MGS_API mgs_status_t mgs_get_stats(mgs_stats_t* stats, size_t size);

/**
 * One bucket of the merge plan that runs now: when the plan predicted it would
 * be ready (the negotiation round that finds its last gradient enqueued on
 * every rank) and its exchange would end, and when they were measured, on the
 * steps the online check compared (MGS_REPLAN_TOLERANCE > 0). Ready against
 * ready separates backward's error from the exchange's. Times are
 * microseconds from the first gradient of the rank that started the step
 * last (docs/planner.md, section 7); measured figures are the mean over ranks
 * (the same on every rank). Fields are only ever added at the end.
 */
typedef struct mgs_plan_bucket {
  uint64_t tensors;               /**< gradients merged into it */
  uint64_t elements;              /**< their elements */
  int64_t predicted_end_us;       /**< the plan's end of its exchange; -1: not known (a plan from MGS_PLAN_FILE) */
  uint64_t measured_end_us;       /**< the last compared step: its outputs written (0 before the first) */
  uint64_t measured_end_sum_us;   /**< measured_end_us summed over `checks` steps */
  uint64_t checks;                /**< compared steps of this plan in which every rank finished it */
  int64_t predicted_ready_us;     /**< when the plan expected it declared ready everywhere; -1: not known */
  uint64_t measured_ready_us;     /**< the last compared step: when it was declared ready (mean over ranks) */
  uint64_t measured_ready_sum_us; /**< measured_ready_us summed over `checks` steps */
} mgs_plan_bucket_t;

/**
 * Copy the plan's buckets, in backward order, into buckets[0 .. capacity-1]
 * (each entry `entry_size` bytes: pass sizeof(mgs_plan_bucket_t)); *count
 * receives how many the plan has, which may exceed capacity (call again with
 * more room). 0 while the job profiles (no plan yet), for a dense job, and
 * while a plan file's plan runs.
 */
MGS_API mgs_status_t mgs_get_plan_buckets(mgs_plan_bucket_t* buckets, size_t capacity, size_t entry_size,
                                          size_t* count);

/**
 * Copy this rank's error-feedback residual of gradient `name` (float32, `n` =
 * the tensor's element count) into `out`: the part of the gradient selected
 * by no step yet. For checkpoints and for checking what was sent
 * (sent = input + residual_before - residual_after). MGS_ERR_INVALID_ARGUMENT
 * if the tensor was never sparsified on this rank or `n` differs.
 */
MGS_API mgs_status_t mgs_residual_copy(const char* name, float* out, size_t n);

/**
 * Replace the residual of `name` (e.g. when restoring a checkpoint). Call it
 * between steps, with no allreduce of `name` in flight on this rank (a
 * residual restored while its step is in flight is overwritten when that step
 * commits). A resumed job continues bitwise only with mgs_sparse_state_restore
 * too.
 */
MGS_API mgs_status_t mgs_residual_restore(const char* name, const float* values, size_t n);

/**
 * The rest of the sparse pipeline's progress on this rank that decides what
 * the next steps select, as an opaque byte string for checkpoints: the step
 * counter (randomk/dgc seeds, MGS_WARMUP_STEPS) and how many times each
 * agreed-index bucket was applied (which rank leads it next, MGS_EXCHANGE).
 * Without it a resumed job restarts every agreed bucket at its first leader
 * and selects other entries, even with its residuals restored. Copy it with
 * the residuals, between steps (every handle of the step waited for).
 * Sets *size to the state's size in bytes; writes the bytes to `out` when
 * `capacity` >= *size. out == NULL with capacity 0 only asks the size.
 * MGS_ERR_INVALID_ARGUMENT: size NULL, or a buffer too small (the message
 * gives the size). Readable after another rank stopped the job, like the
 * residuals.
 */
MGS_API mgs_status_t mgs_sparse_state_copy(void* out, size_t capacity, size_t* size);

/**
 * Restore a state mgs_sparse_state_copy made on this rank of a job with the
 * same number of ranks (every rank restores its own, or all restore the same:
 * the state is the same on every rank). Call it between steps, before the
 * next step's first allreduce: the leaders apply at once, the step counter
 * from the next step on.
 * MGS_ERR_INVALID_ARGUMENT, naming the rank: bytes that are not such a state,
 * another library version's, or one saved with another world size.
 */
MGS_API mgs_status_t mgs_sparse_state_restore(const void* data, size_t size);

/** "MAJOR.MINOR.PATCH" of the library. Never NULL. */
MGS_API const char* mgs_version(void);
/** 1 if this library was built with CUDA kernels. */
MGS_API int mgs_built_with_cuda(void);
/** 1 if this library was built with the NCCL backend. */
MGS_API int mgs_built_with_nccl(void);
/** NCCL's version code this library was built with (e.g. 21803 for 2.18.3), 0 without NCCL. */
MGS_API int mgs_nccl_version(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MGS_MGS_H_ */
