"""Momentum factor masking's schedule, shared by the torch and Keras DistributedOptimizers.

DGC (Lin et al. 2018) clears a rank's velocity where its entry was sent, every step (True, the
default). During the runtime's density warm-up (MGS_WARMUP_STEPS) most entries are sent every step, so
masking then clears nearly every velocity and those steps train without momentum. "after_warmup" masks
from the first step at the final density on instead, False never. docs/convergence.md measures both
rules: keeping the momentum through the warm-up helped the digits CNN by about a quarter of a point and
cost the character LM 2-8% of bits per character, so DGC's rule is the default.
"""

from ._lib import lib

AFTER_WARMUP = "after_warmup"


def resolve(momentum_masking, momentum_correction):
    """momentum_masking as the optimizers run it: None (the default) is True with momentum correction
    and False without; True, False and AFTER_WARMUP as given. ValueError for any other
    value, and for masking asked for without momentum correction."""
    if momentum_masking is None:
        return bool(momentum_correction)
    if momentum_masking is not True and momentum_masking is not False and momentum_masking != AFTER_WARMUP:
        raise ValueError(f"momentum_masking must be None, True, False or {AFTER_WARMUP!r}, got {momentum_masking!r}")
    if momentum_masking and not momentum_correction:
        raise ValueError(f"momentum_masking={momentum_masking!r} needs momentum_correction=True (it clears DGC's "
                         "velocity)")
    return momentum_masking


def first_masked_step(masking):
    """The first step (0-based, counted in gradient exchanges) that masks under `masking`: 0 for True,
    the runtime's density warm-up (MGS_WARMUP_STEPS as resolved, 0 when there is none) for
    AFTER_WARMUP. Not for masking=False. Needs a running runtime for AFTER_WARMUP."""
    if masking is True:
        return 0
    stats = lib().stats() or {}
    return int(stats.get("sparse_warmup_steps", 0))
