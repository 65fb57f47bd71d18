"""DistributedOptimizer: wait-free backpropagation over mgs (Horovod's semantics).

A hook on each parameter's gradient accumulator enqueues that gradient's
allreduce the moment backward has produced it, so communication overlaps the
rest of backward; step() waits for all of them and then runs the wrapped
optimizer. Gradients are enqueued with MGS_FLAG_SPARSE_OK: with
MGS_COMPRESSOR other than "none" the runtime sparsifies and merges them.
"""

import contextlib
import warnings

import torch

from .. import _abi
from .. import _checkpoint
from .. import _lib
from .. import _masking
from .. import _runtime
from . import _dgc
from . import mpi_ops
from ._compression_stats import _stats
from .compression import Compression

# ---------------------------------------------------------------- optimizer --

# state_dict()'s entry for this rank's error-feedback state, and its layout's version.
_CHECKPOINT_KEY = "mgs"
_CHECKPOINT_VERSION = _checkpoint.VERSION
# How load_state_dict()'s errors name things (the checks are mgs._checkpoint's, shared with mgs.tensorflow).
_CHECKPOINT_WORDING = _checkpoint.Wording(
    api="DistributedOptimizer.load_state_dict()", container="state_dict", entry=f"the '{_CHECKPOINT_KEY}' entry",
    kind="tensor", owner="a parameter of this optimizer with a dense gradient", owners="its parameters",
    unknown_hint="was it saved from another model or with other named_parameters?", target="the parameter",
    drop_hint=f"drop the '{_CHECKPOINT_KEY}' entry to start the residuals from zero")


class _DistributedOptimizer:
    """Mixed in before the wrapped optimizer's class; see DistributedOptimizer()."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, sparse, sparse_as_dense, process_set=mpi_ops.global_process_set,
                 momentum_correction=False, momentum_masking=True, local_clip_norm=None, lr_weighting=True):
        super().__init__(params)
        # DGC's rank-local techniques (_dgc.py): velocity before the exchange, and local clipping.
        self._mc = _dgc.MomentumCorrection(momentum_masking, lr_weighting) if momentum_correction else None
        self.momentum_correction = bool(momentum_correction)  # as resolved ("auto": see DistributedOptimizer)
        self._local_clip_norm = local_clip_norm
        self._clip_ready = 0         # parameters whose last backward pass of this step ran (local clipping)
        self._param_group_of = {}    # param -> its param group (momentum correction)
        self._sparse_as_dense = sparse_as_dense
        self._sparse_grads = set()  # params whose last gradient was a sparse tensor (nn.Embedding(sparse=True))
        self._densified = {}        # param -> sparse_dim of its sparse gradient, reduced dense (sparse_as_dense)
        # Gradients are averaged over this process set; a rank outside it steps on its own gradients.
        self._process_set = process_set
        self._set_id = mpi_ops._sid(process_set)
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
            if self._allreduce_delay[p] == 0 and self._local_clip_norm is None:
                self._handles[p] = self._allreduce_grad_async(p)
            else:
                self._handles[p] = (None, None, None)
                if self._allreduce_delay[p] == 0 and self._local_clip_norm is not None:
                    self._clip_ready += 1
                    if self._clip_ready == len(self._requires_update):
                        self._start_clipped()
        return hook

    def _start_clipped(self):
        """Local clipping: the norm needs every gradient of this rank, so the allreduces start when the
        last one is ready (or in synchronize(), for parameters without a gradient), not one by one."""
        pending = [p for p in self._requires_update if self._handles.get(p, (None,))[0] is None]
        if not pending:
            return  # started by the last hook already
        if self._process_set.included():
            # Every gradient is still here (none started), so this is the norm of all of them.
            _dgc.clip_local(pending, self._local_clip_norm, self._process_set.size())
        for p in pending:
            self._handles[p] = self._allreduce_grad_async(p)

    def _scales(self):
        if self._op == mpi_ops.Average:
            # Average divides by size() in the runtime; the predivide factor splits it.
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if not self._process_set.included():
            return None, None, None  # outside the process set: this rank's own gradient is used
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
                self._densified[p] = p.grad.sparse_dim()  # made sparse again after the reduction (SparseAdam)
                p.grad = p.grad.to_dense()
            else:
                # Horovod's sparse allreduce (allgather of indices and values); the dense
                # compressors and MGS_COMPRESSOR do not apply to it.
                if self._mc_group(p) is not None:
                    raise ValueError(f"momentum_correction=True: the gradient of {self._parameter_names[p]} is "
                                     "sparse (nn.Embedding(sparse=True)); pass sparse_as_dense=True")
                self._sparse_grads.add(p)
                handle = mpi_ops.sparse_allreduce_async(p.grad, f"grad.{self._parameter_names[p]}", self._op,
                                                        pre, post, self._process_set)
                values = p.grad.coalesce().values()
                _stats.add_tensor(values, values)
                return handle, "sparse", None
        group = self._mc_group(p)
        if group is not None:
            self._mc.velocity_into_grad(p, group, self._runtime_name(p))
        sent, ctx = self._compression.compress(p.grad)
        handle = mpi_ops._allreduce_async(sent, sent, f"allreduce.{self._parameter_names[p]}", self._op,
                                          pre, post, self._flags, self._set_id)
        _stats.add_tensor(p.grad, sent)
        return handle, ctx, sent

    def synchronize(self):
        """Wait for every gradient's allreduce (enqueueing those not yet started) and set p.grad."""
        if not self._process_set.included():
            self._handles.clear()
            self._clip_ready = 0
            for p in self._requires_update:
                self._allreduce_delay[p] = self.backward_passes_per_step
            self._synchronized = True
            return
        if self._local_clip_norm is not None:
            self._start_clipped()
        for p in self._requires_update:
            entry = self._handles.get(p)
            if entry is None or entry[0] is None:
                self._handles[p] = self._allreduce_grad_async(p)
        error = None
        mask = bool(self._mc is not None and self._handles and self._mc.masks_this_step())
        for p, (handle, ctx, _) in self._handles.items():
            ok = False
            try:
                output = mpi_ops.synchronize(handle)
                if isinstance(ctx, str) and ctx == "sparse":
                    p.grad = output
                elif output is not p.grad:
                    p.grad.set_(self._compression.decompress(output, ctx))
                if p in self._densified:
                    p.grad = p.grad.to_sparse(self._densified.pop(p))
                ok = True
            except Exception as e:  # noqa: BLE001 - wait for all (they use live buffers), then raise
                error = error or e
            if self._mc is not None:
                self._mc.finish(p, self._runtime_name(p), p.grad, ok, mask)
            self._allreduce_delay[p] = self.backward_passes_per_step
        if self._mc is not None and self._handles:
            self._mc.steps += 1  # an exchange finished (every parameter's finish() ran)
        self._handles.clear()
        self._clip_ready = 0
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
        if self._mc is None or not self._process_set.included():
            return super().step(closure)
        return self._step_momentum_corrected(closure)

    def _mc_group(self, p):
        """p's param group when momentum correction runs for p on this rank, else None."""
        if self._mc is None or not self._process_set.included():
            return None
        group = self._param_group_of.get(p)
        if group is None:
            self._param_group_of = {q: g for g in self.param_groups for q in g["params"]}
            group = self._param_group_of.get(p)
        return group if group is not None and _dgc.MomentumCorrection.active(group) else None

    def _step_momentum_corrected(self, closure):
        """SGD's step on the averaged velocities: momentum (already in them) and weight decay (applied
        here, with its own momentum buffer, as in DGC) switched off in the wrapped SGD for this call."""
        saved = []
        for group in self.param_groups:
            if not _dgc.MomentumCorrection.active(group):
                continue
            # Learning-rate weighting: the averages are already weighted by lr / lr_ref, so they are
            # applied at lr_ref; the local weight-decay term, which is not, is weighted here.
            lr = group["lr"]
            factor = self._mc.lr_factor(group)
            for p in group["params"]:
                if p.grad is not None and not p.grad.is_sparse:
                    term = self._mc.weight_decay_term(p, group, self.state[p])
                    if term is not None:
                        p.grad.add_(term if factor == 1.0 else term.mul_(factor))
            saved.append((group, group["momentum"], group["weight_decay"], group["nesterov"], lr))
            group.update(momentum=0, weight_decay=0, nesterov=False)
            ref = _dgc.MomentumCorrection.lr_reference(group) if factor != 1.0 else None
            if ref is not None:
                group["lr"] = ref
        try:
            return super().step(closure)
        finally:
            for group, momentum, weight_decay, nesterov, lr in saved:
                group.update(momentum=momentum, weight_decay=weight_decay, nesterov=nesterov, lr=lr)

    # ------------------------------------------------------- checkpoints --

    def state_dict(self):
        """The wrapped optimizer's state_dict plus, under "mgs", this rank's error-feedback state.

        "mgs" holds this rank's residual of every sparsified gradient (CPU float32 tensors shaped like
        their parameters, by parameter name), the rank, the world size, the sparse settings and the
        runtime's step counter and agreed-index leaders (mgs_sparse_state_copy). Residuals differ per
        rank: every rank saves its own. Call it between steps (not between backward() and step()).
        """
        state = super().state_dict()
        mgs_state = self._mgs_state_dict()
        if mgs_state is not None:
            state[_CHECKPOINT_KEY] = mgs_state
        return state

    def load_state_dict(self, state_dict):
        """Load a state_dict(): the wrapped optimizer's state, and this rank's residuals from its "mgs" entry.

        The "mgs" entry is checked first (the same world size, this rank's own, every residual naming a
        parameter of this optimizer with the parameter's shape): a mismatch raises ValueError naming the
        rank and the tensor, and nothing is loaded. Without an "mgs" entry (a plain torch optimizer's
        state_dict) the residuals start from zero, with a warning when a compressor is set. Call it
        between steps, on every rank with the state that rank saved.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"load_state_dict expects a dict, got {type(state_dict).__name__}")
        state_dict = dict(state_dict)
        saved = state_dict.pop(_CHECKPOINT_KEY, None)
        self._check_settled("load_state_dict()")
        if saved is not None:
            self._check_mgs_state(saved)
        super().load_state_dict(state_dict)
        self._restore_mgs_state(saved)

    def _base_state_dict(self):
        """The wrapped optimizer's own state_dict (no residuals): what every rank may share."""
        return super().state_dict()

    def _load_base_state_dict(self, state_dict):
        """Load the wrapped optimizer's own state, leaving the residuals as they are."""
        state_dict = dict(state_dict)
        state_dict.pop(_CHECKPOINT_KEY, None)
        return super().load_state_dict(state_dict)

    def _check_settled(self, what):
        in_flight = sorted(self._parameter_names[p] for p, entry in self._handles.items() if entry[0] is not None)
        if in_flight:
            raise AssertionError(f"{what} was called after loss.backward() but before optimizer.step() or "
                                 f"optimizer.synchronize(): the gradients of {', '.join(in_flight[:5])}"
                                 f"{', ...' if len(in_flight) > 5 else ''} are still being reduced, so their "
                                 "residuals are not settled; call it between steps")

    def _runtime_name(self, p):
        """The runtime's name of p's gradient: its residual is kept under it (set-qualified in a process set)."""
        return _runtime.qualified_name(f"allreduce.{self._parameter_names[p]}", self._set_id)

    def _residual_params(self):
        """(parameter, its name, the runtime's name of its gradient) for gradients that may have a residual."""
        return [(p, self._parameter_names[p], self._runtime_name(p))
                for p in self._requires_update if p not in self._sparse_grads and p.dtype.is_floating_point]

    def _mgs_state_dict(self):
        self._check_settled("state_dict()")
        try:
            rank, size = mpi_ops.rank(), _runtime.world_size()
        except _lib.MgsValueError:
            warnings.warn("DistributedOptimizer.state_dict(): mgs is not running on this rank (init() not called, "
                          "or shut down), so the error-feedback residuals are not in this state_dict; a job "
                          "resumed from it starts them from zero", RuntimeWarning, stacklevel=3)
            return None
        residuals = {}
        for p, name, runtime_name in self._residual_params():
            buf = torch.empty(p.numel(), dtype=torch.float32)
            if _runtime.residual_copy(runtime_name, buf.data_ptr(), buf.numel()):
                residuals[name] = buf.view(p.shape)
        blob = _runtime.sparse_state()
        state = {
            "version": _CHECKPOINT_VERSION,
            "rank": rank,
            "world_size": size,
            "settings": _runtime.init_settings(),
            "residuals": residuals,
            # Bytes as a uint8 tensor: loadable with torch.load(weights_only=True).
            "sparse_state": torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else
            torch.empty(0, dtype=torch.uint8),
        }
        if self._mc is not None:
            # Momentum correction's velocities: this rank's own, like the residuals.
            state["velocities"] = {self._parameter_names[p]: u.detach().to("cpu", copy=True)
                                   for p, u in self._mc.velocity.items()}
            # Where masking stands against the density warm-up (momentum_masking="after_warmup").
            state["momentum_correction_steps"] = self._mc.steps
        return state

    def _check_mgs_state(self, saved):
        """ValueError, naming this rank and the tensor, if `saved` cannot be this rank's state in this job."""
        _checkpoint.check(saved, _CHECKPOINT_WORDING, {name: tuple(p.shape) for p, name, _ in self._residual_params()},
                          lambda t: None if torch.is_tensor(t) and t.dtype == torch.float32 else
                          (t.dtype if torch.is_tensor(t) else type(t).__name__),
                          lambda b: torch.is_tensor(b) and b.dtype == torch.uint8 and b.dim() == 1, stacklevel=4)
        steps = saved.get("momentum_correction_steps", 0)
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"DistributedOptimizer.load_state_dict() on rank {mpi_ops.rank()}: the "
                             f"'{_CHECKPOINT_KEY}' entry's 'momentum_correction_steps' is {steps!r}, not a count "
                             "of steps (an integer >= 0)")
        velocities = saved.get("velocities", {})
        by_name = {name: p for p, name in self._parameter_names.items()}
        for name, u in (velocities.items() if isinstance(velocities, dict) else [(None, velocities)]):
            p = by_name.get(name)
            if p is None or not torch.is_tensor(u) or tuple(u.shape) != tuple(p.shape):
                raise ValueError(f"DistributedOptimizer.load_state_dict() on rank {mpi_ops.rank()}: the "
                                 f"'{_CHECKPOINT_KEY}' entry's momentum-correction velocity {name!r} is not a tensor "
                                 "shaped like a parameter of this optimizer")

    def _restore_mgs_state(self, saved):
        """Residuals from a checked `saved` (None: zeros), then the runtime's step counter and leaders."""
        try:
            mpi_ops.rank()
        except _lib.MgsValueError:
            return  # not running: nothing held, nothing to clear (a saved state was refused by the check)
        residuals = saved["residuals"] if saved is not None else {}
        if self._mc is not None:
            by_name = {name: p for p, name in self._parameter_names.items()}
            saved_u = (saved or {}).get("velocities", {})
            self._mc.velocity = {by_name[n]: u.detach().to(by_name[n].device, by_name[n].dtype, copy=True)
                                 for n, u in saved_u.items()}
            if saved is not None:
                # A checkpoint from before the count was saved masked every step: it goes on doing so.
                self._mc.steps = saved.get("momentum_correction_steps", _dgc.STEPS_UNKNOWN)
            self._mc.forget_residuals()
        if saved is None and (_runtime.init_settings().get("MGS_COMPRESSOR") or "none") != "none":
            warnings.warn(f"DistributedOptimizer.load_state_dict() on rank {mpi_ops.rank()}: the state_dict has no "
                          f"'{_CHECKPOINT_KEY}' entry (a plain torch optimizer state), so the error-feedback "
                          "residuals start from zero: the gradient they held is not sent", RuntimeWarning,
                          stacklevel=3)
        for p, name, runtime_name in self._residual_params():
            t = residuals.get(name)
            if t is not None:
                t = t.detach().to(dtype=torch.float32, device="cpu").contiguous().reshape(-1)
                _runtime.residual_restore(runtime_name, t.data_ptr(), t.numel())
                continue
            # Not in the checkpoint: zero, as in a job that never sparsified it (only if it holds one now).
            buf = torch.empty(p.numel(), dtype=torch.float32)
            if _runtime.residual_copy(runtime_name, buf.data_ptr(), buf.numel()):
                buf.zero_()
                _runtime.residual_restore(runtime_name, buf.data_ptr(), buf.numel())
        # (A state without residuals may come from a job of another size: its counters do not apply then.)
        if saved is not None and saved.get("world_size") == _runtime.world_size():
            _runtime.restore_sparse_state(saved["sparse_state"].numpy().tobytes())

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(); the gradients are still "
                                 "being reduced in place, so this is not allowed")
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=mpi_ops.Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, sparse=True,
                         process_set=mpi_ops.global_process_set, momentum_correction="auto", momentum_masking=None,
                         local_clip_norm=None, lr_weighting=None):
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
    process_set: average the gradients over this process set only (they are then
        reduced exactly); on a rank outside it, step() uses the rank's own gradients.

    DGC's techniques (Lin et al. 2018; docs/convergence.md measures them). Momentum correction is on by
    default where gradients are sparsified; without a compressor nothing changes and the wrapped
    optimizer behaves as in Horovod. MGS_WARMUP_STEPS (the runtime's density warm-up) is the fourth.
    momentum_correction: "auto" (default): on when init() set a compressor (MGS_COMPRESSOR), sparse is
        True and the optimizer is a torch.optim.SGD with momentum (no dampening, no maximize); off
        otherwise. The resolved value is the wrapped optimizer's `momentum_correction` attribute.
        True: for torch.optim.SGD with momentum (Nesterov and weight decay included;
        dampening and maximize are refused): each rank keeps its velocity u = m*u + g and hands u to
        the allreduce, so the error-feedback residual accumulates velocity; step() applies the averaged
        result with SGD's momentum off for that step and weight decay applied locally with its own
        momentum buffer. With every entry delivered (no compressor, density 1) the update equals SGD's.
        Any other optimizer: ValueError. The velocity is this rank's own, saved in state_dict()'s "mgs".
    momentum_masking: with momentum_correction, clear u where an entry was sent this step (its
        residual became exactly 0 while its accumulated value was not). None (default): True with
        momentum_correction: every step, DGC's rule. "after_warmup": from the first step after the
        runtime's density warm-up (MGS_WARMUP_STEPS) on, so the warm-up's steps, which send most entries,
        keep their momentum. False: never. True or "after_warmup" without momentum_correction: ValueError.
    lr_weighting: with momentum_correction, hand the allreduce (lr / lr_ref) * u and apply the average
        at lr_ref (lr_ref: the group's "initial_lr" from an lr scheduler, else its first positive lr;
        kept as param_group["mgs_lr_reference"]), so that an entry the residual delayed is applied with
        the learning rates of the steps it came from, not the one it is sent at. A constant lr changes
        nothing (the factor is exactly 1); under a decaying schedule p.grad after synchronize() holds
        the weighted average. None (default): on with momentum_correction; True without it: ValueError.
    local_clip_norm: clip this rank's gradients (total 2-norm, before momentum and error feedback
        accumulate them) to local_clip_norm / sqrt(ranks), DGC's local clipping. None: off. The norm
        needs every gradient, so with it the allreduces start when backward has ended, not during it.
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
    momentum_correction = _dgc.resolve(momentum_correction, optimizer, sparse)
    if momentum_correction:
        _dgc.check_supported(optimizer)
    momentum_masking = _masking.resolve(momentum_masking, momentum_correction)
    if lr_weighting and not momentum_correction:
        raise ValueError("lr_weighting=True needs momentum_correction=True (it weights DGC's velocity)")
    if local_clip_norm is not None and not local_clip_norm > 0:
        raise ValueError(f"local_clip_norm must be > 0 (or None: no clipping), got {local_clip_norm!r}")
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base), {})
    mpi_ops._sid(process_set)  # a removed or unregistered set fails here
    wrapped = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
                  gradient_predivide_factor, sparse, sparse_as_dense, process_set,
                  momentum_correction=bool(momentum_correction),
                  momentum_masking=momentum_masking,
                  local_clip_norm=local_clip_norm, lr_weighting=lr_weighting is None or bool(lr_weighting))
    if optimizer.state:
        wrapped._load_base_state_dict(optimizer.state_dict())
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
