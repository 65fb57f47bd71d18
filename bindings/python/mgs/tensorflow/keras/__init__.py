"""mgs.tensorflow.keras: Horovod's Keras API (`import mgs.tensorflow.keras as hvd`) for Keras 3.

    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(1e-3 * hvd.size()))
    model.compile(optimizer=opt, loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()],
              verbose=1 if hvd.rank() == 0 else 0)

The gradients of every step are reduced over all ranks inside the optimizer's
apply(), which model.fit's train step (a tf.function) calls. XLA cannot compile
the reduction (it calls back into Python): jit_compile=True is not supported
(the default, "auto", works).
"""

from .. import mpi_ops as _ops
from ..compression import Compression
from ..functions import allgather_object, broadcast_object, broadcast_variables
from ..mpi_ops import (Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, allgather, allreduce,
                       barrier, broadcast, cross_rank, cross_size, cuda_built, gloo_built, global_process_set,
                       grouped_allgather, grouped_allreduce, init, is_homogeneous, is_initialized, local_rank,
                       local_size, mpi_built, nccl_built, rank, remove_process_set, shutdown, size)
from ..scatter_ops import alltoall, grouped_reducescatter, reducescatter
from . import callbacks
from .optimizer import DistributedOptimizer

__all__ = [
    "DistributedOptimizer", "callbacks", "Compression",
    "Average", "Sum", "Min", "Max", "Product", "Adasum",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "barrier",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "broadcast_variables",
    "alltoall", "reducescatter", "grouped_reducescatter",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "broadcast_object", "allgather_object", "mpi_built", "gloo_built", "cuda_built", "nccl_built",
]
del _ops
