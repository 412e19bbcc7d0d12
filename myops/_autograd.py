"""Autograd formulas for the myops ops (torch.library.register_autograd; on CPU and CUDA called from
the ops' C++ Autograd kernel, csrc/autograd_entry.cpp, for the calls that need a gradient).

Backward is written with aten ops (convolution_backward, gelu_backward, native_group_norm_backward),
so it is correct for every argument combination and traceable by torch.compile / AOTAutograd.
Where aten's backward op has no derivative of its own (native_group_norm_backward, silu_backward),
a backward that is itself recorded (create_graph=True: gradient penalties) uses torch ops instead.
group_norm and the fused op save only their inputs and recompute the cheap intermediates
(conv output, GELU, mean / rstd) in backward, like activation checkpointing: the fused op's
memory saving survives training.
"""
import math

import torch
import torch._prims_common as prims_common

from . import _C

aten = torch.ops.aten


def _register(qualname, backward, setup_context, unused_grads_as_none=False):
    """torch.library.register_autograd's formula for op qualname, on every device; on CPU and CUDA
    the op's C++ Autograd kernel (csrc/autograd_entry.cpp) takes each call first and hands only
    the calls that need a gradient to _formula's kernel. unused_grads_as_none: backward takes None
    (not zeros) for the outputs no gradient reached, in eager mode (saves its passes over them)."""
    torch.library.register_autograd(qualname, backward, setup_context=setup_context)
    _C._set_autograd_formula(qualname, _formula(torch._library.utils.lookup_op(qualname), backward, setup_context,
                                                unused_grads_as_none))


def _formula(op, backward, setup_context, unused_grads_as_none=False):
    """The Python kernel that register_autograd builds (torch._library.autograd.make_autograd_impl),
    called as kernel(keyset, *args, **keyword_only_args), less its per-call fill_defaults: the C++
    kernel passes every argument, and fill_defaults rebuilds the schema's argument list once per
    argument (on small calls, more host time than the op itself takes). It uses torch
    internals that make_autograd_impl uses (not public API: a torch that changes them fails here)."""
    schema = op._schema
    if any(torch._library.utils.is_tensorlist_like_type(a.type) for a in (*schema.arguments, *schema.returns)):
        raise NotImplementedError(f"myops: {op}: tensor-list arguments need make_autograd_impl's wrapper")
    keyword_only = any(a.kwarg_only for a in schema.arguments)
    below_autograd = torch._C._after_autograd_keyset

    class Formula(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):  # args: the op's positional arguments, then (keyset, keyword-only arguments)
            (keyset, kwargs), args = args[-1], args[:-1]
            with torch._C._AutoDispatchBelowAutograd():
                output = op.redispatch(keyset & below_autograd, *args, **kwargs)
            ctx.set_materialize_grads(not unused_grads_as_none)
            if keyword_only:
                setup_context(ctx=ctx, inputs=args, keyword_only_inputs=kwargs, output=output)
            else:
                setup_context(ctx=ctx, inputs=args, output=output)
            return output

        @staticmethod
        def backward(ctx, *grads):
            needs_input_grad = ctx.needs_input_grad
            ctx.needs_input_grad = needs_input_grad[:-1]  # as the formula sees its op's arguments
            try:
                result = backward(ctx, *grads)
            finally:
                ctx.needs_input_grad = needs_input_grad
            return (*result, None) if isinstance(result, tuple) else (result, None)

    Formula.__name__ = f"GeneratedBackwardFor_{op._namespace}_{op._opname}_{op._overloadname}"

    def kernel(keyset, *args, **keyword_only_args):
        return Formula.apply(*args, (keyset, keyword_only_args))
    return kernel


def _hxw(t):
    return math.prod(t.shape[2:])


def _conv_grads(grad_conv, input, weight, bias_len, conv_args, mask):
    stride, padding, output_padding, groups, dilation = conv_args
    bias_sizes = None if bias_len is None else [bias_len]
    return aten.convolution_backward(
        grad_conv, _canonical_strides(input), _canonical_strides(weight), bias_sizes, stride, padding, dilation,
        True, output_padding, groups,
        [mask[0], mask[1], mask[2] and bias_len is not None])


def _canonical_strides(t):
    """t, or a view of it whose size-1 dimensions have the strides of its memory format.
    cuDNN picks the gradients' memory format from the input's and weight's strides, size-1
    dimensions included; torch.compile treats those strides as free, so its prediction of the
    gradients' layout and the kernel's could differ (e.g. a [N, C, 1, 1] latent)."""
    if t.dim() != 4 or 1 not in t.shape[1:]:
        return t
    for memory_format, strides_for in ((torch.contiguous_format, prims_common.make_contiguous_strides_for),
                                       (torch.channels_last, prims_common.make_channels_last_strides_for)):
        if t.is_contiguous(memory_format=memory_format):
            return t.as_strided(t.shape, strides_for(t.shape), t.storage_offset())
    return t


def _group_norm_grads(grad, x, num_groups, gamma, eps, mask):
    if torch.is_grad_enabled():  # a backward that is itself differentiated (create_graph=True)
        return _group_norm_grads_composite(grad, x, num_groups, gamma, eps, mask)
    x = x.contiguous(memory_format=_group_norm_layout(x))
    _, mean, rstd = aten.native_group_norm(x, gamma, None, x.shape[0], x.shape[1], _hxw(x), num_groups, eps)
    return _group_norm_grads_of_stats(grad, x, mean, rstd, gamma, num_groups, mask)


def _group_norm_grads_of_stats(grad, x, mean, rstd, gamma, num_groups, mask):
    """(g_x, g_gamma, g_beta) of GroupNorm over x [N, C, *] with its statistics mean / rstd
    [N, num_groups], where mask asks: aten's backward kernel, x and grad in _group_norm_layout."""
    layout = _group_norm_layout(x)
    x, grad = x.contiguous(memory_format=layout), grad.contiguous(memory_format=layout)
    gx, ggamma, _ = aten.native_group_norm_backward(grad, x, mean, rstd, gamma, x.shape[0], x.shape[1], _hxw(x),
                                                    num_groups, [mask[0], mask[1], False])
    # beta's gradient is a plain channel sum; aten's backward fails on it when gamma is None
    gbeta = grad.sum(dim=[0, *range(2, grad.dim())]) if mask[2] else None
    return gx, ggamma, gbeta


def _group_norm_layout(x) -> torch.memory_format:
    """The one memory format aten's group-norm kernels take x and its gradient in (the backward
    reads the gradient as laid out like x): channels-last where x lies so on the CPU, else
    contiguous (a channels-last x is rejected on CUDA)."""
    channels_last = (x.device.type == "cpu" and x.dim() == 4 and not x.is_contiguous()
                     and x.is_contiguous(memory_format=torch.channels_last))
    return torch.channels_last if channels_last else torch.contiguous_format


def _group_norm_grads_composite(grad, x, num_groups, gamma, eps, mask):
    """_group_norm_grads in differentiable torch ops (aten's native_group_norm_backward has no
    derivative): g_x = rstd (g_xhat - E[g_xhat] - xhat E[g_xhat xhat]) per (sample, group)."""
    n, c = x.shape[0], x.shape[1]
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    channel = [1, c] + [1] * (x.dim() - 2)
    grouped = [n, num_groups, -1]
    xg = x.to(ct).reshape(grouped)
    var, mean = torch.var_mean(xg, dim=-1, keepdim=True, correction=0)
    rstd = (var + eps).rsqrt()
    xhat = ((xg - mean) * rstd).reshape(x.shape)
    g = grad.to(ct)
    gx = ggamma = gbeta = None
    if mask[0]:
        g_xhat = (g * gamma.to(ct).reshape(channel) if gamma is not None else g).reshape(grouped)
        xhat_g = xhat.reshape(grouped)
        gx = rstd * (g_xhat - g_xhat.mean(-1, keepdim=True) - xhat_g * (g_xhat * xhat_g).mean(-1, keepdim=True))
        gx = gx.reshape(x.shape).to(x.dtype)
    reduce_dims = [0, *range(2, x.dim())]
    if mask[1]:
        ggamma = (g * xhat).sum(reduce_dims).to(gamma.dtype)
    if mask[2]:
        gbeta = g.sum(reduce_dims).to(grad.dtype)
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


_register("myops::conv_transpose2d", _conv_backward, setup_context=_conv_setup)


# --- gelu -------------------------------------------------------------------------------------
def _gelu_setup(ctx, inputs, keyword_only_inputs, output):
    (self,) = inputs
    ctx.save_for_backward(self)
    ctx.approximate = keyword_only_inputs.get("approximate", "none")


def _gelu_backward(ctx, grad):
    (self,) = ctx.saved_tensors
    return aten.gelu_backward(grad, self, approximate=ctx.approximate)


_register("myops::gelu", _gelu_backward, setup_context=_gelu_setup)


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


_register("myops::group_norm", _group_norm_backward, setup_context=_group_norm_setup)


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


_register(
    "myops::conv_transpose2d_gelu_group_norm", _fused_backward, setup_context=_fused_setup)


# --- conv_transpose2d_gelu_group_stats ---------------------------------------------------------
# act = gelu(conv), mean = E[act], rstd = (E[(act - mean)^2] + eps)^-1/2 per (n, group) over its
# M values: the statistics' gradients fold into act's: g_act + g_mean / M - g_rstd rstd^3 (act - mean) / M.
def _fused_stats_setup(ctx, inputs, output):
    (input, weight, bias, stride, padding, output_padding, groups, dilation, approximate, num_groups, eps) = inputs
    act, mean, rstd = output
    ctx.save_for_backward(input, weight, bias, act, mean, rstd)
    ctx.conv_args = (stride, padding, output_padding, groups, dilation)
    ctx.bias_len = None if bias is None else bias.shape[0]
    ctx.approximate = approximate


def _fused_stats_backward(ctx, g_act, g_mean, g_rstd):
    input, weight, bias, act, mean, rstd = ctx.saved_tensors
    n, groups = mean.shape[0], mean.shape[1]
    grouped = [n, groups, math.prod(act.shape[1:]) // groups]
    per_group = grouped[2]  # M (a SymInt under dynamic shapes)
    g = torch.zeros_like(act, dtype=mean.dtype) if g_act is None else g_act.to(mean.dtype)
    g = g.reshape(grouped)
    if g_mean is not None:
        g = g + (g_mean / per_group).unsqueeze(-1)
    if g_rstd is not None:
        centered = act.reshape(grouped).to(mean.dtype) - mean.unsqueeze(-1)
        g = g - (g_rstd * rstd ** 3 / per_group).unsqueeze(-1) * centered
    gi = gw = gb = None
    needs = ctx.needs_input_grad
    if any(needs[:3]):
        conv = torch.ops.myops.conv_transpose2d(input, weight, bias, *ctx.conv_args)
        g_conv = aten.gelu_backward(g.reshape(act.shape).to(act.dtype), conv, approximate=ctx.approximate)
        gi, gw, gb = _conv_grads(g_conv, input, weight, ctx.bias_len, ctx.conv_args, needs[:3])
    return gi, gw, gb, None, None, None, None, None, None, None, None


_register(
    "myops::conv_transpose2d_gelu_group_stats", _fused_stats_backward, setup_context=_fused_stats_setup)


# --- conv_transpose2d_channel_stats -----------------------------------------------------------
# out, mean = E[out], var = E[(out - mean)^2] over (N, H, W): the statistics' gradients fold into
# the conv output's gradient: g_out + g_mean / M + g_var * 2 (out - mean) / M.
def _channel_stats_setup(ctx, inputs, output):
    input, weight, bias, stride, padding, output_padding, groups, dilation = inputs
    out, mean, _ = output
    ctx.save_for_backward(input, weight, out, mean)
    ctx.conv_args = (stride, padding, output_padding, groups, dilation)
    ctx.bias_len = None if bias is None else bias.shape[0]


def _channel_stats_backward(ctx, g_out, g_mean, g_var):
    input, weight, out, mean = ctx.saved_tensors
    gi, gw, gb = _channel_stats_grads(input, weight, out, mean, g_out, g_mean, g_var, ctx.bias_len, ctx.conv_args,
                                      ctx.needs_input_grad[:3])
    return gi, gw, gb, None, None, None, None, None


def _channel_stats_grads(input, weight, out, mean, g_out, g_mean, g_var, bias_len, conv_args, mask):
    g = _fold_stats_grads(out, mean, g_out, g_mean, g_var, "channel")
    return _conv_grads(g, input, weight, bias_len, conv_args, mask)


# (the statistics of an eager training call reach no gradient where the chain's fused backward folds them in)
_register("myops::conv_transpose2d_channel_stats", _channel_stats_backward, setup_context=_channel_stats_setup,
          unused_grads_as_none=True)


# --- batch_norm_tanh_max_pool2d_group_norm ----------------------------------------------------
# Saves its inputs and recomputes the chain in the compute dtype (as the kernels do); max-pool
# gradients go through aten's max_pool2d_with_indices_backward, so they reach the arg-max
# positions exactly as PyTorch routes them (ties included).
def _bn_chain_setup(ctx, inputs, output):
    (input, mean, var, bn_weight, bn_bias, bn_eps, kernel_size, pool_stride, pool_padding,
     pool_dilation, num_groups, gn_weight, gn_bias, gn_eps) = inputs
    ctx.save_for_backward(input, mean, var, bn_weight, bn_bias, gn_weight)
    ctx.bn_eps, ctx.gn_eps, ctx.num_groups = bn_eps, gn_eps, num_groups
    ctx.pool = (kernel_size, pool_stride, pool_padding, pool_dilation)
    ctx.has_gn_bias = gn_bias is not None


def _bn_chain_backward(ctx, grad):
    input, mean, var, bn_weight, bn_bias, gn_weight = ctx.saved_tensors
    g_in, g_mean, g_var, g_bn_w, g_bn_b, g_gn_w, g_gn_b = _bn_chain_grads(
        grad, input, mean, var, bn_weight, bn_bias, gn_weight, ctx.has_gn_bias, ctx.bn_eps, ctx.gn_eps,
        ctx.num_groups, ctx.pool, ctx.needs_input_grad)
    return (g_in, g_mean, g_var, g_bn_w, g_bn_b, None, None, None, None, None, None, g_gn_w, g_gn_b, None)


def _bn_chain_grads(grad, input, mean, var, bn_weight, bn_bias, gn_weight, has_gn_bias, bn_eps, gn_eps,
                    num_groups, pool, needs):
    """Gradients of batch_norm_tanh_max_pool2d_group_norm's tensor inputs; needs: which, indexed
    as its inputs."""
    ct = torch.float64 if input.dtype == torch.float64 else torch.float32
    dims = [0, 2, 3]

    def per_channel(t):
        return t.to(ct).view(1, -1, 1, 1)

    x = input.to(ct)
    centered = x - per_channel(mean)
    rstd = per_channel((var.to(ct) + bn_eps).rsqrt())
    xhat = centered * rstd
    w = per_channel(bn_weight) if bn_weight is not None else None
    xn = xhat * w if w is not None else xhat
    act = torch.tanh(xn + per_channel(bn_bias) if bn_bias is not None else xn)
    kernel_size, stride, padding, dilation = pool
    pooled, indices = aten.max_pool2d_with_indices(act, kernel_size, stride, padding, dilation, False)
    gn_w = gn_weight.to(ct) if gn_weight is not None else None
    gn_mask = [any(needs[:5]), needs[11] and gn_weight is not None, needs[12] and has_gn_bias]
    g_pooled, g_gn_w, g_gn_b = _group_norm_grads(grad.to(ct), pooled, num_groups, gn_w, gn_eps, gn_mask)
    g_in = g_mean = g_var = g_bn_w = g_bn_b = None
    if any(needs[:5]):
        g_act = aten.max_pool2d_with_indices_backward(g_pooled, act, kernel_size, stride, padding, dilation,
                                                      False, indices)
        g_xn = g_act * (1 - act * act)
        if needs[4] and bn_bias is not None:
            g_bn_b = g_xn.sum(dims).to(bn_bias.dtype)
        if needs[3] and bn_weight is not None:
            g_bn_w = (g_xn * xhat).sum(dims).to(bn_weight.dtype)
        g_xhat = g_xn * w if w is not None else g_xn
        g_x = g_xhat * rstd
        if needs[0]:
            g_in = g_x.to(input.dtype)
        if needs[1]:
            g_mean = (-g_x.sum(dims)).to(mean.dtype)
        if needs[2]:
            g_var = ((g_xhat * centered).sum(dims) * (-0.5) * rstd.view(-1) ** 3).to(var.dtype)
    if g_gn_w is not None:
        g_gn_w = g_gn_w.to(gn_weight.dtype)
    if g_gn_b is not None:
        g_gn_b = g_gn_b.to(input.dtype)
    return g_in, g_mean, g_var, g_bn_w, g_bn_b, g_gn_w, g_gn_b


_register(
    "myops::batch_norm_tanh_max_pool2d_group_norm", _bn_chain_backward, setup_context=_bn_chain_setup)


# --- conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm -------------------------------------
# The one-call op keeps no intermediate: backward recomputes the conv output (and, in training,
# the batch statistics) with the forward's own kernels, then runs the two ops' formulas above; the
# gradients of the returned batch statistics join those the chain sends to them.
def _conv_bn_chain_setup(ctx, inputs, output):
    (input, weight, bias, stride, padding, output_padding, groups, dilation, mean, var, bn_weight, bn_bias,
     training, bn_eps, kernel_size, pool_stride, pool_padding, pool_dilation, num_groups, gn_weight, gn_bias,
     gn_eps) = inputs
    ctx.save_for_backward(input, weight, bias, mean, var, bn_weight, bn_bias, gn_weight)
    ctx.conv_args = (stride, padding, output_padding, groups, dilation)
    ctx.bias_len = None if bias is None else bias.shape[0]
    ctx.training, ctx.bn_eps, ctx.gn_eps, ctx.num_groups = training, bn_eps, gn_eps, num_groups
    ctx.pool = (kernel_size, pool_stride, pool_padding, pool_dilation)
    ctx.has_gn_bias = gn_bias is not None


def _conv_bn_chain_backward(ctx, g_y, g_batch_mean, g_batch_var):
    input, weight, bias, mean, var, bn_weight, bn_bias, gn_weight = ctx.saved_tensors
    needs = ctx.needs_input_grad
    conv_mask = needs[:3]
    if ctx.training:
        out, mean, var = torch.ops.myops.conv_transpose2d_channel_stats(input, weight, bias, *ctx.conv_args)
        stats_needs = (any(conv_mask),) * 2
    else:
        out = torch.ops.myops.conv_transpose2d(input, weight, bias, *ctx.conv_args)
        stats_needs = (needs[8], needs[9])
    # the tail op's inputs: (input, mean, var, bn_weight, bn_bias, 6 scalars, gn_weight, gn_bias, gn_eps)
    tail_needs = (any(conv_mask), *stats_needs, needs[10], needs[11]) + (False,) * 6 + (needs[19], needs[20], False)
    g_out, g_mean, g_var, g_bn_w, g_bn_b, g_gn_w, g_gn_b = _bn_chain_grads(
        g_y, out, mean, var, bn_weight, bn_bias, gn_weight, ctx.has_gn_bias, ctx.bn_eps, ctx.gn_eps,
        ctx.num_groups, ctx.pool, tail_needs)
    gi = gw = gb = None
    if ctx.training:
        if g_batch_mean is not None:
            g_mean = g_batch_mean if g_mean is None else g_mean + g_batch_mean
        if g_batch_var is not None:
            g_var = g_batch_var if g_var is None else g_var + g_batch_var
        if any(conv_mask):
            gi, gw, gb = _channel_stats_grads(input, weight, out, mean, g_out, g_mean, g_var, ctx.bias_len,
                                              ctx.conv_args, conv_mask)
        g_mean = g_var = None  # no mean / var inputs in training
    elif any(conv_mask):
        gi, gw, gb = _conv_grads(g_out, input, weight, ctx.bias_len, ctx.conv_args, conv_mask)
    return (gi, gw, gb, None, None, None, None, None, g_mean, g_var, g_bn_w, g_bn_b, None, None, None, None, None,
            None, None, g_gn_w, g_gn_b, None)


_register(
    "myops::conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm", _conv_bn_chain_backward,
    setup_context=_conv_bn_chain_setup)


# --- conv_transpose2d_act_stats ---------------------------------------------------------------
# out = act(conv); mean = E[out], var = E[(out - mean)^2] per channel over (N, H, W) or per
# (sample, group): the statistics' gradients fold into out's (g_out + g_mean / M + g_var * 2 (out
# - mean) / M), which then goes through the activation's backward and the conv's.
def _act_stats_setup(ctx, inputs, output):
    (input, weight, bias, stride, padding, output_padding, groups, dilation, activation, negative_slope,
     approximate, stats, num_groups) = inputs
    out, mean, _ = output
    ctx.save_for_backward(input, weight, bias, out, mean)
    ctx.conv_args = (stride, padding, output_padding, groups, dilation)
    ctx.bias_len = None if bias is None else bias.shape[0]
    ctx.activation = (activation, negative_slope, approximate)
    ctx.stats = stats


def _fold_stats_grads(out, mean, g_out, g_mean, g_var, stats):
    """The gradient reaching out through itself and its statistics (see above), in out's dtype."""
    if stats == "none" or (g_mean is None and g_var is None):
        return torch.zeros_like(out) if g_out is None else g_out
    g = torch.zeros_like(out, dtype=mean.dtype) if g_out is None else g_out.to(mean.dtype)
    if stats == "channel":
        shape, count = [1, -1, 1, 1], out.numel() // max(out.shape[1], 1)
        grouped = out.shape
    else:
        n, groups = mean.shape[0], mean.shape[1]
        grouped = [n, groups, math.prod(out.shape[1:]) // groups]
        shape, count = [n, groups, 1], grouped[2]
        g = g.reshape(grouped)
    if g_mean is not None:
        g = g + g_mean.reshape(shape) / count
    if g_var is not None:
        # (tensor / SymInt, not a Python float from the SymInt: dynamic shapes keep it symbolic)
        centred = out.reshape(grouped).to(mean.dtype) - mean.reshape(shape)
        g = g + g_var.reshape(shape) * 2 * centred / count
    return g.reshape(out.shape).to(out.dtype)


def _needs_pre_activation(activation, negative_slope) -> bool:
    """Whether the activation's backward needs its input, not only its output: gelu and silu, and
    leaky_relu with a negative slope (a slope >= 0 keeps the sign: out > 0 exactly where conv > 0)."""
    return activation in ("gelu", "silu") or (activation == "leaky_relu" and negative_slope < 0)


def _activation_backward(g, out, conv, activation, negative_slope, approximate):
    """g through the activation: out = activation(conv) (conv needed where _needs_pre_activation)."""
    if activation == "none":
        return g
    if activation == "relu":
        return aten.threshold_backward(g, out, 0)
    if activation == "tanh":
        return aten.tanh_backward(g, out)
    if activation == "sigmoid":
        return aten.sigmoid_backward(g, out)
    if activation == "gelu":
        return aten.gelu_backward(g, conv, approximate=approximate)
    if activation == "silu":
        if torch.is_grad_enabled():  # aten's silu_backward has no derivative
            s = torch.sigmoid(conv)
            return g * s * (1 + conv * (1 - s))
        return aten.silu_backward(g, conv)
    if conv is None:
        return aten.leaky_relu_backward(g, out, negative_slope, True)
    return aten.leaky_relu_backward(g, conv, negative_slope, False)


def _act_stats_backward(ctx, g_out, g_mean, g_var):
    input, weight, bias, out, mean = ctx.saved_tensors
    needs = ctx.needs_input_grad[:3]
    gi = gw = gb = None
    if any(needs):
        g = _fold_stats_grads(out, mean, g_out, g_mean, g_var, ctx.stats)
        activation = ctx.activation[0]
        conv = (torch.ops.myops.conv_transpose2d(input, weight, bias, *ctx.conv_args)
                if _needs_pre_activation(activation, ctx.activation[1]) else None)
        g_conv = _activation_backward(g, out, conv, *ctx.activation)
        gi, gw, gb = _conv_grads(g_conv, input, weight, ctx.bias_len, ctx.conv_args, needs)
    return gi, gw, gb, None, None, None, None, None, None, None, None, None, None


# (the statistics of an eager training call reach no gradient where norm_act's backward folds them in)
_register("myops::conv_transpose2d_act_stats", _act_stats_backward, setup_context=_act_stats_setup,
          unused_grads_as_none=True)


# --- normalize_act ------------------------------------------------------------------------------
# out = act(z), z = (x - mean) * scale + shift with [N, C] parameters: g_z through the activation,
# then g_x = g_z scale and the parameters' gradients summed over each (sample, channel)'s values.
def _normalize_act_setup(ctx, inputs, output):
    input, mean, scale, shift, activation, negative_slope, approximate = inputs
    ctx.save_for_backward(input, mean, scale, shift, output)
    ctx.activation = (activation, negative_slope, approximate)


def _normalize_act_backward(ctx, grad):
    input, mean, scale, shift, out = ctx.saved_tensors
    params = [input.shape[0], input.shape[1]] + [1] * (input.dim() - 2)
    centred = input.to(mean.dtype) - mean.reshape(params)
    z = centred * scale.reshape(params) + shift.reshape(params)
    g_z = _activation_backward(grad.to(z.dtype), out.to(z.dtype), z, *ctx.activation)
    needs = ctx.needs_input_grad
    spatial = list(range(2, input.dim()))
    g_scaled = g_z * scale.reshape(params)
    gi = g_scaled.to(input.dtype) if needs[0] else None
    g_mean = -g_scaled.sum(spatial) if needs[1] else None
    g_scale = (g_z * centred).sum(spatial) if needs[2] else None
    g_shift = g_z.sum(spatial) if needs[3] else None
    return gi, g_mean, g_scale, g_shift, None, None, None


_register("myops::normalize_act", _normalize_act_backward, setup_context=_normalize_act_setup)
