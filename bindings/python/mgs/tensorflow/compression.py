"""Gradient compression applied in Python before a tensor is handed to mgs (Horovod's Compression).

These are the wire-format casts Horovod offers. mgs's own sparsification
(MGS_COMPRESSOR) happens inside the runtime and is independent of them.
"""

import tensorflow as tf


class Compressor:
    """compress(tensor) -> (tensor to send, context); decompress(tensor, context) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Send tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Send floating-point tensors as float16 and cast the result back."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """Horovod's names: Compression.none, Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
