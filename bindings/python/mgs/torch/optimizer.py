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
from . import mpi_ops
from .compression import Compression

# ------------------------------------------------------------ compression stats --


class _Stats:
    """Gradient traffic seen by DistributedOptimizers in this process.

    The runtime has no statistics ABI yet, so this counts what Python hands to
    it: exact for MGS_COMPRESSOR=none (every element is sent), unknown for a
    sparsifying compressor (reported as None).
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
            return {
                "compressor": compressor,
                "density": 1.0 if dense else float(os.environ.get("MGS_DENSITY", "0.001")),
                "steps": self.steps,
                "tensors_per_step": self.tensors / steps,
                "elements_per_step": self.elements / steps,
                "dense_bytes_per_step": self.dense_bytes / steps,
                # what this rank handed to the runtime (after Compression.fp16, if used)
                "sent_bytes_per_step": self.sent_bytes / steps if dense else None,
                "compression_ratio": (self.dense_bytes / self.sent_bytes if dense and self.sent_bytes else None),
                # mean over steps of (selected elements / k); every element is selected in dense mode
                "selected_over_k": 1.0 if dense else None,
                "source": "python (dense: exact)" if dense else "unavailable: libmgs has no statistics ABI",
            }


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
