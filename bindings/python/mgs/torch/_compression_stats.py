"""compression_stats(): this rank's gradient traffic through DistributedOptimizers (docs/pytorch.md)."""

import os
import threading

from .. import _lib

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
