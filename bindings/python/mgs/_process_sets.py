"""Process sets with Horovod's API (ProcessSet, global_process_set, add_process_set, remove_process_set).

A process set is a subset of the ranks that runs collectives among itself:
pass it as `process_set=` to any collective (and to DistributedOptimizer).
Adding and removing sets is collective over every rank; the runtime gives
every rank the same id. mgs needs no HOROVOD_DYNAMIC_PROCESS_SETS: sets may
be added and removed at any time after init(), or given to init().
"""

import threading

from . import _runtime


class ProcessSet:
    """A set of ranks that run collectives together; give it to add_process_set() or init(process_sets=...)."""

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError("mgs builds a ProcessSet from a list of ranks; an MPI communicator cannot be "
                             "given") from None
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError(f"a ProcessSet needs a list of integer ranks, got {ranks_or_comm!r}")
        self.ranks = ranks
        self.process_set_id = None
        self.mpi_comm = None

    def _require_id(self):
        if self.process_set_id is None:
            raise ValueError(f"{self} is not registered: add it with add_process_set() (or give it to init()), "
                             "or it was removed")
        return self.process_set_id

    def size(self):
        """The number of ranks in the set."""
        self._require_id()
        return _runtime.size() if self.process_set_id == 0 else len(self.ranks)

    def rank(self):
        """This rank's index in the set, or -1 if it is not in it."""
        self._require_id()
        me = _runtime.rank()
        if self.process_set_id == 0:
            return me
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        """True if this rank is in the set."""
        return self.rank() >= 0

    def invalidate(self):
        self.process_set_id = None

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

_lock = threading.Lock()
_by_id = {0: [global_process_set]}  # id -> every ProcessSet object registered with it


def init(adapter, comm=None, process_sets=None):
    """The adapters' init(): start the runtime (a no-op if it runs) and, on a start, register
    `process_sets` in order on every rank ("dynamic", Horovod's switch, changes nothing)."""
    if _runtime.is_initialized():
        _runtime.init(adapter, comm)
        return
    _runtime.init(adapter, comm)
    on_init(_runtime.size())
    if process_sets is not None and process_sets != "dynamic":
        for ps in process_sets:
            add_process_set(ps)


def on_init(size):
    """After a (re)start of the runtime: only the global set exists, over `size` ranks."""
    with _lock:
        for sid, sets in _by_id.items():
            if sid != 0:
                for ps in sets:
                    ps.invalidate()
        _by_id.clear()
        _by_id[0] = [global_process_set]
    global_process_set.ranks = list(range(size))


def add_process_set(process_set):
    """Add a process set (a ProcessSet or a list of ranks) on every rank; returns the registered ProcessSet.

    Collective: every rank calls it, with the same ranks, in the same order as its
    other add/remove calls. Adding a set with the ranks of an existing one fails.
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"{process_set} is registered already")
    sid = _runtime.add_process_set(process_set.ranks)
    process_set.process_set_id = sid
    with _lock:
        _by_id.setdefault(sid, []).append(process_set)
    return process_set


def remove_process_set(process_set):
    """Remove a process set on every rank (collective); False for the global set or an unregistered one.

    Raises if some rank still has an operation of the set that has not run: the
    set stays registered on every rank then.
    """
    sid = process_set.process_set_id
    if sid is None or sid == 0:
        return False
    _runtime.remove_process_set(sid)
    with _lock:
        for ps in _by_id.pop(sid, [process_set]):
            ps.invalidate()
    process_set.invalidate()
    return True


def process_set_id(process_set):
    """The runtime id of `process_set` (a ProcessSet, or None for the global set)."""
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set must be a ProcessSet (e.g. from add_process_set()), got {process_set!r}")
    return process_set._require_id()


def set_size(sid):
    """Ranks in the set with id `sid` (the world for 0), as known on this rank."""
    if sid == 0:
        return _runtime.world_size()
    with _lock:
        sets = _by_id.get(sid)
    return len(sets[0].ranks) if sets else len(_runtime.process_set_ranks(sid))
