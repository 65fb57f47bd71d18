"""The runtime layer shared by mgs.torch and mgs.tensorflow (no framework imported here).

Lifecycle (init, shutdown), topology (rank, size, local and cross ranks),
op naming, reduction ops, and the enqueue / wait / release of C handles live
here once; each adapter adds only how its tensors become mgs_tensor_t and
how results become its tensors.

Names: an op named "x" is sent to the runtime as "<kind>.x" (kind is
allreduce, allgather or broadcast), so the same user name may be in flight
once per kind. Unnamed ops get "<kind>.noname.<n>" from a per-kind counter:
ranks must issue their unnamed ops of a kind in the same order.
"""

import atexit
import ctypes
import os
import threading
import warnings

from . import _abi, _lib
from ._lib import MgsTensor, lib

# ------------------------------------------------------------- reduction ops --
# Sum and Average are mgs_reduce_op_t values and run in the runtime (fused,
# sparsified). Min, Max and Product are not in the C ABI: the adapters run them
# as an allgather followed by a local reduction (P times the tensor's memory and
# traffic; meant for metrics and flags, not gradients). Their numbers are
# Horovod's and never reach the library.
Sum = _abi.MGS_REDUCE_SUM
Average = _abi.MGS_REDUCE_AVERAGE
Adasum = 2
Min = 3
Max = 4
Product = 5
GATHER_OPS = (Min, Max, Product)
_OP_NAMES = {Sum: "Sum", Average: "Average", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}


def resolve_scatter_op(op):
    """reducescatter's op: Sum or Average (None: Average). Any other is refused, as Horovod refuses it
    (a RuntimeError): MgsUnsupportedError naming the op."""
    if op is None:
        return Average
    if op in (Sum, Average):
        return op
    what = "Adasum" if op == Adasum else op_name(op)
    raise _lib.MgsUnsupportedError(f"reducescatter supports op=Sum and op=Average, not {what}",
                                   "MGS_ERR_UNSUPPORTED")


def submit_stand_in(enqueue):
    """Run the op `enqueue()` starts to its end, ignoring its outcome: a rank that refuses a collective
    it cannot serve submits an op under the same name that disagrees with the others' (another dtype),
    so they fail with the runtime's report instead of waiting forever; where every rank refused alike,
    the stand-ins agree and complete. Nothing happens if it cannot be enqueued (the name in flight,
    the runtime down)."""
    try:
        handle = enqueue()
    except Exception:  # noqa: BLE001 - nothing to unblock
        return
    try:
        wait(handle)
    except Exception:  # noqa: BLE001 - expected where other ranks sent real data
        pass
    finally:
        release(handle)


def resolve_op(op, average, adapter):
    """The op to run for Horovod's (op=, deprecated average=) pair; ValueError for what mgs cannot do."""
    if average is not None:
        if op is not None:
            raise ValueError("give either op= or the deprecated average=, not both")
        warnings.warn(f"the 'average' argument is deprecated; use op={adapter}.Average or op={adapter}.Sum",
                      DeprecationWarning, stacklevel=4)
        return Average if average else Sum
    if op is None:
        return Average
    if op == Adasum:
        raise ValueError("mgs does not implement Adasum; use op=Average (the default) or op=Sum. With "
                         "MGS_COMPRESSOR set, mgs sparsifies the averaged gradients instead")
    if op not in _OP_NAMES:
        raise ValueError(f"unknown reduction op {op!r}; mgs supports {adapter}.Sum, Average, Min, Max "
                         "and Product")
    return op


def op_name(op):
    return _OP_NAMES.get(op, repr(op))


# ------------------------------------------------------------------ HOROVOD_* --
# Horovod variables with an mgs twin are honoured (an MGS_* value set as well
# wins); the others are reported once, so a tuned Horovod job does not silently
# run with defaults it did not expect. Values: (mgs name, conversion).
_LOG_LEVELS = {"trace": "trace", "debug": "debug", "info": "info", "warning": "warn", "warn": "warn",
               "error": "error", "fatal": "error"}
HOROVOD_TWINS = {
    "HOROVOD_FUSION_THRESHOLD": ("MGS_FUSION_THRESHOLD_BYTES", str),
    "HOROVOD_CYCLE_TIME": ("MGS_CYCLE_TIME_MS", str),
    "HOROVOD_TIMELINE": ("MGS_TIMELINE", str),
    "HOROVOD_LOG_LEVEL": ("MGS_LOG_LEVEL", lambda v: _LOG_LEVELS.get(v.lower(), v)),
    "HOROVOD_STALL_CHECK_TIME_SECONDS": ("MGS_STALL_WARNING_S", str),
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": ("MGS_STALL_ABORT_S", str),
}
# Set by launchers or harmless for mgs: not worth a warning.
_HOROVOD_QUIET = {"HOROVOD_HOSTNAME", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                  "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_WITH_PYTORCH", "HOROVOD_WITH_TENSORFLOW",
                  "HOROVOD_WITH_MPI", "HOROVOD_WITHOUT_GLOO", "HOROVOD_WITHOUT_MXNET",
                  # mgs always lets process sets be added and removed after init()
                  "HOROVOD_DYNAMIC_PROCESS_SETS"}
_horovod_reported = False


def horovod_environment(environ):
    """(MGS_* values to set for mgs_init, HOROVOD_* names mgs ignores) for an environment."""
    extra, ignored = {}, []
    for name in sorted(environ):
        if not name.startswith("HOROVOD_") or name in _HOROVOD_QUIET:
            continue
        twin = HOROVOD_TWINS.get(name)
        # HOROVOD_TIMELINE=DYNAMIC is a switch for start_timeline(), which mgs lacks, not a file name.
        if twin is None or (name == "HOROVOD_TIMELINE" and environ[name] == "DYNAMIC"):
            ignored.append(name)
        elif twin[0] not in environ:
            extra[twin[0]] = twin[1](environ[name])
    return extra, ignored


# ----------------------------------------------------------------- lifecycle --

_lock = threading.Lock()
_atexit_registered = False
_cross = None  # (cross_rank, cross_size, is_homogeneous), computed once per init
# The world size, read once per init: results of completed operations are read
# without asking the runtime again, which may already have shut down (another
# rank finished first) while this rank still unpacks its last allgather.
_world_size = None
# The MGS_* settings of the running runtime's job that decide what a sparse
# step selects, as the environment held them at mgs_init (which read them):
# a checkpoint records them, a resumed job is warned where its own differ.
SPARSE_SETTINGS = ("MGS_COMPRESSOR", "MGS_DENSITY", "MGS_ERROR_FEEDBACK", "MGS_EXCHANGE", "MGS_WARMUP_STEPS",
                   "MGS_MIN_SPARSE_ELEMENTS", "MGS_DENSE_FALLBACK", "MGS_PLANNER")
_init_settings = {}


def init_settings():
    """The SPARSE_SETTINGS that were set when the runtime was last initialised ({} before init())."""
    return dict(_init_settings)


def init(adapter, comm=None):
    """Start the runtime on every rank (collective); a no-op while it runs. `adapter` names the caller."""
    global _atexit_registered, _cross, _horovod_reported, _world_size, _init_settings
    if comm is not None:
        raise ValueError(f"{adapter}.init(): mgs runs on MPI_COMM_WORLD; a communicator cannot be given")
    L = lib()
    if L.mgs_is_initialized():
        return
    extra, ignored = horovod_environment(os.environ)
    if ignored and not _horovod_reported:
        _horovod_reported = True
        warnings.warn(f"mgs ignores {', '.join(ignored)} (Horovod settings without an mgs equivalent); "
                      "see docs/troubleshooting.md for the MGS_* variables", RuntimeWarning, stacklevel=3)
    # MGS_LIBRARY is the bindings' variable and the runtime rejects MGS_* names it
    # does not know, so hide it while mgs_init reads the environment; HOROVOD_*
    # twins are visible only for that call.
    saved = {"MGS_LIBRARY": os.environ.pop("MGS_LIBRARY", None)}
    for k, v in extra.items():
        saved[k] = None
        os.environ[k] = v
    try:
        status = L.mgs_init()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    settings = {k: os.environ[k] for k in SPARSE_SETTINGS if k in os.environ}
    if status != 0:
        error = L.error(status, L.last_error(), at_enqueue=True)
        if extra:
            origin = ", ".join(f"{m} from {h}" for h, (m, _) in HOROVOD_TWINS.items() if m in extra and h in os.environ)
            error = type(error)(f"{error} ({origin})", error.status)
        raise error
    if not _atexit_registered:
        # Shut down while Python objects still exist: operations still in flight
        # reference buffers that interpreter teardown frees.
        atexit.register(shutdown)
        _atexit_registered = True
    _world_size = size()
    _init_settings = settings
    _cross = _compute_cross()


def shutdown():
    """Stop the runtime. Operations still pending fail with MGS_ERR_SHUTDOWN. Idempotent."""
    L = lib()
    L.check(L.mgs_shutdown())


def is_initialized():
    return bool(lib().mgs_is_initialized())


def _topology(fn_name):
    def get():
        L = lib()
        out = ctypes.c_int(0)
        L.check(getattr(L, fn_name)(ctypes.byref(out)))
        return out.value
    get.__name__ = fn_name[len("mgs_"):]
    get.__doc__ = f"{get.__name__} of this process (ValueError before init())."
    return get


rank = _topology("mgs_rank")
size = _topology("mgs_size")
local_rank = _topology("mgs_local_rank")
local_size = _topology("mgs_local_size")


def _compute_cross():
    """Horovod's cross ranks from every rank's (local_rank, local_size), gathered once at init.

    cross_size is the number of ranks sharing this rank's local_rank (the node
    count on a homogeneous job); cross_rank is this rank's position among them.
    """
    mine = (ctypes.c_int32 * 2)(local_rank(), local_size())
    handle = enqueue_allgather("allgather.mgs.topology", CTensor(mine, _abi.MGS_INT32, (1, 2)))
    n = _world_size
    out = (ctypes.c_int32 * (2 * n))()
    try:
        wait(handle)
        L = lib()
        L.check(L.mgs_allgather_copy_output(handle, CTensor(out, _abi.MGS_INT32, (n, 2)).ref()))
    finally:
        release(handle)
    return cross_topology([(out[2 * r], out[2 * r + 1]) for r in range(n)], rank())


def cross_topology(locals_, me):
    """(cross_rank, cross_size, is_homogeneous) of rank `me`, from every rank's (local_rank, local_size)."""
    peers = [r for r in range(len(locals_)) if locals_[r][0] == locals_[me][0]]
    return peers.index(me), len(peers), len({ls for _, ls in locals_}) == 1


def world_size():
    """size(), as read at init(): usable while unpacking results after another rank shut the job down."""
    return _world_size or size()


def _cross_value(i):
    rank()  # the error of a call before init() or after shutdown()
    return _cross[i]


def cross_rank():
    """This rank's index among the ranks with the same local_rank (its node's index, on a regular job)."""
    return _cross_value(0)


def cross_size():
    """How many ranks share this rank's local_rank (the number of nodes, on a regular job)."""
    return _cross_value(1)


def is_homogeneous():
    """True if every node runs the same number of ranks."""
    return _cross_value(2)


def barrier(process_set=0):
    """Block until every rank (of process set id `process_set`) has called barrier()."""
    L = lib()
    L.check(L.mgs_barrier_ps(int(process_set)) if process_set else L.mgs_barrier())


def join():
    """Horovod's join(): serve the other ranks' allreduces until every rank joined; the last rank to join."""
    L = lib()
    last = ctypes.c_int32(-1)
    L.check(L.mgs_join(ctypes.byref(last)))
    return last.value


# ------------------------------------------------------------- process sets --

def add_process_set(ranks):
    """Collective over every rank: a new process set of `ranks`; returns its id."""
    L = lib()
    arr = (ctypes.c_int32 * max(len(ranks), 1))(*ranks)
    out = ctypes.c_int32(0)
    L.check(L.mgs_process_set_add(arr, len(ranks), ctypes.byref(out)))
    return out.value


def remove_process_set(set_id):
    """Collective over every rank: remove process set `set_id`."""
    L = lib()
    L.check(L.mgs_process_set_remove(int(set_id)))


def process_set_ranks(set_id):
    """The world ranks of process set `set_id`, ascending."""
    L = lib()
    n = ctypes.c_int32(0)
    L.check(L.mgs_process_set_size(int(set_id), ctypes.byref(n)))
    arr = (ctypes.c_int32 * max(n.value, 1))()
    L.check(L.mgs_process_set_ranks(int(set_id), arr))
    return list(arr[:n.value])


def mpi_built():
    return True


def mpi_enabled():
    """True: mgs always communicates over MPI."""
    return True


def mpi_threads_supported():
    """False: mgs initialises MPI with MPI_THREAD_SERIALIZED, so the application must not call MPI itself."""
    return False


def gloo_built():
    return False


def gloo_enabled():
    return False


def ccl_built():
    return False


def ddl_built():
    return False


def rocm_built():
    return False


def cuda_built():
    """True if libmgs was built with its CUDA kernels."""
    return bool(lib().mgs_built_with_cuda())


def nccl_built():
    """As Horovod's: NCCL's version code libmgs was built with (e.g. 21803 for 2.18.3; true), else 0."""
    L = lib()
    if not L.mgs_built_with_nccl():
        return 0
    fn = getattr(L.cdll, "mgs_nccl_version", None)
    return int(fn()) if fn is not None and fn() > 0 else 1


# ------------------------------------------------------------------- naming --

_noname = {}


def full_name(kind, name, process_set=0):
    """The runtime's name for an op of `kind` named `name` (None: the next unnamed one).

    Unnamed ops are counted per kind and process set, so ops of a set do not
    shift the numbers of other sets' (the runtime keeps each set's names apart).
    """
    if name is None:
        with _lock:
            n = _noname.get((kind, process_set), 0)
            _noname[(kind, process_set)] = n + 1
        return f"{kind}.noname.{n}"
    return f"{kind}.{name}"


# ------------------------------------------------------- enqueue and wait --

class CTensor:
    """An mgs_tensor_t for host memory (any object with the buffer protocol, or a raw address).

    Keeps the memory's owner and the shape array alive as long as it lives."""

    __slots__ = ("owner", "_shape", "c")

    def __init__(self, owner, dtype, shape, address=None, device=_abi.MGS_DEVICE_CPU, stream=None,
                 ready_event=None):
        if len(shape) > _abi.MGS_MAX_DIMS:
            raise ValueError(f"mgs supports tensors of at most {_abi.MGS_MAX_DIMS} dimensions, got {len(shape)}")
        if address is None:
            address = ctypes.addressof(owner) if isinstance(owner, ctypes.Array) else None
        self.owner = owner
        self._shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.c = MgsTensor(address or None, dtype, len(shape), self._shape, device, stream, ready_event)

    def ref(self):
        return ctypes.byref(self.c)


def _enqueue(fn, *args):
    L = lib()
    handle = ctypes.c_uint64(0)
    L.check(fn(*args, ctypes.byref(handle)))
    return handle.value


def enqueue_allreduce(name, inp, out, op, prescale_factor=1.0, postscale_factor=1.0, flags=0, process_set=0):
    """Start a Sum/Average allreduce of CTensor `inp` into CTensor `out`; returns the C handle."""
    L = lib()
    if process_set:
        return _enqueue(L.mgs_allreduce_ps_async, name.encode(), inp.ref(), out.ref(), int(op),
                        float(prescale_factor), float(postscale_factor), int(flags), int(process_set))
    return _enqueue(L.mgs_allreduce_async, name.encode(), inp.ref(), out.ref(), int(op), float(prescale_factor),
                    float(postscale_factor), int(flags))


def enqueue_allgather(name, inp, process_set=0):
    L = lib()
    if process_set:
        return _enqueue(L.mgs_allgather_ps_async, name.encode(), inp.ref(), int(process_set))
    return _enqueue(L.mgs_allgather_async, name.encode(), inp.ref())


def enqueue_broadcast(name, tensor, root_rank, process_set=0):
    L = lib()
    if process_set:
        return _enqueue(L.mgs_broadcast_ps_async, name.encode(), tensor.ref(), int(root_rank), int(process_set))
    return _enqueue(L.mgs_broadcast_async, name.encode(), tensor.ref(), int(root_rank))


def enqueue_alltoall(name, inp, splits, process_set=0):
    """Start an alltoall of CTensor `inp`; `splits`: rows to each rank of the set (None: equal parts)."""
    L = lib()
    arr = None if splits is None else (ctypes.c_int64 * max(len(splits), 1))(*splits)
    return _enqueue(L.mgs_alltoall_async, name.encode(), inp.ref(), arr, int(process_set))


def enqueue_reducescatter(name, inp, out, op, prescale_factor=1.0, postscale_factor=1.0, process_set=0):
    L = lib()
    return _enqueue(L.mgs_reducescatter_async, name.encode(), inp.ref(), out.ref(), int(op), float(prescale_factor),
                    float(postscale_factor), int(process_set))


def poll(handle):
    L = lib()
    done = ctypes.c_int(0)
    L.check(L.mgs_poll(handle, ctypes.byref(done)))
    return bool(done.value)


def wait(handle):
    """Wait for a C handle (without releasing it); raise the op's error if it failed."""
    L = lib()
    status = L.mgs_wait(handle)  # ctypes releases the GIL for the wait
    if status != 0:
        raise L.error(status, L.mgs_handle_error(handle).decode(errors="replace"), at_enqueue=False)


def release(handle):
    lib().mgs_release(handle)


def allgather_output(handle, ranks=None):
    """(output shape, every rank's first dimension) of a completed allgather or alltoall.

    `ranks`: how many ranks took part (the process set's size; None: the world).
    """
    L = lib()
    ndim, shape = ctypes.c_int32(0), (ctypes.c_int64 * _abi.MGS_MAX_DIMS)()
    L.check(L.mgs_allgather_output_shape(handle, ctypes.byref(ndim), shape))
    sizes = (ctypes.c_int64 * (ranks or world_size()))()
    L.check(L.mgs_allgather_rank_sizes(handle, sizes))
    return list(shape[:ndim.value]), [int(s) for s in sizes]


def allgather_copy(handle, out):
    """Copy a completed allgather's output into CTensor `out`."""
    L = lib()
    L.check(L.mgs_allgather_copy_output(handle, out.ref()))


# ------------------------------------------------------------- checkpoints --
# Error-feedback residuals (one float32 per gradient element, per rank) and the
# rest of the sparse pipeline's progress (mgs_sparse_state_copy: the step
# counter and the agreed-index leaders), read and restored between steps.

def _checkpoint_entry(fn_name):
    L = lib()
    fn = getattr(L.cdll, fn_name, None)
    if fn is None:
        raise RuntimeError(f"{L.path} has no {fn_name}: it is older than these bindings; rebuild libmgs")
    return L, fn


def qualified_name(name, set_id):
    """The runtime's name of `name` enqueued in process set `set_id` (core/request.cc qualifiedName): a
    set's residuals are kept under it."""
    return name if not set_id else f"{name} [process set {set_id}]"


def residual_copy(name, address, n):
    """Copy this rank's residual of the runtime tensor `name` (n float32) to host memory at `address`.

    Returns False where the tensor has no residual (never sparsified on this rank: a dense job, a tensor
    under MGS_MIN_SPARSE_ELEMENTS, no step yet); raises for any other error.
    """
    L, fn = _checkpoint_entry("mgs_residual_copy")
    status = fn(name.encode(), address, int(n))
    if status == 0:
        return True
    message = L.last_error()
    if "has no residual" in message:
        return False
    raise L.error(status, message, at_enqueue=True)


def residual_restore(name, address, n):
    """Make n float32 at host `address` this rank's residual of the runtime tensor `name`."""
    L, fn = _checkpoint_entry("mgs_residual_restore")
    L.check(fn(name.encode(), address, int(n)))


def sparse_state():
    """This rank's sparse pipeline progress (step counter, agreed leaders) as bytes (mgs_sparse_state_copy)."""
    L, fn = _checkpoint_entry("mgs_sparse_state_copy")
    size = ctypes.c_size_t(0)
    L.check(fn(None, 0, ctypes.byref(size)))
    buf = ctypes.create_string_buffer(max(size.value, 1))
    L.check(fn(buf, size.value, ctypes.byref(size)))
    return buf.raw[:size.value]


def restore_sparse_state(data):
    """Restore what sparse_state() returned (mgs_sparse_state_restore); takes effect from the next step."""
    L, fn = _checkpoint_entry("mgs_sparse_state_restore")
    data = bytes(data)
    buf = ctypes.create_string_buffer(data, len(data)) if data else None
    L.check(fn(buf, len(data)))
