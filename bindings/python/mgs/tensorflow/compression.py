"""Horovod's Compression for mgs.tensorflow (see mgs._compression)."""

import tensorflow as tf

from .._compression import Compressor, FP16CompressorBase, NoneCompressor  # noqa: F401


class FP16Compressor(FP16CompressorBase):
    """Send floating-point tensors as float16 and cast the result back."""

    half = tf.float16
    is_float = staticmethod(lambda t: t.dtype.is_floating)
    cast = staticmethod(lambda t, dtype: tf.cast(t, dtype))


class Compression:
    """Horovod's names: Compression.none, Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
