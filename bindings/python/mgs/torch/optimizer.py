"""DistributedOptimizer: wait-free backpropagation over mgs (Horovod's semantics).

A hook on each parameter's gradient accumulator enqueues that gradient's
allreduce the moment backward has produced it, so communication overlaps the
rest of backward; step() waits for all of them and then runs the wrapped
optimizer. Gradients are enqueued with MGS_FLAG_SPARSE_OK: with
MGS_COMPRESSOR other than "none" the runtime sparsifies and merges them.
"""

import contextlib
import os
import threading
import warnings

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


class _DistributedOptimizer:
    """Mixed in before the wrapped optimizer's class; see DistributedOptimizer()."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, sparse):
        super().__init__(params)
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

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # No gradient on this rank (e.g. an unused head): other ranks may have one, so
            # take part with zeros; skipping would leave them waiting for this name.
            p.grad = torch.zeros_like(p)
        sent, ctx = self._compression.compress(p.grad)
        if self._op == mpi_ops.Average:
            # Average divides by size() in the runtime; the predivide factor splits it.
            pre, post = 1.0 / self._predivide, self._predivide
        else:
            pre, post = 1.0, 1.0
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
        error = None
        for p, (handle, ctx, _) in self._handles.items():
            try:
                output = mpi_ops.synchronize(handle)
                if output is not p.grad:
                    p.grad.set_(self._compression.decompress(output, ctx))
            except Exception as e:  # noqa: BLE001 - wait for all (they use live buffers), then raise
                error = error or e
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        self._synchronized = True
        _stats.add_step()
        if error is not None:
            raise error

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
                         sparse=True):
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
    sparse: enqueue gradients with MGS_FLAG_SPARSE_OK, so they are sparsified when
        MGS_COMPRESSOR is not "none" (the default compressor is exact and dense).
    """
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
    if op not in (mpi_ops.Sum, mpi_ops.Average):
        raise ValueError(f"op must be mgs.torch.Average or mgs.torch.Sum, got {op!r}")
    if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
        raise ValueError("gradient_predivide_factor needs op=Average")
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base), {})
    wrapped = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
                  gradient_predivide_factor, sparse)
    if optimizer.state:
        wrapped.load_state_dict(optimizer.state_dict())
    return wrapped
