"""mgs.torch: PyTorch adapter with Horovod's API (`import mgs.torch as hvd`).

A thin layer over libmgs's C ABI: tensors are handed to the runtime by
pointer (CPU) or device pointer + stream + ready event (CUDA); negotiation,
fusion, sparsification and communication all happen in the runtime.
"""

from .compression import Compression
from .functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters
from .mpi_ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce, allreduce_, allreduce_async,
                      allreduce_async_, barrier, broadcast, broadcast_, broadcast_async, broadcast_async_,
                      cross_rank, cross_size, cuda_built, gloo_built, is_homogeneous, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                      grouped_allreduce_async_, init, is_initialized, local_rank, local_size, mpi_built,
                      nccl_built, poll, rank, shutdown, size, synchronize)
from .mpi_ops import sparse_allreduce_async
from .mpi_ops import (HorovodInternalError, ProcessSet, add_process_set, ccl_built, ddl_built, gloo_enabled,
                      global_process_set, grouped_allgather, grouped_allgather_async, join, mpi_enabled,
                      mpi_threads_supported, remove_process_set, rocm_built)
from .scatter_ops import (alltoall, alltoall_async, grouped_reducescatter, grouped_reducescatter_async, reducescatter,
                          reducescatter_async)
from ._compression_stats import compression_stats, reset_compression_stats
from .optimizer import DistributedOptimizer
from .sync_batch_norm import SyncBatchNorm

__all__ = [
    "Average", "Sum", "Min", "Max", "Product", "Adasum", "Compression", "DistributedOptimizer",
    "SyncBatchNorm", "join", "sparse_allreduce_async",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "allgather", "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "poll", "synchronize", "barrier",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object",
    "compression_stats", "reset_compression_stats",
    "mpi_built", "gloo_built", "cuda_built", "nccl_built",
    "mpi_enabled", "mpi_threads_supported", "gloo_enabled", "ccl_built", "ddl_built", "rocm_built",
    "HorovodInternalError", "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "grouped_allgather", "grouped_allgather_async", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
]
