"""mgs.tensorflow: TensorFlow 2 adapter with Horovod's API (`import mgs.tensorflow as hvd`).

A thin layer over libmgs's C ABI (loaded by mgs._lib): host tensors are handed
to the runtime by pointer, eagerly through `.numpy()` and inside tf.function
through tf.py_function; negotiation, fusion, sparsification and communication
all happen in the runtime. See docs/tensorflow.md.
"""

from .callbacks import BroadcastGlobalVariablesCallback
from .checkpoint import load_residual_state, residual_state
from .compression import Compression
from .functions import allgather_object, broadcast_object, broadcast_variables
from .gradient_tape import DistributedGradientTape
from .mpi_ops import (Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, allgather, allreduce,
                      barrier, broadcast, cross_rank, cross_size, cuda_built, gloo_built, global_process_set,
                      grouped_allgather, grouped_allreduce, init, is_homogeneous, is_initialized, local_rank,
                      local_size, mpi_built, nccl_built, rank, remove_process_set, shutdown, size)
from .scatter_ops import alltoall, grouped_reducescatter, reducescatter

__all__ = [
    "Average", "Sum", "Min", "Max", "Product", "Adasum", "Compression", "DistributedGradientTape",
    "BroadcastGlobalVariablesCallback",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "barrier",
    "cross_rank", "cross_size", "is_homogeneous",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
    "alltoall", "reducescatter", "grouped_reducescatter",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "broadcast_variables", "broadcast_object", "allgather_object", "residual_state", "load_residual_state",
    "mpi_built", "gloo_built", "cuda_built", "nccl_built",
]
