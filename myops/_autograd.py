"""Autograd formulas for the myops ops (torch.library.register_autograd).

Backward is written with aten ops (convolution_backward, gelu_backward, native_group_norm_backward),
so it is correct for every argument combination and traceable by torch.compile / AOTAutograd.
group_norm and the fused op save only their inputs and recompute the cheap intermediates
(conv output, GELU, mean / rstd) in backward, like activation checkpointing: the fused op's
memory saving survives training.
"""
import math

import torch

aten = torch.ops.aten


def _hxw(t):
    return math.prod(t.shape[2:])


def _conv_grads(grad_conv, input, weight, bias_len, conv_args, mask):
    stride, padding, output_padding, groups, dilation = conv_args
    bias_sizes = None if bias_len is None else [bias_len]
    return aten.convolution_backward(
        grad_conv, input, weight, bias_sizes, stride, padding, dilation, True, output_padding, groups,
        [mask[0], mask[1], mask[2] and bias_len is not None])


def _group_norm_grads(grad, x, num_groups, gamma, eps, mask):
    n, c = x.shape[0], x.shape[1]
    hxw = _hxw(x)
    # aten's kernels want both in one (plain) layout; a channels_last x would be rejected on CUDA
    x, grad = x.contiguous(), grad.contiguous()
    _, mean, rstd = aten.native_group_norm(x, gamma, None, n, c, hxw, num_groups, eps)
    gx, ggamma, _ = aten.native_group_norm_backward(
        grad, x, mean, rstd, gamma, n, c, hxw, num_groups,
        [mask[0], mask[1], False])
    # beta's gradient is a plain channel sum; aten's backward fails on it when gamma is None
    gbeta = grad.sum(dim=[0, *range(2, grad.dim())]) if mask[2] else None
    return gx, ggamma, gbeta


# --- conv_transpose2d -------------------------------------------------------------------------
def _conv_setup(ctx, inputs, output):
    input, weight, bias, stride, padding, output_padding, groups, dilation = inputs
    ctx.save_for_backward(input, weight)
    ctx.conv_args = (stride, padding, output_padding, groups, dilation)
    ctx.bias_len = None if bias is None else bias.shape[0]


def _conv_backward(ctx, grad):
    input, weight = ctx.saved_tensors
    gi, gw, gb = _conv_grads(grad, input, weight, ctx.bias_len, ctx.conv_args,
                             ctx.needs_input_grad[:3])
    return gi, gw, gb, None, None, None, None, None


torch.library.register_autograd("myops::conv_transpose2d", _conv_backward, setup_context=_conv_setup)


# --- gelu -------------------------------------------------------------------------------------
def _gelu_setup(ctx, inputs, keyword_only_inputs, output):
    (self,) = inputs
    ctx.save_for_backward(self)
    ctx.approximate = keyword_only_inputs.get("approximate", "none")


def _gelu_backward(ctx, grad):
    (self,) = ctx.saved_tensors
    return aten.gelu_backward(grad, self, approximate=ctx.approximate)


torch.library.register_autograd("myops::gelu", _gelu_backward, setup_context=_gelu_setup)


# --- group_norm -------------------------------------------------------------------------------
def _group_norm_setup(ctx, inputs, output):
    input, num_groups, weight, bias, eps = inputs
    ctx.save_for_backward(input, weight)
    ctx.num_groups, ctx.eps, ctx.has_bias = num_groups, eps, bias is not None


def _group_norm_backward(ctx, grad):
    input, weight = ctx.saved_tensors
    needs = ctx.needs_input_grad
    mask = [needs[0], needs[2] and weight is not None, needs[3] and ctx.has_bias]
    gi, gw, gb = _group_norm_grads(grad, input, ctx.num_groups, weight, ctx.eps, mask)
    return gi, None, gw, gb, None


torch.library.register_autograd("myops::group_norm", _group_norm_backward, setup_context=_group_norm_setup)


# --- conv_transpose2d_gelu_group_norm ---------------------------------------------------------
def _fused_setup(ctx, inputs, output):
    (input, weight, bias, stride, padding, output_padding, groups, dilation,
     approximate, num_groups, gn_weight, gn_bias, eps) = inputs
    ctx.save_for_backward(input, weight, bias, gn_weight)
    ctx.conv_args = (stride, padding, output_padding, groups, dilation)
    ctx.bias_len = None if bias is None else bias.shape[0]
    ctx.approximate, ctx.num_groups, ctx.eps = approximate, num_groups, eps
    ctx.has_gn_bias = gn_bias is not None


def _fused_backward(ctx, grad):
    input, weight, bias, gn_weight = ctx.saved_tensors
    needs = ctx.needs_input_grad
    conv = torch.ops.myops.conv_transpose2d(input, weight, bias, *ctx.conv_args)
    act = aten.gelu(conv, approximate=ctx.approximate)
    gn_mask = [any(needs[:3]), needs[10] and gn_weight is not None, needs[11] and ctx.has_gn_bias]
    g_act, g_gn_weight, g_gn_bias = _group_norm_grads(grad, act, ctx.num_groups, gn_weight, ctx.eps, gn_mask)
    gi = gw = gb = None
    if any(needs[:3]):
        g_conv = aten.gelu_backward(g_act, conv, approximate=ctx.approximate)
        gi, gw, gb = _conv_grads(g_conv, input, weight, ctx.bias_len, ctx.conv_args, needs[:3])
    return gi, gw, gb, None, None, None, None, None, None, None, g_gn_weight, g_gn_bias, None


torch.library.register_autograd(
    "myops::conv_transpose2d_gelu_group_norm", _fused_backward, setup_context=_fused_setup)
