"""Eager training's backward of the steps after the conv that normalise with the conv output's own
batch statistics: the family's normalisation + activation (myops/norm_act.py) and the BatchNorm
chain's tail (myops/ops.py): aten's fused BatchNorm / GroupNorm backward, with the batch
statistics' part, in place of the ops' formulas plus the statistics folded into the conv op's
gradient (a dozen passes over the output)."""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ._autograd import (_activation_backward, _conv_grads, _group_norm_grads_of_stats, _group_norm_layout,
                        _needs_pre_activation)
from .backends import get_option


def takes(out: Tensor, *params: Optional[Tensor]) -> bool:
    """Whether an eager call's normalisation takes NormActOfBatchStats / BatchNormChainOfBatchStats
    (or standalone group_norm ATen's): a gradient is recorded, on a device the option aten_training
    names ('auto': the CPU and CUDA), float32 / float64 with
    parameters of out's dtype (aten's norm backward kernels then take them as they are)."""
    tensors = [t for t in (out, *params) if t is not None]
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
            and out.dtype in (torch.float32, torch.float64) and all(t.dtype == out.dtype for t in tensors)):
        return False
    choice = get_option("aten_training")
    return choice == "always" or (choice == "auto" and out.device.type in ("cpu", "cuda"))


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
        out, mean, var, weight, bias, y = ctx.saved_tensors
        needs = [ctx.needs_input_grad[0], ctx.needs_input_grad[3] and weight is not None,
                 ctx.needs_input_grad[4] and bias is not None]
        if torch.is_grad_enabled():  # double backward: torch ops, differentiable
            gx, gw, gb = _grads_of(_norm_act_chain(*ctx.args), (out, weight, bias), grad, needs)
        else:
            gx, gw, gb = _norm_act_grads(grad, out, mean, var, weight, bias, y, *ctx.args, needs)
        return gx, None, None, gw, gb, None, None, None, None, None


class ConvNormActOfBatchStats(torch.autograd.Function):
    """NormActOfBatchStats and the conv before it as one autograd node: out = pre(conv), conv =
    conv_transpose2d(input, conv_weight, conv_bias, *conv_args), computed without a gradient (pre:
    an activation or none; conv given where pre's backward needs its input, else None). Backward
    runs the norm's as NormActOfBatchStats does, then pre's and aten's convolution_backward: the
    conv op's own autograd formula, a node of its own, costs more host time than a small layer's
    kernels. conv and out are released as soon as backward has used them, so that its peak holds
    no more output-sized tensors than eager PyTorch's chain of nodes; a second backward through a
    retained graph recomputes them."""

    @staticmethod
    def forward(ctx, input, conv_weight, conv_bias, weight, bias, conv, out, mean, var, conv_args, pre, eps,
                num_groups, activation, negative_slope, approximate):
        from .norm_act import normalize_one_pass
        y = normalize_one_pass(out, mean, var, eps, weight, bias, activation, negative_slope, approximate)
        ctx.save_for_backward(input, conv_weight, conv_bias, weight, bias, mean, var, y)
        # (made here without a gradient, not inputs anyone else holds: kept on ctx, which backward
        # can drop, rather than saved, which lives until the node is freed)
        ctx.intermediates = [conv, out]
        ctx.conv = (conv_args, pre)
        ctx.args = (eps, num_groups, activation, negative_slope, approximate)
        return y

    @staticmethod
    def _conv_and_pre(input, conv_weight, conv_bias, conv_args, pre):
        """(conv, pre(conv)) in torch ops: differentiable, and what a released node recomputes."""
        from .norm_act import activation_fn
        conv = F.conv_transpose2d(input, conv_weight, conv_bias, *conv_args)
        return conv, activation_fn(*pre)(conv)

    @staticmethod
    def backward(ctx, grad):
        input, conv_weight, conv_bias, weight, bias, mean, var, y = ctx.saved_tensors
        conv_args, pre = ctx.conv
        needs = ctx.needs_input_grad
        wanted = [needs[0], needs[1], needs[2] and conv_bias is not None, needs[3] and weight is not None,
                  needs[4] and bias is not None]
        if torch.is_grad_enabled():  # double backward: torch ops, differentiable
            _released(ctx)
            norm_act = _norm_act_chain(*ctx.args)

            def chain(input, conv_weight, conv_bias, weight, bias):
                return norm_act(ConvNormActOfBatchStats._conv_and_pre(input, conv_weight, conv_bias, conv_args,
                                                                      pre)[1], weight, bias)
            grads = _grads_of(chain, (input, conv_weight, conv_bias, weight, bias), grad, wanted)
        else:
            conv, out = _released(ctx) or ConvNormActOfBatchStats._conv_and_pre(input, conv_weight, conv_bias,
                                                                                conv_args, pre)
            g_out, gw, gb = _norm_act_grads(grad, out, mean, var, weight, bias, y, *ctx.args,
                                            [any(wanted[:3]), wanted[3], wanted[4]])
            if _needs_pre_activation(*pre[:2]):  # pre's backward reads its input, not out
                out = None
            else:
                conv = None
            g_conv = _activation_backward(g_out, out, conv, *pre) if any(wanted[:3]) else None
            del g_out, out, conv  # before the conv's gradients, as eager PyTorch has freed them by then
            gi = g_cw = g_cb = None
            if g_conv is not None:
                gi, g_cw, g_cb = _conv_grads(g_conv, input, conv_weight, None if conv_bias is None else
                                             conv_bias.shape[0], conv_args, wanted[:3])
            grads = (gi, g_cw, g_cb, gw, gb)
        return (*grads, None, None, None, None, None, None, None, None, None, None, None)


def _released(ctx):
    """The intermediates forward left on ctx, dropped from it (so that backward frees each once
    read); None where a backward through the retained graph already took them."""
    intermediates, ctx.intermediates = ctx.intermediates, None
    return intermediates


def _norm_act_grads(grad, out, mean, var, weight, bias, y, eps, num_groups, activation, negative_slope, approximate,
                    needs):
    """(g_out, g_weight, g_bias) of y = act(norm(out)) with out's batch statistics mean / var,
    where needs asks: the activation's backward, then aten's fused BatchNorm / GroupNorm one."""
    from .norm_act import normalize_one_pass
    z = (normalize_one_pass(out, mean, var, eps, weight, bias)
         if _needs_pre_activation(activation, negative_slope) else None)
    g_z = _activation_backward(grad, y, z, activation, negative_slope, approximate)
    del z  # (the recomputed pre-activation: gone before the norm's backward allocates its gradient)
    rstd = (var + eps).rsqrt()
    if num_groups == 0:
        return _batch_norm_grads(g_z, out, weight, mean, rstd, eps, needs)
    return _group_norm_grads_of_stats(g_z, out, mean, rstd, weight, num_groups, needs)


def _batch_norm_grads(grad, out, weight, mean, rstd, eps, needs):
    """aten's fused BatchNorm backward with batch statistics: (g_out, g_weight, g_bias), None where
    needs leaves one out (CUDA's kernel returns the parameters' gradients regardless of the mask,
    which autograd rejects for a parameter that is None)."""
    grads = torch.ops.aten.native_batch_norm_backward(grad, out, weight, None, None, mean, rstd, True, eps, needs)
    return tuple(g if need else None for g, need in zip(grads, needs))


def _norm_act_chain(eps, num_groups, activation, negative_slope, approximate):
    """act(norm(out, weight, bias)) with out's batch statistics, in differentiable torch ops."""
    from .norm_act import activation_fn
    act = activation_fn(activation, negative_slope, approximate)

    def chain(out, weight, bias):
        return act(F.batch_norm(out, None, None, weight, bias, True, 0.0, eps) if num_groups == 0
                   else group_norm(out, num_groups, weight, bias, eps))
    return chain


class BatchNormChainOfBatchStats(torch.autograd.Function):
    """``group_norm(max_pool2d(tanh(batch_norm(out))))`` in eager training, batch_norm with out's
    own per-channel batch statistics mean / var, as aten's ops, keeping what their backward needs
    (as eager PyTorch does: the tail op keeps no intermediate, so its backward recomputes the
    pooling); backward is aten's group-norm, max-pool, tanh and fused BatchNorm backward, the
    statistics' dependence on out included. Its intermediates (the tanh output, the pooled tensor
    and its indices) leave the node as backward uses them, as eager PyTorch's nodes free theirs; a
    second backward through a retained graph recomputes them. A backward that is itself
    differentiated recomputes the chain with torch ops instead."""

    @staticmethod
    def forward(ctx, out, mean, var, bn_weight, bn_bias, gn_weight, gn_bias, bn_eps, pool_args, num_groups, gn_eps):
        act, pooled, indices = BatchNormChainOfBatchStats._tail_inputs(out, mean, var, bn_weight, bn_bias, bn_eps,
                                                                       pool_args)
        n, c = pooled.shape[0], pooled.shape[1]
        y, gn_mean, gn_rstd = torch.ops.aten.native_group_norm(pooled, gn_weight, gn_bias, n, c, pooled[0, 0].numel(),
                                                               num_groups, gn_eps)
        ctx.save_for_backward(out, mean, var, bn_weight, bn_bias, gn_weight, gn_bias, gn_mean, gn_rstd)
        ctx.intermediates = [act, pooled, indices]  # made here: on ctx, which backward can drop
        ctx.args = (bn_eps, pool_args, num_groups, gn_eps)
        return y

    @staticmethod
    def _tail_inputs(out, mean, var, bn_weight, bn_bias, bn_eps, pool_args):
        """The tanh output, and the pooled tensor (in _group_norm_layout: aten's kernel asks it) and its indices."""
        act = torch.tanh(F.batch_norm(out, mean, var, bn_weight, bn_bias, False, 0.0, bn_eps))
        pooled, indices = torch.ops.aten.max_pool2d_with_indices(act, *pool_args)
        return act, pooled.contiguous(memory_format=_group_norm_layout(pooled)), indices

    @staticmethod
    def backward(ctx, grad):
        out, mean, var, bn_weight, bn_bias, gn_weight, gn_bias, gn_mean, gn_rstd = ctx.saved_tensors
        bn_eps, pool_args, num_groups, gn_eps = ctx.args
        needs = ctx.needs_input_grad
        wanted = [needs[0], needs[3] and bn_weight is not None, needs[4] and bn_bias is not None,
                  needs[5] and gn_weight is not None, needs[6] and gn_bias is not None]
        if torch.is_grad_enabled():  # double backward: torch ops, differentiable
            _released(ctx)

            def chain(out, bn_weight, bn_bias, gn_weight, gn_bias):
                z = F.batch_norm(out, None, None, bn_weight, bn_bias, True, 0.0, bn_eps)
                return group_norm(F.max_pool2d(torch.tanh(z), *pool_args), num_groups, gn_weight, gn_bias, gn_eps)
            g_x, g_bn_w, g_bn_b, g_gn_w, g_gn_b = _grads_of(chain, (out, bn_weight, bn_bias, gn_weight, gn_bias),
                                                              grad, wanted)
            return g_x, None, None, g_bn_w, g_bn_b, g_gn_w, g_gn_b, None, None, None, None
        act, pooled, indices = _released(ctx) or BatchNormChainOfBatchStats._tail_inputs(
            out, mean, var, bn_weight, bn_bias, bn_eps, pool_args)
        g_pooled, g_gn_w, g_gn_b = _group_norm_grads_of_stats(grad, pooled, gn_mean, gn_rstd, gn_weight, num_groups,
                                                         [any(wanted[:3]), wanted[3], wanted[4]])
        del pooled
        g_x = g_bn_w = g_bn_b = None
        if any(wanted[:3]):
            g_act = torch.ops.aten.max_pool2d_with_indices_backward(g_pooled, act, *pool_args, False, indices)
            del g_pooled, indices
            g_z = torch.ops.aten.tanh_backward(g_act, act)
            del g_act, act  # (each freed once read, as eager PyTorch's nodes have freed theirs by then)
            g_x, g_bn_w, g_bn_b = _batch_norm_grads(g_z, out, bn_weight, mean, (var + bn_eps).rsqrt(), bn_eps,
                                                    wanted[:3])
        return g_x, None, None, g_bn_w, g_bn_b, g_gn_w, g_gn_b, None, None, None, None


def group_norm(x: Tensor, num_groups: int, weight: Optional[Tensor], bias: Optional[Tensor], eps: float) -> Tensor:
    """F.group_norm, differentiable with a bias but no weight too (aten's backward fails on that)."""
    if weight is None and bias is not None:
        return F.group_norm(x, num_groups, None, None, eps) + bias.reshape([1, -1] + [1] * (x.dim() - 2))
    return F.group_norm(x, num_groups, weight, bias, eps)


def _grads_of(fn, inputs, grad, wanted):
    """The gradients of fn(*inputs) for grad, differentiable, at the inputs wanted (None elsewhere)."""
    chosen = [t for t, w in zip(inputs, wanted) if w]
    grads = iter(torch.autograd.grad(fn(*inputs), chosen, grad, create_graph=True))
    return tuple(next(grads) if w else None for w in wanted)
