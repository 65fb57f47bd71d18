"""Horovod's Compression for mgs.torch (see mgs._compression)."""

import torch

from .._compression import Compressor, FP16CompressorBase, NoneCompressor  # noqa: F401


class FP16Compressor(FP16CompressorBase):
    """Send floating-point tensors as float16 and cast the result back."""

    half = torch.float16
    is_float = staticmethod(lambda t: t.dtype.is_floating_point)
    cast = staticmethod(lambda t, dtype: t.to(dtype))


class Compression:
    """Horovod's names: Compression.none, Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
