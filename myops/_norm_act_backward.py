"""Eager training's backward of the family's normalisation + activation step (myops/norm_act.py):
aten's fused BatchNorm / GroupNorm backward, with the batch statistics' part, in place of the
normalize_act formula plus the statistics folded into the conv op's gradient."""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ._autograd import _activation_backward, _needs_pre_activation


# Devices whose eager training calls take NormActOfBatchStats (CUDA: once its tests ran on a GPU).
FUSED_NORM_BACKWARD_DEVICES = ("cpu",)


def takes(out: Tensor, weight: Optional[Tensor], bias: Optional[Tensor]) -> bool:
    """Whether an eager call's normalisation takes NormActOfBatchStats: a gradient is recorded,
    on FUSED_NORM_BACKWARD_DEVICES, float32 / float64 with parameters of out's dtype (aten's norm
    backward kernels then take them as they are)."""
    tensors = [t for t in (out, weight, bias) if t is not None]
    return (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
            and out.device.type in FUSED_NORM_BACKWARD_DEVICES and out.dtype in (torch.float32, torch.float64)
            and all(t.dtype == out.dtype for t in tensors))


class NormActOfBatchStats(torch.autograd.Function):
    """``act(norm(out))`` in eager training, where mean / var are out's own batch statistics (per
    channel, or per (sample, group) with num_groups > 0): forward is normalize_one_pass; backward
    is the activation's and aten's fused BatchNorm / GroupNorm backward, the statistics'
    dependence on out included, as F.batch_norm's autograd runs it (3 passes over out where the
    ops' formulas take about a dozen). mean / var get no gradient: theirs is in out's. A backward
    that is itself differentiated recomputes the chain with torch ops instead."""

    @staticmethod
    def forward(ctx, out, mean, var, weight, bias, eps, num_groups, activation, negative_slope, approximate):
        from .norm_act import normalize_one_pass
        y = normalize_one_pass(out, mean, var, eps, weight, bias, activation, negative_slope, approximate)
        ctx.save_for_backward(out, mean, var, weight, bias, y)
        ctx.args = (eps, num_groups, activation, negative_slope, approximate)
        return y

    @staticmethod
    def backward(ctx, grad):
        from .norm_act import activation_fn, normalize_one_pass
        out, mean, var, weight, bias, y = ctx.saved_tensors
        eps, num_groups, activation, negative_slope, approximate = ctx.args
        needs = [ctx.needs_input_grad[0], ctx.needs_input_grad[3] and weight is not None,
                 ctx.needs_input_grad[4] and bias is not None]
        if torch.is_grad_enabled():  # double backward: torch ops, differentiable
            gx, gw, gb = _norm_act_grads_composite(grad, out, weight, bias, eps, num_groups,
                                                   activation_fn(activation, negative_slope, approximate), needs)
        else:
            z = (normalize_one_pass(out, mean, var, eps, weight, bias)
                 if _needs_pre_activation(activation, negative_slope) else None)
            g_z = _activation_backward(grad, y, z, activation, negative_slope, approximate)
            rstd = (var + eps).rsqrt()
            if num_groups == 0:
                gx, gw, gb = torch.ops.aten.native_batch_norm_backward(g_z, out, weight, None, None, mean, rstd,
                                                                       True, eps, needs)
            else:
                n, c = out.shape[0], out.shape[1]
                # one memory format for both (aten's kernel reads the gradient as laid out like out):
                # the CPU kernel takes channels-last where it lies
                layout = (torch.channels_last if out.device.type == "cpu" and out.dim() == 4 and not out.is_contiguous()
                          and out.is_contiguous(memory_format=torch.channels_last) else torch.contiguous_format)
                # (bias's gradient a plain channel sum: aten's backward fails on it without a weight)
                gx, gw, _ = torch.ops.aten.native_group_norm_backward(
                    g_z.contiguous(memory_format=layout), out.contiguous(memory_format=layout), mean, rstd, weight,
                    n, c, out[0, 0].numel(), num_groups, [needs[0], needs[1], False])
                gb = g_z.sum([0, *range(2, g_z.dim())]) if needs[2] else None
        return gx, None, None, gw, gb, None, None, None, None, None


def _norm_act_grads_composite(grad, out, weight, bias, eps, num_groups, act, needs):
    """NormActOfBatchStats' gradients with the chain recomputed in torch ops (differentiable)."""
    z = (F.batch_norm(out, None, None, weight, bias, True, 0.0, eps) if num_groups == 0
         else F.group_norm(out, num_groups, weight, bias, eps))
    wanted = [t for t, n in zip((out, weight, bias), needs) if n]
    grads = iter(torch.autograd.grad(act(z), wanted, grad, create_graph=True))
    return tuple(next(grads) if n else None for n in needs)
