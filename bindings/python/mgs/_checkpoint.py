"""Checking a saved error-feedback state before it is loaded, shared by mgs.torch and mgs.tensorflow.

A saved state (one rank's) is a dict: "version", "rank", "world_size",
"settings" (the SPARSE_SETTINGS set at init), "residuals" (this rank's
residual of each sparsified gradient, float32, by the adapter's name for the
tensor) and "sparse_state" (mgs_sparse_state_copy's bytes, as a uint8 tensor
or array). How the tensors are held, and what the messages call things, is the
adapter's; the rules are the same for both and live here, with no framework
imported. The check is local (no collective): a rank holding a bad state
raises at once, and no rank waits for it.
"""

import math
import warnings

from . import _lib
from . import _runtime

# The layout's version, written into every saved state.
VERSION = 1


class Wording:
    """How an adapter's messages name its API and its objects.

    api: the call being checked, e.g. "DistributedOptimizer.load_state_dict()".
    container: what holds the state, after "this"/"the" ("state_dict").
    entry: the state itself, as a subject ("the 'mgs' entry").
    kind: what its tensors are ("tensor", "array"): "not a uint8 <kind>".
    owner: what a residual's name must be ("a parameter of this optimizer with a dense gradient").
    owners: how the list of known names is introduced ("its parameters").
    unknown_hint: said after an unknown name ("was it saved from another model ...?").
    target: what a residual's shape must match ("the parameter").
    drop_hint: how to start from zero instead ("drop the 'mgs' entry to start the residuals from zero").
    """

    def __init__(self, api, container, entry, kind, owner, owners, unknown_hint, target, drop_hint):
        self.api, self.container, self.entry, self.kind = api, container, entry, kind
        self.owner, self.owners, self.unknown_hint = owner, owners, unknown_hint
        self.target, self.drop_hint = target, drop_hint


def running():
    """(rank, world size) of the running runtime, or None when it is not running (before init, after shutdown)."""
    try:
        return _runtime.rank(), _runtime.world_size()
    except _lib.MgsValueError:
        return None


def header():
    """The saved state's fields other than "residuals" and "sparse_state" (mgs running)."""
    rank, size = _runtime.rank(), _runtime.world_size()
    return {"version": VERSION, "rank": rank, "world_size": size, "settings": _runtime.init_settings()}


def check(saved, wording, known, float32, blob_ok, stacklevel=2):
    """ValueError, naming this rank and the tensor, if `saved` cannot be this rank's state in this job.

    known: {name: shape tuple} of the tensors that may have a residual.
    float32(t): None if t is a float32 tensor of the adapter's kind, else what t is (for the message).
    blob_ok(blob): whether the "sparse_state" entry is bytes of the adapter's kind.
    Settings that differ from the saved ones only warn (RuntimeWarning, at `stacklevel` above the caller).
    """
    w = wording
    try:
        rank, size = _runtime.rank(), _runtime.world_size()
    except _lib.MgsValueError as e:
        raise ValueError(f"{w.api}: the {w.container} holds error-feedback residuals, which need mgs running: "
                         "call init() before loading it") from e
    where = f"{w.api} on rank {rank}"
    if not isinstance(saved, dict) or saved.get("version") != VERSION:
        version = saved.get("version") if isinstance(saved, dict) else None
        raise ValueError(f"{where}: {w.entry} is not an mgs checkpoint of version {VERSION} (version {version!r})")
    residuals = saved.get("residuals")
    if not isinstance(residuals, dict):
        raise ValueError(f"{where}: {w.entry} has no 'residuals' dict")
    if not blob_ok(saved.get("sparse_state")):
        raise ValueError(f"{where}: {w.entry}'s 'sparse_state' is not a uint8 {w.kind}")
    # Without residuals (a dense job's state) nothing in it is one rank's own: any rank of a job of any
    # size may load it (Horovod's pattern: every rank loads rank 0's file).
    if residuals and saved.get("world_size") != size:
        raise ValueError(f"{where}: the error-feedback residuals in this {w.container} were saved by a job of "
                         f"{saved.get('world_size')} ranks; this job has {size}. Residuals are per rank and "
                         f"cannot be redistributed: resume with the same number of ranks, or {w.drop_hint}")
    if residuals and saved.get("rank") != rank:
        raise ValueError(f"{where}: this {w.container} holds the error-feedback residuals of rank "
                         f"{saved.get('rank')}; every rank must load the state it saved itself (one file per "
                         "rank), or another rank's unsent gradient would be sent twice")
    for name, t in residuals.items():
        shape = known.get(name)
        if shape is None:
            names = sorted(known)
            listed = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            raise ValueError(f"{where}: the {w.container} holds a residual for tensor '{name}', which is not "
                             f"{w.owner} ({w.owners}: {listed}); {w.unknown_hint}")
        what = float32(t)
        if what is not None:
            raise ValueError(f"{where}: tensor '{name}': the saved residual is {what}, not a float32 {w.kind}")
        got = tuple(int(d) for d in t.shape)
        if got != tuple(shape):
            raise ValueError(f"{where}: tensor '{name}': the saved residual has shape {list(got)} "
                             f"({math.prod(got)} elements) but {w.target} has shape {list(shape)} "
                             f"({math.prod(shape)} elements)")
    ours = _runtime.init_settings()
    theirs = saved.get("settings") or {}
    differ = [f"{k}={theirs.get(k, '(unset)')} then, {ours.get(k, '(unset)')} now"
              for k in _runtime.SPARSE_SETTINGS if theirs.get(k) != ours.get(k)]
    if differ:
        warnings.warn(f"{where}: the checkpoint was saved with other sparse settings ({'; '.join(differ)}): "
                      "the residuals are restored, but the run does not continue as it would have",
                      RuntimeWarning, stacklevel=stacklevel + 1)


def compressor_set():
    """True if the running runtime was started with a compressor (so residuals can exist)."""
    return (_runtime.init_settings().get("MGS_COMPRESSOR") or "none") != "none"


def restore_sparse_state(saved, data):
    """Restore the runtime's sparse progress `data` (bytes) of a checked `saved` state.

    A state without residuals may come from a job of another size: its counters do not apply then.
    """
    if saved.get("world_size") == _runtime.world_size():
        _runtime.restore_sparse_state(data)
