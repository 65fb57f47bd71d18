"""ctypes binding of libmgs (include/mgs/mgs.h): loading, signatures, errors.

Nothing here knows about a framework. The library is found, in order, at:
  1. the path in the MGS_LIBRARY environment variable (an error if it is set
     but does not exist: a typo must not silently pick another library),
  2. the package directory (where `pip install` puts the library it built),
  3. the repository's build tree, build/src/capi/ (development checkouts).
"""

import ctypes
import os
import threading
from pathlib import Path

from . import _abi

_LIB_FILE = "libmgs.so"


class MgsTensor(ctypes.Structure):
    """mgs_tensor_t."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),  # mgs_dtype_t: a C enum, int-sized
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("device", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
        ("ready_event", ctypes.c_void_p),
    ]


class MgsPlanBucket(ctypes.Structure):
    """mgs_plan_bucket_t."""

    _fields_ = [
        ("tensors", ctypes.c_uint64),
        ("elements", ctypes.c_uint64),
        ("predicted_end_us", ctypes.c_int64),
        ("measured_end_us", ctypes.c_uint64),
        ("measured_end_sum_us", ctypes.c_uint64),
        ("checks", ctypes.c_uint64),
        ("predicted_ready_us", ctypes.c_int64),
        ("measured_ready_us", ctypes.c_uint64),
        ("measured_ready_sum_us", ctypes.c_uint64),
    ]


class MgsStats(ctypes.Structure):
    """mgs_stats_t. Fields are only ever appended in the header; a library that
    predates a field leaves it untouched (see Library.stats)."""

    _fields_ = [
        ("negotiation_cycles", ctypes.c_uint64),
        ("negotiation_fast_cycles", ctypes.c_uint64),
        ("negotiation_slow_cycles", ctypes.c_uint64),
        ("negotiation_seconds", ctypes.c_double),
        ("ops_completed", ctypes.c_uint64),
        ("bytes_reduced", ctypes.c_uint64),
        ("sparse_steps", ctypes.c_uint64),
        ("sparse_buckets", ctypes.c_uint64),
        ("sparse_dense_buckets", ctypes.c_uint64),
        ("sparse_selected", ctypes.c_uint64),
        ("sparse_target", ctypes.c_uint64),
        ("sparse_bytes_sent", ctypes.c_uint64),
        ("sparse_dense_bytes", ctypes.c_uint64),
        ("plan_buckets", ctypes.c_uint64),
        ("plans", ctypes.c_uint64),
        ("name_cache_entries", ctypes.c_uint64),
        ("idle_cycles", ctypes.c_uint64),
        ("sparse_agreed_buckets", ctypes.c_uint64),
        ("sparse_in_flight_max", ctypes.c_uint64),
        ("plan_trials", ctypes.c_uint64),
        ("path_host_buckets", ctypes.c_uint64),
        ("path_staged_buckets", ctypes.c_uint64),
        ("path_resident_buckets", ctypes.c_uint64),
        ("path_device_buckets", ctypes.c_uint64),
        ("path_host_bytes", ctypes.c_uint64),
        ("path_staged_bytes", ctypes.c_uint64),
        ("path_resident_bytes", ctypes.c_uint64),
        ("path_device_bytes", ctypes.c_uint64),
        ("cuda_nccl_ops", ctypes.c_uint64),
        ("cuda_staged_ops", ctypes.c_uint64),
        ("device_host_syncs", ctypes.c_uint64),
        ("plan_span_checks", ctypes.c_uint64),
        ("plan_span_predicted_us", ctypes.c_uint64),
        ("plan_span_measured_us", ctypes.c_uint64),
        ("set_sparse_buckets", ctypes.c_uint64),
        ("set_sparse_bytes_sent", ctypes.c_uint64),
        ("sparse_warmup_steps", ctypes.c_uint64),
        ("plan_span_plan_checks", ctypes.c_uint64),
        ("plan_span_predicted_sum_us", ctypes.c_uint64),
        ("plan_span_measured_sum_us", ctypes.c_uint64),
        ("allreduce_ring_ops", ctypes.c_uint64),
        ("allreduce_library_ops", ctypes.c_uint64),
        ("allreduce_ring_min_bytes", ctypes.c_uint64),
        ("sparse_hierarchical_buckets", ctypes.c_uint64),
        ("plan_replans_rejected", ctypes.c_uint64),
        ("plan_span_predicted_total_us", ctypes.c_uint64),
        ("plan_span_measured_total_us", ctypes.c_uint64),
        ("fusion_threshold_bytes", ctypes.c_uint64),
        ("fusion_trials", ctypes.c_uint64),
        ("fusion_max_tensor_bytes", ctypes.c_uint64),
        ("plan_round_us", ctypes.c_uint64),
        ("plan_rounds_timed", ctypes.c_uint64),
        ("plan_trial_running", ctypes.c_uint64),
    ]


class MgsError(Exception):
    """Base of every error raised from an mgs status; `status` is the code's name."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class MgsValueError(MgsError, ValueError):
    """Bad use of the API: not initialised, duplicate name, invalid argument."""


class MgsRuntimeError(MgsError, RuntimeError):
    """An operation that failed in the runtime (mismatch across ranks, MPI, timeout...)."""


class MgsUnsupportedError(MgsError, RuntimeError):
    """An operation mgs refuses by design, as Horovod does (a RuntimeError there too), e.g. reducescatter
    with an op other than Sum or Average."""


def candidate_paths():
    """Where the loader looks for libmgs, in order (see the module docstring)."""
    env = os.environ.get("MGS_LIBRARY")
    if env:
        return [Path(env)]
    pkg = Path(__file__).resolve().parent
    repo = pkg.parent.parent.parent  # bindings/python/mgs -> repository root
    return [pkg / _LIB_FILE, repo / "build" / "src" / "capi" / _LIB_FILE]


def _declare(lib):
    c_int, c_int32, c_uint32, c_uint64 = ctypes.c_int, ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64
    c_double, c_char_p = ctypes.c_double, ctypes.c_char_p
    p_tensor = ctypes.POINTER(MgsTensor)
    p_handle = ctypes.POINTER(c_uint64)
    p_int = ctypes.POINTER(c_int)
    sigs = {
        "mgs_status_string": (c_char_p, [c_int]),
        "mgs_last_error": (c_char_p, []),
        "mgs_dtype_size": (ctypes.c_size_t, [c_int]),
        "mgs_init": (c_int, []),
        "mgs_shutdown": (c_int, []),
        "mgs_is_initialized": (c_int, []),
        "mgs_rank": (c_int, [p_int]),
        "mgs_size": (c_int, [p_int]),
        "mgs_local_rank": (c_int, [p_int]),
        "mgs_local_size": (c_int, [p_int]),
        "mgs_allreduce_async": (
            c_int, [c_char_p, p_tensor, p_tensor, c_int, c_double, c_double, c_uint32, p_handle]),
        "mgs_allgather_async": (c_int, [c_char_p, p_tensor, p_handle]),
        "mgs_allgather_output_shape": (
            c_int, [c_uint64, ctypes.POINTER(c_int32), ctypes.POINTER(ctypes.c_int64)]),
        "mgs_allgather_rank_sizes": (c_int, [c_uint64, ctypes.POINTER(ctypes.c_int64)]),
        "mgs_allgather_copy_output": (c_int, [c_uint64, p_tensor]),
        "mgs_broadcast_async": (c_int, [c_char_p, p_tensor, c_int, p_handle]),
        "mgs_barrier": (c_int, []),
        "mgs_poll": (c_int, [c_uint64, p_int]),
        "mgs_wait": (c_int, [c_uint64]),
        "mgs_handle_error": (c_char_p, [c_uint64]),
        "mgs_release": (c_int, [c_uint64]),
        "mgs_version": (c_char_p, []),
        "mgs_built_with_cuda": (c_int, []),
        "mgs_built_with_nccl": (c_int, []),
    }
    p_float = ctypes.c_void_p  # float*: an address (int or c_void_p), as the tests and adapters pass it
    optional = {  # newer entry points: the bindings work without them
        "mgs_get_stats": (c_int, [ctypes.POINTER(MgsStats), ctypes.c_size_t]),
        "mgs_get_plan_buckets": (
            c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
        "mgs_nccl_version": (c_int, []),
        # process sets, alltoall, reducescatter, join
        "mgs_allreduce_ps_async": (
            c_int, [c_char_p, p_tensor, p_tensor, c_int, c_double, c_double, c_uint32, c_int32, p_handle]),
        "mgs_allgather_ps_async": (c_int, [c_char_p, p_tensor, c_int32, p_handle]),
        "mgs_broadcast_ps_async": (c_int, [c_char_p, p_tensor, c_int, c_int32, p_handle]),
        "mgs_barrier_ps": (c_int, [c_int32]),
        "mgs_alltoall_async": (c_int, [c_char_p, p_tensor, ctypes.POINTER(ctypes.c_int64), c_int32, p_handle]),
        "mgs_reducescatter_async": (
            c_int, [c_char_p, p_tensor, p_tensor, c_int, c_double, c_double, c_int32, p_handle]),
        "mgs_process_set_add": (c_int, [ctypes.POINTER(c_int32), c_int32, ctypes.POINTER(c_int32)]),
        "mgs_process_set_remove": (c_int, [c_int32]),
        "mgs_process_set_size": (c_int, [c_int32, ctypes.POINTER(c_int32)]),
        "mgs_process_set_rank": (c_int, [c_int32, ctypes.POINTER(c_int32)]),
        "mgs_process_set_ranks": (c_int, [c_int32, ctypes.POINTER(c_int32)]),
        "mgs_join": (c_int, [ctypes.POINTER(c_int32)]),
        "mgs_residual_copy": (c_int, [c_char_p, p_float, ctypes.c_size_t]),
        "mgs_residual_restore": (c_int, [c_char_p, p_float, ctypes.c_size_t]),
        "mgs_sparse_state_copy": (c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
        "mgs_sparse_state_restore": (c_int, [ctypes.c_void_p, ctypes.c_size_t]),
    }
    for name, (restype, argtypes) in list(sigs.items()) + list(optional.items()):
        try:
            fn = getattr(lib, name)
        except AttributeError:
            if name in optional:
                continue
            raise
        fn.restype = restype
        fn.argtypes = argtypes


class Library:
    """The loaded library plus the status table read from it."""

    def __init__(self, path):
        self.path = str(path)
        # RTLD_GLOBAL: Open MPI loads its components with dlopen and they must
        # resolve symbols of libmpi, which libmgs pulls in.
        self.cdll = ctypes.CDLL(self.path, mode=ctypes.RTLD_GLOBAL)
        _declare(self.cdll)
        self.status_names = self._read_status_names()
        self.status_codes = {name: code for code, name in self.status_names.items()}
        for dtype, size in _abi.DTYPE_SIZES.items():
            got = self.cdll.mgs_dtype_size(dtype)
            if got != size:
                raise ImportError(f"{self.path}: mgs_dtype_size({dtype}) is {got}, the bindings expect {size}; "
                                  "the library and the Python package are from different versions")

    def _read_status_names(self):
        names = {}
        for code in range(64):
            name = self.cdll.mgs_status_string(code).decode()
            if name.startswith("MGS_ERR_UNKNOWN"):
                break
            names[code] = name
        if names.get(0) != "MGS_SUCCESS":
            raise ImportError(f"{self.path} does not look like libmgs (status 0 is {names.get(0)!r})")
        return names

    def stats(self):
        """This rank's runtime counters as a dict, or None if the library has no mgs_get_stats.

        Fields the library does not know (it is older than these bindings) are left out:
        the struct is filled with 0xFF bytes first, and a field still all 0xFF was not written.
        """
        fn = getattr(self.cdll, "mgs_get_stats", None)
        if fn is None:
            return None
        raw = MgsStats()
        ctypes.memset(ctypes.byref(raw), 0xFF, ctypes.sizeof(raw))
        self.check(fn(ctypes.byref(raw), ctypes.sizeof(raw)))
        out = {}
        for name, ctype in MgsStats._fields_:
            field = getattr(MgsStats, name)
            chunk = ctypes.string_at(ctypes.addressof(raw) + field.offset, field.size)
            if chunk != b"\xff" * field.size:
                out[name] = getattr(raw, name)
        return out

    def plan_buckets(self):
        """The merge plan's buckets in backward order, each a dict of mgs_plan_bucket_t's fields
        (predicted against measured ready time and end, microseconds from the step's first gradient); [] while
        the job profiles; None if the library has no mgs_get_plan_buckets."""
        fn = getattr(self.cdll, "mgs_get_plan_buckets", None)
        if fn is None:
            return None
        count = ctypes.c_size_t(0)
        self.check(fn(None, 0, ctypes.sizeof(MgsPlanBucket), ctypes.byref(count)))
        while True:
            room = count.value
            arr = (MgsPlanBucket * max(room, 1))()
            self.check(fn(arr, room, ctypes.sizeof(MgsPlanBucket), ctypes.byref(count)))
            if count.value <= room:  # the plan may have changed between the two calls
                return [{name: getattr(arr[i], name) for name, _ in MgsPlanBucket._fields_}
                        for i in range(count.value)]

    def __getattr__(self, name):
        return getattr(self.cdll, name)

    def code(self, name):
        """The numeric value of a status, by its name in the header (e.g. "MGS_ERR_MISMATCH")."""
        return self.status_codes[name]

    def last_error(self):
        return self.cdll.mgs_last_error().decode(errors="replace")

    def error(self, status, message, at_enqueue):
        """The Python exception for a failed status, following Horovod's conventions."""
        name = self.status_names.get(status, f"status {status}")
        if not message:
            message = name
        if name == "MGS_ERR_NOT_INITIALIZED":
            return MgsValueError(f"mgs has not been initialized or was shut down; call init() (mgs.torch.init() "
                                 f"or mgs.tensorflow.init()) before this call ({message})", name)
        # MGS_ERR_SHUTDOWN: another rank stopped the job; the message names it and why.
        if name in ("MGS_ERR_DUPLICATE_NAME", "MGS_ERR_INVALID_ARGUMENT"):
            return MgsValueError(message, name)
        return MgsRuntimeError(message, name)

    def check(self, status):
        """Raise for a non-zero status of a synchronous call, with mgs_last_error()'s message."""
        if status != 0:
            raise self.error(status, self.last_error(), at_enqueue=True)


_lock = threading.Lock()
_library = None


def loaded():
    """The Library if it was loaded already, else None (never loads it)."""
    return _library


def lib():
    """The process's Library, loaded on first use."""
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            tried = []
            for path in candidate_paths():
                if path.exists():
                    _library = Library(path)
                    break
                tried.append(str(path))
            else:
                hint = ("MGS_LIBRARY is set to a path that does not exist"
                        if os.environ.get("MGS_LIBRARY") else
                        "build it (cmake --build build --target mgs), reinstall the package, "
                        "or point MGS_LIBRARY at libmgs.so")
                raise ImportError(f"cannot find {_LIB_FILE}; looked in: {', '.join(tried)}; {hint}")
    return _library
