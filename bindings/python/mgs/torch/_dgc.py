"""DGC's rank-local techniques for DistributedOptimizer (Lin et al., ICLR 2018, "Deep Gradient
Compression", sections 3.2-3.3; /work/shared/algorithms.md 8.3 has the reference code's order).

Momentum correction: with sparsified gradients, momentum applied after the exchange only ever sees
the few entries that were sent, so delayed entries lose their momentum. DGC moves momentum before
the exchange instead: each rank keeps its velocity u = m*u + g (Nesterov: u = m*(u + g), sending
u + g) and hands u to the sparse allreduce, so the runtime's error-feedback residual accumulates
velocity (v = v + u in the paper); the optimizer applies the averaged result with its own momentum
off. Weight decay does not need the exchange (the parameters are the same on every rank): it is
kept out of u and gets its own momentum buffer, applied locally, as DGC's optimizer does. At
density 1 (and without a compressor) the update is exactly torch.optim.SGD's momentum update.

Momentum factor masking: after the exchange, u is cleared where the entry was sent, so that a
delayed entry's old velocity does not keep pushing after it was applied: every step (DGC's rule, the
default), or from the first step after the runtime's density warm-up (momentum_masking="after_warmup",
_masking.py). The runtime does not
report the selection; an entry was sent where this rank's residual is now exactly 0 while what it
accumulated (u + the residual before) was not. The residual after the exchange is read once per
step (mgs_residual_copy) and kept as the next step's "before", so one copy per tensor and step is
all it costs. A tensor whose residual is 0 everywhere afterwards was delivered whole (a dense
fallback bucket, density 1, a hierarchical non-leader) and keeps its velocity, as DGC treats an
uncompressed tensor; a tensor without a residual (dense job, under MGS_MIN_SPARSE_ELEMENTS) too.

Learning-rate weighting (mgs's addition, on by default with momentum correction): DGC applies a
delayed entry with the learning rate of the step that sends it, so under a decaying schedule a
velocity accumulated while the rate was high is applied at a lower one, and the entries still in the
residual at the end of a cosine schedule are applied at almost none. Instead each rank hands the
allreduce (lr / lr_ref) * u, lr_ref being the group's reference rate (its "initial_lr" from a
torch.optim.lr_scheduler, else the first positive lr seen; kept in the group as "mgs_lr_reference",
so checkpoints carry it), and step() applies the average at lr_ref: every entry is applied with the
rates of the steps it came from, as error feedback on the update (Karimireddy et al., 2019) does.
With a constant rate the factor is exactly 1 and nothing changes, bit for bit.

This module holds the per-parameter state; the optimizer (optimizer.py) calls it.
"""

import torch

from .. import _masking
from .. import _runtime

try:  # optional: finding the sent entries (finish) is faster with it
    import numpy as _np
except ImportError:  # pragma: no cover - numpy ships with Debian's python3-torch
    _np = None

# The optimizer momentum correction supports: the update rule below is torch.optim.SGD's.
SUPPORTED = torch.optim.SGD

# The step count of a checkpoint that did not save one: past any warm-up (it masked every step).
STEPS_UNKNOWN = 2 ** 62


def resolve(momentum_correction, optimizer, sparse):
    """momentum_correction as DistributedOptimizer runs it: True/False as given; "auto" (the default) is on
    exactly when the runtime sparsifies this optimizer's gradients (a compressor set at init, sparse=True)
    and the optimizer is a torch.optim.SGD that momentum correction can run (some group with momentum,
    no dampening, no maximize). ValueError for anything else."""
    if momentum_correction is True or momentum_correction is False:
        return momentum_correction
    if momentum_correction != "auto":
        raise ValueError(f"momentum_correction must be True, False or 'auto', got {momentum_correction!r}")
    if not sparse or (_runtime.init_settings().get("MGS_COMPRESSOR") or "none") == "none":
        return False
    if type(optimizer) is not SUPPORTED:
        return False
    groups = optimizer.param_groups
    return (any(g.get("momentum", 0) != 0 for g in groups) and
            all(g.get("dampening", 0) == 0 and not g.get("maximize", False) for g in groups))


def check_supported(optimizer):
    """ValueError unless `optimizer` is a torch.optim.SGD whose groups momentum correction can run."""
    if type(optimizer) is not SUPPORTED:
        raise ValueError(
            f"momentum_correction=True needs a torch.optim.SGD, got {type(optimizer).__module__}."
            f"{type(optimizer).__qualname__}: DGC's momentum correction rewrites SGD's momentum update and "
            "is not defined for other optimizers; pass momentum_correction=False")
    for i, group in enumerate(optimizer.param_groups):
        if group.get("dampening", 0) != 0:
            raise ValueError(f"momentum_correction=True: param_groups[{i}] has dampening="
                             f"{group['dampening']}; DGC's velocity has no dampening (use dampening=0)")
        if group.get("maximize", False):
            raise ValueError(f"momentum_correction=True: param_groups[{i}] has maximize=True, which it does "
                             "not support")


def _finite(t):
    """Whether every entry of t is finite: a sum is (one pass), unless an entry is inf or nan, or the
    float32 sum overflowed; only then every entry is checked."""
    if bool(torch.isfinite(t.sum())):
        return True
    return bool(torch.isfinite(t).all())


def _all_zero(flat):
    """Whether a flat CPU float32 tensor is 0 everywhere. A strided sample decides which exact check
    runs: one nonzero sampled entry answers at once (a sparsified tensor's residual is almost all
    nonzero), else every entry is counted."""
    if flat.numel() > 4096 and bool(flat[::1024].any()):
        return False
    return int(torch.count_nonzero(flat)) == 0


def _zeros(flat):
    """Indices (int64) of the entries of a flat CPU float32 tensor that are 0: through numpy where it is
    installed (about 5x faster than torch.nonzero on the CPU builds measured), else torch."""
    if _np is not None:
        return torch.from_numpy(_np.flatnonzero(flat.numpy() == 0))
    return torch.nonzero(flat.eq(0)).view(-1)


class MomentumCorrection:
    """Per-parameter DGC state of one rank: velocity u, the last residual, the weight-decay buffer.

    The velocity is this rank's own (like the residual): it is not broadcast and is checkpointed in
    the "mgs" entry of state_dict(). Threading: velocity() runs in the autograd hook (backward's
    thread), masked()/apply_step() in the thread that calls step(); never at the same time for one
    parameter (step() waits for the hooks' allreduces).
    """

    def __init__(self, masking, lr_weighted=True):
        self.masking = masking  # True (every step), False, or _masking.AFTER_WARMUP
        self.lr_weighted = lr_weighted
        # Exchanges this optimizer finished (the runtime's step counter for its density warm-up, which
        # counts one step per gradient exchange); checkpointed with the velocities.
        self.steps = 0
        self.velocity = {}    # param -> u (committed after a finished exchange)
        self._pending = {}    # param -> (u_next, (sent, residual before) or None), between hook and synchronize
        self._residual = {}   # param -> this rank's residual after the last exchange (fp32, flat)
        # Buffers reused every step (a fresh tensor of a large parameter costs its page faults again):
        # param -> the velocity buffer not in use, the residual buffer not in use.
        self._spare_velocity = {}
        self._spare_residual = {}

    @staticmethod
    def active(group):
        return group.get("momentum", 0) != 0

    @staticmethod
    def lr_reference(group):
        """The group's reference learning rate (> 0), or None while it has none (every lr so far 0)."""
        ref = group.get("mgs_lr_reference")
        if ref is None:
            ref = float(group.get("initial_lr", 0) or 0) or float(group["lr"])
            if not ref > 0:
                return None
            group["mgs_lr_reference"] = ref
        return ref

    def lr_factor(self, group):
        """lr / lr_ref for this step's send (1.0 without learning-rate weighting); 0 while lr is 0."""
        if not self.lr_weighted:
            return 1.0
        lr = float(group["lr"])
        ref = self.lr_reference(group)
        return lr / ref if ref is not None else 0.0

    def velocity_into_grad(self, p, group, runtime_name):
        """Replace p.grad by what DGC sends for it this step, remembering u_next until the exchange ends."""
        m, g = group["momentum"], p.grad
        u = self.velocity.get(p)
        if group.get("nesterov", False):
            u_next = (g if u is None else g + u).mul(m)
            send = u_next + g
        elif u is None:
            u_next = send = g.clone()
        else:
            spare = self._spare_velocity.pop(p, None)
            if spare is None or spare.shape != g.shape or spare.dtype != torch.result_type(g, u) or \
                    spare.device != g.device or spare is u:
                spare = None
            u_next = send = torch.add(g, u, alpha=m) if spare is None else torch.add(g, u, alpha=m, out=spare)
        factor = self.lr_factor(group)
        if factor != 1.0:  # learning-rate weighting: u_next stays the velocity, what is sent is weighted
            send = send.mul(factor)
        # Masking needs what this rank sent and its residual before (finish() reads them only where the
        # residual is 0 afterwards, a few entries per thousand): kept, not turned into a mask here.
        masking = None
        if self.masking and p.dtype.is_floating_point:
            masking = (send, self._residual_before(p, runtime_name))
        self._pending[p] = (u_next, masking)
        p.grad.copy_(send)

    def _residual_before(self, p, runtime_name):
        r = self._residual.get(p)
        if r is None:
            r = torch.empty(p.numel(), dtype=torch.float32)
            if not _runtime.residual_copy(runtime_name, r.data_ptr(), r.numel()):
                return None
            self._residual[p] = r
        return r

    def masks_this_step(self):
        """Whether finish() clears the sent entries' velocity in the step being finished: always (True),
        never (False), or (AFTER_WARMUP) once the step ran at the final density, i.e. from the step after
        the runtime's density warm-up on (_masking.first_masked_step)."""
        return bool(self.masking) and self.steps >= _masking.first_masked_step(self.masking)

    def finish(self, p, runtime_name, output, ok, mask=True):
        """After p's exchange: commit u_next (unless it failed or is not finite) and, with `mask`, mask
        it. Without `mask` the residual is still read, as the next step's "before"."""
        u_next, masking = self._pending.pop(p, (None, None))
        if u_next is None:
            return
        if not ok or not _finite(output):
            # A skipped step (loss scaling, MGS_NONFINITE=propagate): the runtime kept its residual,
            # so this rank keeps its velocity too.
            return
        old = self.velocity.get(p)
        self.velocity[p] = u_next
        if old is not None and old is not u_next:
            self._spare_velocity[p] = old
        if masking is None:
            return
        send, before = masking
        after = self._spare_residual.pop(p, None)
        if after is None or after.numel() != p.numel():
            after = torch.empty(p.numel(), dtype=torch.float32)
        if not _runtime.residual_copy(runtime_name, after.data_ptr(), after.numel()):
            self._residual.pop(p, None)  # not sparsified this step: a dense tensor keeps its velocity
            return
        self._residual[p] = after
        if before is not None:
            self._spare_residual[p] = before
        if not mask:
            return  # the density warm-up: u keeps its momentum
        if _all_zero(after):
            return  # delivered whole: treated as DGC treats an uncompressed tensor
        zero = _zeros(after)
        if zero.numel() == 0:
            return  # nothing sent
        # Sent: the residual is 0 now while what it accumulated (send + the residual before) was not.
        flat_send = send.reshape(-1)
        acc = flat_send[zero.to(flat_send.device)].float().cpu()
        if before is not None:
            acc += before[zero]
        sent = zero[acc.ne(0)]
        u_next.view(-1)[sent.to(u_next.device)] = 0

    def forget_residuals(self):
        """The runtime's residuals were replaced (load_state_dict): read them again next step."""
        self._residual.clear()
        self._spare_residual.clear()
        self._spare_velocity.clear()

    def discard_pending(self):
        self._pending.clear()

    def weight_decay_term(self, p, group, state):
        """DGC's local weight decay with its own momentum buffer: what to add to the averaged p.grad."""
        wd, m = group.get("weight_decay", 0), group["momentum"]
        if wd == 0:
            return None
        d = p.detach().mul(wd)
        buf = state.get("mgs_weight_decay_buffer")
        if buf is None:
            buf = d.clone()
        else:
            buf.mul_(m).add_(d)
        state["mgs_weight_decay_buffer"] = buf
        return d.add_(buf, alpha=m) if group.get("nesterov", False) else buf


def clip_local(params, max_norm, world_size):
    """DGC's local clipping: scale this rank's gradients so their total 2-norm is at most
    max_norm / sqrt(world_size) (torch.nn.utils.clip_grad_norm_'s rule). Returns the norm before."""
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.nn.utils.clip_grad_norm_(grads, max_norm / world_size ** 0.5))
