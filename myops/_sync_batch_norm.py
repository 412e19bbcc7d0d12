"""SyncBatchNorm's statistics for the family: each rank's per-channel mean and biased variance
over its own batch, combined across the ranks of a process group into the statistics of the whole
batch, as ``nn.SyncBatchNorm`` computes them (counts may differ between ranks).

The sums travel in float64 ([count, count * mean, count * (var + mean^2)] per channel, one
all_reduce), so the variance of the union, E[x^2] - mean^2, loses nothing a float32 statistic
holds. Backward all-reduces the gradients of the global statistics (every rank's loss depends on
them) and hands each rank its share: the gradients of its local mean and variance, which the
conv's own backward folds into its output's gradient."""
from typing import Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor


def needs_sync(training: bool, process_group) -> bool:
    """Whether a sync_batch_norm call combines statistics across ranks: in training, in an
    initialised process group of more than one rank (else it is batch_norm, as nn.SyncBatchNorm)."""
    if not training or not dist.is_available() or not dist.is_initialized():
        return False
    group = dist.group.WORLD if process_group is None else process_group
    return dist.get_world_size(group) > 1


class _GlobalStats(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mean: Tensor, var: Tensor, count: int, group) -> Tuple[Tensor, Tensor, Tensor]:
        m = mean.detach().double()
        n_i = float(count)
        sums = torch.stack([torch.full_like(m, n_i), n_i * m, n_i * (var.detach().double() + m * m)])
        dist.all_reduce(sums, group=group)
        n = sums[0]
        g_mean = sums[1] / n
        g_var = (sums[2] / n - g_mean * g_mean).clamp_min(0)
        ctx.save_for_backward(m, g_mean, n)
        ctx.n_i, ctx.group = n_i, group
        ctx.mark_non_differentiable(n)
        return g_mean.to(mean.dtype), g_var.to(var.dtype), n

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_mean: Optional[Tensor], g_var: Optional[Tensor], _):
        m, mean_all, n = ctx.saved_tensors
        grads = torch.stack([torch.zeros_like(m) if g is None else g.double() for g in (g_mean, g_var)])
        dist.all_reduce(grads, group=ctx.group)
        share = ctx.n_i / n  # d(global mean) / d(local mean), d(global var) / d(local var)
        gm = share * grads[0] + 2 * share * (m - mean_all) * grads[1]
        gv = share * grads[1]
        dtype = _grad_dtype(g_mean, g_var)
        return gm.to(dtype), gv.to(dtype), None, None


def _grad_dtype(*grads: Optional[Tensor]) -> torch.dtype:
    return next(g.dtype for g in grads if g is not None)


def global_channel_stats(mean: Tensor, var: Tensor, count: int, process_group) -> Tuple[Tensor, Tensor, float]:
    """(mean, biased variance, element count) per channel over every rank's batch, from this
    rank's statistics of its `count` values per channel; differentiable."""
    group = dist.group.WORLD if process_group is None else process_group
    g_mean, g_var, n = _GlobalStats.apply(mean, var, count, group)
    return g_mean, g_var, float(n[0])
