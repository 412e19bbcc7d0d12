"""The conv + normalisation + activation family: ``conv_transpose2d`` followed by a normalisation
(none, BatchNorm, InstanceNorm, GroupNorm) and an activation, in either order.

One op does the heavy part: ``myops.conv_transpose2d_act_stats`` runs the conv with bias, an
activation that comes before the normalisation, and the statistics the normalisation needs (per
channel, or per (sample, group)). The normalisation and an activation after it are torch ops on
the op's output and its small statistics tensors: under torch.compile Inductor fuses them with
their consumers into one pass over the output.
"""
import contextlib
import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _autocast, _norm_act_backward, _shapes
from ._autograd import _group_norm_layout, _needs_pre_activation
from ._sync_batch_norm import global_channel_stats, needs_sync
from .ops import (IntOrPair, _conv_args, _conv_output_hw, _eager, _one_row_args, group_norm_with_stats, per_channel,
                  update_running_stats)

_ACT_STATS = torch.ops.myops.conv_transpose2d_act_stats.default

NORMS = ("none", "batch_norm", "sync_batch_norm", "instance_norm", "group_norm")
ACTIVATIONS = _shapes.ACTIVATIONS
ORDERS = ("norm_act", "act_norm")
_NO_ACTIVATION = ("none", 0.01, "none")  # (activation, negative_slope, approximate)


def conv_transpose2d_act_stats(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOrPair = 1,
                               padding: IntOrPair = 0, output_padding: IntOrPair = 0, groups: int = 1,
                               dilation: IntOrPair = 1, *, activation: str = "none", negative_slope: float = 0.01,
                               approximate: str = "none", stats: str = "none",
                               num_groups: int = 1) -> Tuple[Tensor, Tensor, Tensor]:
    """``(out, mean, var)``: ``out = activation(conv_transpose2d(input, ...))`` as stored, and the
    mean and biased variance of ``out`` per channel over (N, H, W) (``stats="channel"``, [C]) or
    per (sample, group) (``stats="group"``, [N, num_groups]), in float32 (float64 for float64
    input); empty for ``stats="none"``. ``activation`` names ``torch.nn.functional``'s: none, gelu
    (with ``approximate``), silu, relu, leaky_relu (with ``negative_slope``), tanh, sigmoid."""
    op = "conv_transpose2d_act_stats"
    return _ACT_STATS(input, weight, bias, *_conv_args(op, stride, padding, output_padding, groups, dilation),
                      activation, float(negative_slope), approximate, stats, num_groups)


def activation_fn(name: str, negative_slope: float = 0.01, approximate: str = "none"):
    """The activation ``name`` as a function of one tensor (torch ops)."""
    return {
        "none": lambda x: x,
        "gelu": lambda x: F.gelu(x, approximate=approximate),
        "silu": F.silu,
        "relu": torch.relu,
        "leaky_relu": lambda x: F.leaky_relu(x, negative_slope),
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
    }[name]


def _fail(arg: str, msg: str, op: str = "conv_transpose2d_norm_act"):
    raise ValueError(f"myops.{op}: argument '{arg}' {msg}")


def conv_transpose2d_norm_act(
        input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOrPair = 1, padding: IntOrPair = 0,
        output_padding: IntOrPair = 0, groups: int = 1, dilation: IntOrPair = 1, *, norm: str = "none",
        activation: str = "none", order: str = "norm_act", num_groups: Optional[int] = None,
        norm_weight: Optional[Tensor] = None, norm_bias: Optional[Tensor] = None,
        running_mean: Optional[Tensor] = None, running_var: Optional[Tensor] = None, training: bool = True,
        momentum: Optional[float] = 0.1, eps: float = 1e-5, negative_slope: float = 0.01, approximate: str = "none",
        num_batches_tracked: Optional[Tensor] = None, return_conv: bool = False,
        process_group=None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """``activation(norm(conv_transpose2d(input, ...)))`` (``order="norm_act"``) or
    ``norm(activation(conv_transpose2d(input, ...)))`` (``order="act_norm"``).

    The conv arguments are :func:`myops.conv_transpose2d`'s. ``norm``:

    - ``"batch_norm"``: as ``F.batch_norm(x, running_mean, running_var, norm_weight, norm_bias,
      training, momentum, eps)``: in training the batch statistics normalise and the running
      buffers, when given, are updated in place as there (``momentum=None``: the cumulative
      average over ``num_batches_tracked``, as ``nn.BatchNorm2d``); ``num_batches_tracked``, when
      given, is incremented in training.
    - ``"sync_batch_norm"``: as ``nn.SyncBatchNorm``: batch_norm whose batch statistics, in
      training inside an initialised process group of more than one rank, are those of every
      rank's batch together (``process_group``, default the world; each rank calls it in step),
      the running buffers updated with them.
    - ``"instance_norm"``: as ``F.instance_norm(x, running_mean, running_var, norm_weight,
      norm_bias, use_input_stats=training, momentum, eps)``.
    - ``"group_norm"``: as ``F.group_norm(x, num_groups, norm_weight, norm_bias, eps)``.
    - ``"none"``.

    ``activation``: none, gelu (``approximate``), silu, relu, leaky_relu (``negative_slope``),
    tanh, sigmoid, as ``torch.nn.functional``'s. ``return_conv=True`` also returns the conv output
    (``order="norm_act"`` or no activation): ``(output, conv_output)``, for a conv output with a
    second consumer (a residual).
    """
    if norm not in NORMS:
        _fail("norm", f"must be one of {', '.join(map(repr, NORMS))}, got {norm!r}")
    if order not in ORDERS:
        _fail("order", f"must be 'norm_act' or 'act_norm', got {order!r}")
    if activation not in ACTIVATIONS:
        _fail("activation", f"must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    if not isinstance(negative_slope, (int, float)) or not math.isfinite(negative_slope):
        _fail("negative_slope", f"must be a finite number, got {negative_slope!r}")
    act_first = order == "act_norm" and activation != "none"
    if return_conv and act_first:
        _fail("return_conv", "needs order='norm_act' (the conv output is not kept where the activation comes first)")
    conv_args = _conv_args("conv_transpose2d_norm_act", stride, padding, output_padding, groups, dilation)
    if weight.dim() >= 2:
        _check_per_channel(input, weight.shape[1] * conv_args[3], norm_weight=norm_weight, norm_bias=norm_bias,
                           running_mean=running_mean, running_var=running_var)
    sync = norm == "sync_batch_norm" and needs_sync(training, process_group)
    norm = "batch_norm" if norm == "sync_batch_norm" else norm
    batch_stats = norm == "group_norm" or (norm in ("batch_norm", "instance_norm") and training)
    stats, groups_n = _stats_kind(norm, batch_stats, num_groups, running_mean, running_var, input, weight,
                                  conv_args)
    if (input.dim() == 4 and not _eager(input) and input.device.type == "cpu"
            and _cpu_graph_channels_last(stats, groups_n, weight.shape[1] * conv_args[3], input, weight, bias,
                                         norm_weight, norm_bias)):
        # traced (torch.compile) for the CPU: oneDNN's channels-last conv is the faster one, and
        # Inductor reads the output where it lies, as it does after its own convs (the weight too
        # goes channels-last in the graph: a copy Inductor generates, cheaper than oneDNN's own)
        input, weight = _channels_last(input, weight)
    saves_conv = act_first and stats != "none" and _saves_conv(activation, negative_slope, input, weight, bias)
    # the activation before the normalisation (computed by the conv op) and after it
    pre, post = (((activation, negative_slope, approximate), _NO_ACTIVATION) if act_first
                 else (_NO_ACTIVATION, (activation, negative_slope, approximate)))
    # eager training, the batch statistics' gradient by aten's fused norm backward: the conv and
    # what follows it as one autograd node (the conv op then runs without its own formula)
    one_node = (batch_stats and not sync and not return_conv and (saves_conv or not _needs_pre_activation(*pre[:2]))
                and _eager(input) and not torch.is_autocast_enabled(input.device.type)
                and _norm_act_backward.takes(input, weight, bias, norm_weight, norm_bias))
    conv = None  # (kept for the one node where pre's backward needs its input: then saves_conv)
    with torch.no_grad() if one_node else contextlib.nullcontext():
        if saves_conv:
            conv, out = _activation_saving_conv(input, weight, bias, conv_args, *pre)
        else:
            # (the call's own slope and approximation even where pre is none: the op checks them)
            out, mean, var = _ACT_STATS(input, weight, bias, *conv_args, pre[0], float(negative_slope), approximate,
                                        stats, groups_n)
    out_dtype = _autocast.group_norm_dtype(out) if norm == "group_norm" else out.dtype
    # eager training: aten's fused norm backward, the batch statistics' part included
    fused_backward = one_node or (_eager(out) and out_dtype == out.dtype and batch_stats and not sync
                                  and _norm_act_backward.takes(out, norm_weight, norm_bias))
    if saves_conv:
        mean, var = _statistics(out, stats, groups_n, differentiable=not fused_backward)
    if norm == "none":
        y = out if act_first else activation_fn(activation, negative_slope, approximate)(out)
        return (y, out) if return_conv else y
    count = None
    if sync:
        mean, var, count = global_channel_stats(mean, var, out.numel() // max(out.shape[1], 1), process_group)
    if batch_stats and running_mean is not None and running_var is not None:
        _update_running(norm, out, running_mean, running_var, mean, var, momentum, num_batches_tracked, count)
    elif norm == "batch_norm" and training and num_batches_tracked is not None:
        num_batches_tracked.add_(1)
    if not batch_stats:
        mean, var = running_mean, running_var
    num_groups_arg = groups_n if stats == "group" else 0
    if one_node:
        y = _norm_act_backward.ConvNormActOfBatchStats.apply(input, weight, bias, norm_weight, norm_bias, conv, out,
                                                             mean, var, conv_args, pre, eps, num_groups_arg, *post)
    elif fused_backward:
        y = _norm_act_backward.NormActOfBatchStats.apply(out, mean.detach(), var.detach(), norm_weight, norm_bias,
                                                         eps, num_groups_arg, *post)
    elif _eager(out) and out_dtype == out.dtype:
        y = normalize_one_pass(out, mean, var, eps, norm_weight, norm_bias, *post)
    else:
        y = normalize(out, mean, var, eps, norm_weight, norm_bias, activation_fn(*post), out_dtype)
    return (y, out) if return_conv else y


def gelu_group_norm_chain(input: Tensor, weight: Tensor, bias: Optional[Tensor], stride, padding, output_padding,
                          groups, dilation, approximate: str, num_groups: int, gn_weight: Optional[Tensor],
                          gn_bias: Optional[Tensor], eps: float, split_normalize: bool) -> Tensor:
    """ConvT -> GELU -> GroupNorm as the compile pass runs it (traced by AOTAutograd): in training,
    the family's form that saves the conv output (no conv in backward; see _saves_conv); else the
    fused op, or with split_normalize (GroupNorm parameters of another dtype, or pointwise
    consumers that Inductor fuses the normalisation into) its statistics op and the normalisation
    in torch ops."""
    conv_args = (stride, padding, output_padding, groups, dilation)
    if _saves_conv("gelu", 0.01, input, weight, bias):
        return conv_transpose2d_norm_act(input, weight, bias, *conv_args, norm="group_norm", activation="gelu",
                                         approximate=approximate, order="act_norm", num_groups=num_groups,
                                         norm_weight=gn_weight, norm_bias=gn_bias, eps=eps)
    if split_normalize:
        act, mean, rstd = torch.ops.myops.conv_transpose2d_gelu_group_stats(input, weight, bias, *conv_args,
                                                                             approximate, num_groups, eps)
        return group_norm_with_stats(act, mean, rstd, gn_weight, gn_bias)
    return torch.ops.myops.conv_transpose2d_gelu_group_norm(input, weight, bias, *conv_args, approximate, num_groups,
                                                            gn_weight, gn_bias, eps)


def _cpu_graph_channels_last(stats: str, num_groups: int, channels, *tensors: Optional[Tensor]) -> bool:
    """Whether a chain traced for the CPU runs channels-last in the graph: for inference, unless its
    GroupNorm has several channels per group (Inductor's CPU reductions per (sample, group) of a
    channels-last tensor are the slower); a training graph stays NCHW, where its backward (the
    conv's, the norm's reductions) ran faster on every chain measured, the conv op's own timed
    layout choice still picking oneDNN's faster kernel inside."""
    training = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    return not training and not (stats == "group" and num_groups < channels)


def _channels_last(input: Tensor, weight: Tensor) -> Tuple[Tensor, Tensor]:
    """A 4-D input and its conv weight (where 4-D) channels-last."""
    return (input.contiguous(memory_format=torch.channels_last),
            weight.contiguous(memory_format=torch.channels_last) if weight.dim() == 4 else weight)


def _saves_conv(activation: str, negative_slope: float, *tensors: Optional[Tensor]) -> bool:
    """Whether an act-first chain keeps its conv output for backward: in training (a gradient
    recorded), where the activation's backward needs its input (gelu, silu; the op's own backward
    would recompute the conv), unless myops.backends' recompute_conv asks for the low-memory form."""
    from . import backends
    return (_needs_pre_activation(activation, negative_slope) and torch.is_grad_enabled()
            and any(t is not None and t.requires_grad for t in tensors) and not backends.get_option("recompute_conv"))


def _activation_saving_conv(input, weight, bias, conv_args, activation, negative_slope,
                            approximate) -> Tuple[Tensor, Tensor]:
    """(conv, activation(conv)), the activation a torch op on the op's plain conv: autograd then
    saves the conv output (and under torch.compile Inductor fuses the activation with the
    statistics: _statistics)."""
    conv, _, _ = _ACT_STATS(input, weight, bias, *conv_args, *_NO_ACTIVATION, "none", 1)
    return conv, activation_fn(activation, negative_slope, approximate)(conv)


def _statistics(out: Tensor, stats: str, num_groups: int, differentiable: bool) -> Tuple[Tensor, Tensor]:
    """conv_transpose2d_act_stats' (mean, var) of out, as torch ops; not differentiable: by aten's
    norm kernels (float32 / 64; torch.var_mean is several times slower on the CPU), for a call whose
    statistics' gradient aten's fused norm backward computes."""
    if not differentiable:
        with torch.no_grad():
            if stats == "channel":
                _, mean, invstd = torch.ops.aten._native_batch_norm_legit.no_stats(out, None, None, True, 0.0, 0.0)
            else:
                n, c = out.shape[0], out.shape[1]
                out = out.contiguous(memory_format=_group_norm_layout(out))
                _, mean, invstd = torch.ops.aten.native_group_norm(out, None, None, n, c, out[0, 0].numel(),
                                                                   num_groups, 0.0)
            return mean, invstd.pow(-2)  # (eps 0: var 0 gives an infinite invstd, and var 0 again)
    ct = torch.float64 if out.dtype == torch.float64 else torch.float32
    if stats == "channel":
        var, mean = torch.var_mean(out.to(ct), dim=[0, *range(2, out.dim())], correction=0)
    else:
        var, mean = torch.var_mean(out.to(ct).reshape(out.shape[0], num_groups, -1), dim=-1, correction=0)
    return mean, var


def conv_transpose1d_norm_act(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride=1, padding=0,
                              output_padding=0, groups: int = 1, dilation=1, **kwargs) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """:func:`conv_transpose2d_norm_act` after a 1-D transposed convolution (``input [N, C_in, L]``,
    ``weight [C_in, C_out / groups, k]``, the conv arguments ints or 1-tuples as in
    ``F.conv_transpose1d``): the same keyword arguments, the normalisations as their 1-D forms
    (``BatchNorm1d``, ``InstanceNorm1d``, ``GroupNorm``); run as a one-row image."""
    op = "conv_transpose1d_norm_act"
    if input.dim() != 3 or weight.dim() != 3:
        _fail("input", f"and 'weight' must be 3-D ([N, C_in, L], [C_in, C_out / groups, k]), got "
              f"{input.dim()}-D and {weight.dim()}-D", op)
    stride, padding, output_padding, dilation = _one_row_args(op, stride, padding, output_padding, dilation)
    out = conv_transpose2d_norm_act(input.unsqueeze(2), weight.unsqueeze(2), bias, stride, padding, output_padding,
                                    groups, dilation, **kwargs)
    return tuple(t.squeeze(2) for t in out) if isinstance(out, tuple) else out.squeeze(2)


def _check_per_channel(input: Tensor, channels: int, **tensors: Optional[Tensor]) -> None:
    """Each given tensor a floating 1-D tensor of one value per output channel on input's device."""
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, Tensor) or t.dim() != 1 or t.shape[0] != channels:
            shape = list(t.shape) if isinstance(t, Tensor) else type(t).__name__
            _fail(name, f"must be a 1-D tensor of {channels} elements (one per output channel), got {shape}")
        if not t.is_floating_point():
            _fail(name, f"must be a floating tensor, got {t.dtype}")
        if t.device != input.device:
            _fail(name, f"is on {t.device} but 'input' is on {input.device}")


def _stats_kind(norm: str, batch_stats: bool, num_groups: Optional[int], running_mean, running_var, input, weight,
                conv_args) -> Tuple[str, int]:
    """The statistics the op computes for this normalisation ("none", "channel", "group") and its
    group count; refuses, as torch.nn.functional does, what that normalisation cannot take."""
    if norm == "group_norm":
        if not isinstance(num_groups, int):
            _fail("num_groups", f"must be an int for norm='group_norm', got {num_groups!r}")
        return "group", num_groups
    if norm == "none":
        return "none", 1
    if not batch_stats:
        if running_mean is None or running_var is None:
            _fail("running_mean", f"and 'running_var' are required for norm={norm!r} without batch statistics "
                  "(training=False), as in torch.nn.functional")
        return "none", 1
    if input.dim() == 4 and weight.dim() == 4:
        n, hw = input.shape[0], math.prod(_conv_output_hw(input, weight, conv_args))
        if norm == "batch_norm" and n * hw == 1:
            raise ValueError("myops.conv_transpose2d_norm_act: expected more than 1 value per channel when "
                             "training (as torch.nn.functional.batch_norm), got a conv output of 1 value per channel")
        if norm == "instance_norm" and hw == 1:
            raise ValueError("myops.conv_transpose2d_norm_act: expected more than 1 spatial element when training "
                             "(as torch.nn.functional.instance_norm), got a conv output of 1 x 1 pixels")
    if norm == "batch_norm":
        return "channel", 1
    return "group", weight.shape[1] * conv_args[3]  # instance_norm: one group per output channel


def _update_running(norm: str, out: Tensor, running_mean: Tensor, running_var: Tensor, mean: Tensor, var: Tensor,
                    momentum: Optional[float], num_batches_tracked: Optional[Tensor], count=None) -> None:
    """The running buffers' step as F.batch_norm / F.instance_norm take it (instance_norm: the
    batch's mean of the per-sample statistics; each sample's variance made unbiased over its
    pixels); count: the values per channel the statistics cover (default out's: N x H x W)."""
    hw = math.prod(out.shape[2:])
    if norm == "instance_norm":
        count, mean, var = hw, mean.mean(0), var.mean(0)
    elif count is None:
        count = out.shape[0] * hw
    if momentum is None:  # nn.BatchNorm2d's cumulative moving average
        if num_batches_tracked is None:
            _fail("momentum", "None (a cumulative average) needs 'num_batches_tracked'")
        num_batches_tracked.add_(1)
        update_running_stats(running_mean, running_var, mean, var, count, 1.0 / float(num_batches_tracked))
        return
    update_running_stats(running_mean, running_var, mean, var, count, momentum,
                         num_batches_tracked if norm == "batch_norm" else None)


def _per_sample_channel(stat: Tensor, channels: int) -> Tensor:
    """A [C] or [N, G] statistic as [N, C] values or [C] (broadcast by the caller): each group's
    value repeated for its channels."""
    if stat.dim() == 2 and stat.shape[1] != channels:
        return stat.repeat_interleave(channels // stat.shape[1], dim=1)
    return stat


def normalize_one_pass(x: Tensor, mean: Tensor, var: Tensor, eps: float, weight: Optional[Tensor],
                       bias: Optional[Tensor], activation: str = "none", negative_slope: float = 0.01,
                       approximate: str = "none") -> Tensor:
    """:func:`normalize` with the activation ``activation`` as one read and one write of x (the op
    myops::normalize_act), for eager calls. Its [N, C] parameters go as broadcast views (the op
    makes them contiguous in C++): few small ops, as their dispatch is most of a small layer's time."""
    n, c = x.shape[0], x.shape[1]
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    scale = _per_sample_channel((_as(var, ct) + eps).rsqrt(), c)
    if weight is not None:
        scale = scale * _as(weight, ct)
    shift = _as(bias, ct) if bias is not None else scale.new_zeros(())
    return torch.ops.myops.normalize_act(x, _per_sample_channel(_as(mean, ct), c).expand(n, c), scale.expand(n, c),
                                         shift.expand(n, c), activation, float(negative_slope), approximate)


def _as(t: Tensor, dtype: torch.dtype) -> Tensor:
    """t in dtype (t itself where it is: Tensor.to's call costs more than the check)."""
    return t if t.dtype == dtype else t.to(dtype)


def normalize(x: Tensor, mean: Tensor, var: Tensor, eps: float, weight: Optional[Tensor], bias: Optional[Tensor],
              post=None, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """``post((x - mean) / sqrt(var + eps) * weight + bias)`` over ``x [N, C, *]`` in the
    statistics' dtype (float32 for 16-bit x), rounded once to ``out_dtype`` (default x's).
    mean / var: per channel [C], or per (sample, group) [N, G]. Plain torch ops, so that
    torch.compile fuses them with the consumers. The result keeps x's memory format."""
    spatial = [1] * (x.dim() - 2)
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    scale = (per_channel(var.to(ct), x) + eps).rsqrt()
    y = (x.to(ct) - per_channel(mean.to(ct), x)) * scale
    if weight is not None:
        y = y * weight.to(ct).reshape([x.shape[1]] + spatial)
    if bias is not None:
        y = y + bias.to(ct).reshape([x.shape[1]] + spatial)
    if post is not None:
        y = post(y)
    return y.to(x.dtype if out_dtype is None else out_dtype)
