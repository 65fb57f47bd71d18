"""DistributedOptimizer: wait-free backpropagation over mgs (Horovod's semantics).

A hook on each parameter's gradient accumulator enqueues that gradient's
allreduce the moment backward has produced it, so communication overlaps the
rest of backward; step() waits for all of them and then runs the wrapped
optimizer. Gradients are enqueued with MGS_FLAG_SPARSE_OK: with
MGS_COMPRESSOR other than "none" the runtime sparsifies and merges them.
"""

import contextlib
import itertools
import os
import threading
import warnings
import weakref

import torch

from .. import _abi
from .. import _lib
from . import mpi_ops
from .compression import Compression

# ------------------------------------------------------------ compression stats --


_SPARSE_FIELDS = ("sparse_steps", "sparse_buckets", "sparse_dense_buckets", "sparse_selected", "sparse_target",
                  "sparse_bytes_sent", "sparse_dense_bytes")


def _runtime_sparse_counters():
    """The runtime's cumulative sparse-pipeline counters, or None if this libmgs does not report them."""
    if _lib.loaded() is None:
        return None
    try:
        # Not is_initialized(): the counters stay readable after a (negotiated) shutdown.
        stats = _lib.lib().stats()
    except _lib.MgsError:
        return None
    if stats is None or any(f not in stats for f in _SPARSE_FIELDS):
        return None
    return {f: stats[f] for f in _SPARSE_FIELDS}


class _Stats:
    """Gradient traffic of this rank's DistributedOptimizers since the last reset.

    Dense (MGS_COMPRESSOR=none): counted here from the tensors handed to the
    runtime; exact. Sparse: taken from the runtime's counters (mgs_get_stats),
    as differences since the last reset; None where the library has none.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self):
        with self._lock:
            self.steps = 0
            self.tensors = 0
            self.elements = 0
            self.dense_bytes = 0
            self.sent_bytes = 0
            self.baseline = _runtime_sparse_counters()

    def add_tensor(self, grad, sent):
        with self._lock:
            self.tensors += 1
            self.elements += grad.numel()
            self.dense_bytes += grad.numel() * grad.element_size()
            self.sent_bytes += sent.numel() * sent.element_size()

    def add_step(self):
        with self._lock:
            self.steps += 1

    def snapshot(self):
        compressor = os.environ.get("MGS_COMPRESSOR", "none") or "none"
        dense = compressor == "none"
        with self._lock:
            steps = max(self.steps, 1)
            out = {
                "compressor": compressor,
                "density": 1.0 if dense else float(os.environ.get("MGS_DENSITY", "0.001")),
                "steps": self.steps,
                "tensors_per_step": self.tensors / steps,
                "elements_per_step": self.elements / steps,
                # bytes of the gradients as produced (before Compression.fp16 / sparsification)
                "dense_bytes_per_step": self.dense_bytes / steps,
                # bytes this rank handed over for the exchange
                "sent_bytes_per_step": self.sent_bytes / steps,
                "compression_ratio": self.dense_bytes / self.sent_bytes if self.sent_bytes else None,
                # mean of selected entries / k; every entry is sent in dense mode
                "selected_over_k": 1.0,
                "sparse_buckets_per_step": 0.0,
                "dense_buckets_per_step": None,
                "source": "python (dense: exact)",
            }
            if dense:
                return out
            now = _runtime_sparse_counters()
            if now is None:
                out.update(sent_bytes_per_step=None, compression_ratio=None, selected_over_k=None,
                           source="unavailable: this libmgs does not report sparse statistics")
                return out
            base = self.baseline or {f: 0 for f in _SPARSE_FIELDS}
            d = {f: now[f] - base[f] for f in _SPARSE_FIELDS}
        out.update(
            sent_bytes_per_step=d["sparse_bytes_sent"] / steps,
            dense_bytes_per_step=d["sparse_dense_bytes"] / steps,
            compression_ratio=d["sparse_dense_bytes"] / d["sparse_bytes_sent"] if d["sparse_bytes_sent"] else None,
            selected_over_k=d["sparse_selected"] / d["sparse_target"] if d["sparse_target"] else None,
            sparse_buckets_per_step=d["sparse_buckets"] / steps,
            dense_buckets_per_step=d["sparse_dense_buckets"] / steps,
            source="runtime (mgs_get_stats)")
        return out


_stats = _Stats()


def compression_stats():
    """Per-step gradient traffic of this rank's DistributedOptimizers (a dict; see docs/pytorch.md)."""
    return _stats.snapshot()


def reset_compression_stats():
    _stats.reset()


# ---------------------------------------------------------------- optimizer --

# Live DistributedOptimizers by id (ids count up in creation order, the same on
# every rank): join() takes part in their steps for a rank that ran out of data.
_live = weakref.WeakValueDictionary()
_ids = itertools.count()
# Every step's join exchange (an allgather of one int64 per rank) carries the id
# of the optimizer stepping (>= 0) from training ranks, or one of these.
_JOINED, _JOINING = -1, -2
_JOIN_NAME = "mgs.join"


def _join_exchange(state):
    """Every rank's join state (a list in rank order)."""
    return mpi_ops.synchronize(
        mpi_ops.allgather_async(torch.tensor([state], dtype=torch.int64), name=_JOIN_NAME)).tolist()


def join(device=-1):
    """Horovod's join(): call when this rank has no more data; returns the rank that joined last.

    Until every rank has joined, this rank takes part in the other ranks'
    DistributedOptimizer steps with zero gradients, so their allreduces
    complete; with op=Average the zeros count in the average, as in Horovod.
    Only DistributedOptimizer steps are covered: another collective issued by a
    rank still training waits for this rank. `device` is accepted for Horovod
    compatibility (mgs needs none here).
    """
    del device
    state = _JOINING
    while True:
        states = _join_exchange(state)
        training = [s for s in states if s >= 0]
        if not training:
            return max(r for r, s in enumerate(states) if s == _JOINING)
        state = _JOINED
        opt = _live.get(training[0])
        if opt is None or any(s != training[0] for s in training):
            raise RuntimeError(f"mgs.torch.join() on rank {mpi_ops.rank()}: the ranks still training step "
                               f"optimizers {sorted(set(training))}, which this rank "
                               + ("does not have" if opt is None else "cannot mirror together"))
        opt._zero_step()


class _DistributedOptimizer:
    """Mixed in before the wrapped optimizer's class; see DistributedOptimizer()."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, sparse, sparse_as_dense):
        super().__init__(params)
        self._sparse_as_dense = sparse_as_dense
        self._sparse_grads = set()  # params whose last gradient was a sparse tensor (nn.Embedding(sparse=True))
        self._id = next(_ids)
        _live[self._id] = self
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self._flags = _abi.MGS_FLAG_SPARSE_OK if sparse else _abi.MGS_FLAG_NONE
        self.backward_passes_per_step = backward_passes_per_step
        self._parameter_names = self._name_parameters(named_parameters)
        self._handles = {}          # param -> (handle or None, compression ctx, sent tensor)
        self._allreduce_delay = {}  # param -> backward passes still to accumulate before the allreduce
        self._requires_update = []  # params with requires_grad, in param_groups order
        self._hook_handles = []
        self._grad_accs = []        # keeps the gradient accumulators (and their hooks) alive
        self._synchronized = False
        self._should_synchronize = True
        self._register_hooks()

    def _name_parameters(self, named_parameters):
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is None:
            return {p: f"noname.{i}" for i, p in enumerate(all_params)}
        named = list(named_parameters)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
            raise ValueError("named_parameters must be (name, parameter) pairs, "
                             "e.g. model.named_parameters()")
        names = [n for n, _ in named]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"named_parameters contains duplicate names: {', '.join(dups)}")
        by_param = {p: n for n, p in named}
        unnamed = [i for i, p in enumerate(all_params) if p not in by_param]
        if unnamed:
            raise ValueError("named_parameters was given but does not name every parameter of the "
                             f"optimizer (positions {unnamed} in param_groups order)")
        return by_param

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._requires_update.append(p)
                self._allreduce_delay[p] = self.backward_passes_per_step
                if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                    self._hook_handles.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))
                else:
                    # The AccumulateGrad node of p: its hooks run after p.grad was updated.
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    self._hook_handles.append(grad_acc.register_hook(self._make_hook(p)))
                    self._grad_accs.append(grad_acc)

    def _make_hook(self, p):
        def hook(*_):
            entry = self._handles.get(p)
            if entry is not None and entry[0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "gradients were computed more than backward_passes_per_step times before step(); "
                    "increase backward_passes_per_step to accumulate gradients locally")
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                self._handles[p] = self._allreduce_grad_async(p)
            else:
                self._handles[p] = (None, None, None)
        return hook

    def _scales(self):
        if self._op == mpi_ops.Average:
            # Average divides by size() in the runtime; the predivide factor splits it.
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # No gradient on this rank (e.g. an unused head): other ranks may have one, so
            # take part with zeros; skipping would leave them waiting for this name.
            if p in self._sparse_grads:
                p.grad = torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.int64),
                                                 torch.zeros((0,) + tuple(p.shape[1:]), dtype=p.dtype), p.shape)
            else:
                p.grad = torch.zeros_like(p)
        pre, post = self._scales()
        if p.grad.is_sparse:
            if self._sparse_as_dense:
                p.grad = p.grad.to_dense()
            else:
                # Horovod's sparse allreduce (allgather of indices and values); the dense
                # compressors and MGS_COMPRESSOR do not apply to it.
                self._sparse_grads.add(p)
                handle = mpi_ops.sparse_allreduce_async(p.grad, f"grad.{self._parameter_names[p]}", self._op,
                                                        pre, post)
                values = p.grad.coalesce().values()
                _stats.add_tensor(values, values)
                return handle, "sparse", None
        sent, ctx = self._compression.compress(p.grad)
        handle = mpi_ops._allreduce_async(sent, sent, f"allreduce.{self._parameter_names[p]}", self._op,
                                          pre, post, self._flags)
        _stats.add_tensor(p.grad, sent)
        return handle, ctx, sent

    def synchronize(self):
        """Wait for every gradient's allreduce (enqueueing those not yet started) and set p.grad."""
        for p in self._requires_update:
            entry = self._handles.get(p)
            if entry is None or entry[0] is None:
                self._handles[p] = self._allreduce_grad_async(p)
        # This step's join exchange: a rank in join() takes part in the step when it sees it.
        join_handle = mpi_ops.allgather_async(torch.tensor([self._id], dtype=torch.int64), name=_JOIN_NAME)
        error = None
        for p, (handle, ctx, _) in self._handles.items():
            try:
                output = mpi_ops.synchronize(handle)
                if isinstance(ctx, str) and ctx == "sparse":
                    p.grad = output
                elif output is not p.grad:
                    p.grad.set_(self._compression.decompress(output, ctx))
            except Exception as e:  # noqa: BLE001 - wait for all (they use live buffers), then raise
                error = error or e
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        self._synchronized = True
        _stats.add_step()
        try:
            mpi_ops.synchronize(join_handle)
        except Exception as e:  # noqa: BLE001
            error = error or e
        if error is not None:
            raise error

    def _zero_step(self):
        """One step's allreduces with zero gradients, for a rank in join(); the results are dropped."""
        saved = {p: p.grad for p in self._requires_update}
        try:
            for p in self._requires_update:
                p.grad = None
            handles = [self._allreduce_grad_async(p)[0] for p in self._requires_update]
            error = None
            for h in handles:
                try:
                    mpi_ops.synchronize(h)
                except Exception as e:  # noqa: BLE001 - wait for all (they use live buffers), then raise
                    error = error or e
            if error is not None:
                raise error
        finally:
            for p, g in saved.items():
                p.grad = g

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within this context step() does not synchronize (call synchronize() yourself first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                              "optimizer.synchronize(): the gradients are reduced again. Use "
                              "'with optimizer.skip_synchronize(): optimizer.step()'.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(); the gradients are still "
                                 "being reduced in place, so this is not allowed")
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=mpi_ops.Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, sparse=True):
    """Wrap a torch optimizer so that step() applies gradients averaged (or summed) over all ranks.

    optimizer: any torch.optim.Optimizer; the result is an instance of the same class
        (built from its param_groups, with its state carried over).
    named_parameters: model.named_parameters(); names make errors and timelines readable and
        must be the same on every rank. Without them parameters are named by position.
    compression: Compression.none or Compression.fp16 (cast applied before mgs).
    backward_passes_per_step: backward passes accumulated locally before the allreduce
        (scale the loss yourself, as with Horovod).
    op: mgs.torch.Average (default) or mgs.torch.Sum.
    gradient_predivide_factor: with op=Average, scale by 1/f before and f/size() after the sum.
    num_groups, groups: Horovod's manual fusion groups. Validated and accepted; mgs forms its
        buckets itself (the merge planner, MGS_PLANNER), so they do not change what is sent.
    sparse_as_dense: reduce sparse gradients (nn.Embedding(sparse=True)) as dense tensors;
        by default they are allgathered as (indices, values), as in Horovod.
    sparse: enqueue gradients with MGS_FLAG_SPARSE_OK, so they are sparsified when
        MGS_COMPRESSOR is not "none" (the default compressor is exact and dense).
    """
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
    if op == mpi_ops.Adasum:
        mpi_ops._resolve_op(op, None)  # the error that explains Adasum
    if op not in (mpi_ops.Sum, mpi_ops.Average):
        raise ValueError(f"DistributedOptimizer needs op=mgs.torch.Average or mgs.torch.Sum, got "
                         f"{mpi_ops._runtime.op_name(op)}")
    _check_groups(optimizer, num_groups, groups)
    if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
        raise ValueError("gradient_predivide_factor needs op=Average")
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base), {})
    wrapped = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
                  gradient_predivide_factor, sparse, sparse_as_dense)
    if optimizer.state:
        wrapped.load_state_dict(optimizer.state_dict())
    return wrapped


def _check_groups(optimizer, num_groups, groups):
    if num_groups and groups is not None:
        raise ValueError("give num_groups or groups, not both")
    if not isinstance(num_groups, int) or num_groups < 0:
        raise ValueError(f"num_groups must be an integer >= 0, got {num_groups!r}")
    if groups is None or isinstance(groups, int):
        if isinstance(groups, int) and groups < 0:
            raise ValueError(f"groups must be >= 0 or a list of parameter lists, got {groups}")
        return
    params = {id(p) for g in optimizer.param_groups for p in g["params"]}
    for i, group in enumerate(groups):
        if not isinstance(group, (list, tuple)) or not all(torch.is_tensor(p) for p in group):
            raise ValueError(f"groups[{i}] must be a list of parameters")
        if any(id(p) not in params for p in group):
            raise ValueError(f"groups[{i}] holds a tensor that is not a parameter of the optimizer")
