"""SyncBatchNorm: batch normalisation with statistics over the whole global batch (Horovod's name).

In training, each rank sums x and x*x over its local batch per channel; one
differentiable allreduce (Sum) of [sum, sum of squares, count] gives the
global mean and biased variance. The backward pass goes through the same
allreduce's gradient (a Sum of the gradients), which is what makes every
rank's gradient account for the other ranks' samples.
"""

import itertools

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from . import mpi_ops

_ids = itertools.count()


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d whose training statistics span all ranks.

    Instances are named by creation order, which must be the same on every rank
    (build the model the same way everywhere). Evaluation uses the running
    statistics, as plain batch norm does; they are updated identically on every rank.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self._mgs_name = f"sync_batch_norm.{next(_ids)}"

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm expects at least 2-D input (N, C, ...), got {input.dim()}-D")

    def _momentum(self):
        if self.momentum is not None:
            return self.momentum
        # momentum=None: a cumulative moving average, as torch's batch norm does.
        return 1.0 / float(self.num_batches_tracked)

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm({self.num_features}) got input with {input.shape[1]} channels")
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or mpi_ops.size() == 1:
            return super().forward(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        dims = [0] + list(range(2, input.dim()))
        local_count = input.numel() // input.shape[1]
        stats = torch.cat([input.sum(dims), (input * input).sum(dims),
                           torch.full((1,), float(local_count), dtype=input.dtype, device=input.device)])
        total = mpi_ops.allreduce(stats, op=mpi_ops.Sum, name=self._mgs_name)
        c = self.num_features
        count = total[2 * c]
        if float(count.detach()) < 2:
            raise ValueError(f"SyncBatchNorm {self._mgs_name}: need more than 1 value per channel over all "
                             f"ranks in training, got {int(count)}")
        mean = total[:c] / count
        var = (total[c:2 * c] / count - mean * mean).clamp_min(0)
        if self.training and self.track_running_stats:
            m = self._momentum()
            with torch.no_grad():
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                self.running_var.mul_(1 - m).add_(var.detach() * (count / (count - 1)), alpha=m)
        shape = [1, c] + [1] * (input.dim() - 2)
        out = (input - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out
