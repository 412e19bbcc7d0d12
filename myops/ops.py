"""Python API: thin wrappers over torch.ops.myops.* with PyTorch-style defaults.

Scalars that PyTorch accepts as an int or a pair (stride, padding, output_padding, dilation) are
accepted as either here; the C++ checks (csrc/shapes.h) validate them and name the bad argument.
"""
import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import _autocast, _norm_act_backward, _shapes

# (the overload itself: a call skips OpOverloadPacket's resolution)
_CONV_BATCH_NORM_CHAIN = torch.ops.myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm.default
_CONV_GELU_GROUP_NORM = torch.ops.myops.conv_transpose2d_gelu_group_norm.default
_UPDATE_RUNNING_STATS = torch.ops.myops.batch_norm_update_running_stats.default

IntOrPair = Union[int, Sequence[int]]


_INT_TYPES = (int, torch.SymInt)


def _pair(v: IntOrPair, op: str = "", name: str = "") -> list:
    """[v, v] for an int, else v as a list; anything else (a float, None) is refused naming the op
    and the argument (the pair's length is checked by the op itself)."""
    # (the exact-type test first: a plain int, the common case, skips isinstance over the tuple)
    if type(v) is int or isinstance(v, _INT_TYPES):
        return [v, v]
    if isinstance(v, (list, tuple, torch.Size)) and all(isinstance(e, _INT_TYPES) for e in v):
        return list(v)
    raise TypeError(f"myops.{op}: argument '{name}' must be an int or a pair of ints, got {v!r}")


def _conv_args(op: str, stride: IntOrPair, padding: IntOrPair, output_padding: IntOrPair, groups: int,
               dilation: IntOrPair) -> tuple:
    """The conv arguments as the ops take them: (stride, padding, output_padding, groups, dilation),
    the pairs as lists; a bad one is refused naming the op and the argument."""
    if not isinstance(groups, _INT_TYPES):
        raise TypeError(f"myops.{op}: argument 'groups' must be an int, got {groups!r}")
    return (_pair(stride, op, "stride"), _pair(padding, op, "padding"), _pair(output_padding, op, "output_padding"),
            groups, _pair(dilation, op, "dilation"))


def _eager(x: Tensor) -> bool:
    """Whether x is a plain tensor of an eager call: not traced by torch.compile / export, where
    the normalisation stays torch ops that Inductor fuses with their consumers."""
    return type(x) is torch.Tensor and not torch.compiler.is_compiling()


def _needs_grad(*args) -> bool:
    """Whether autograd must record a call with these arguments."""
    return torch.is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in args)


def _batched(input: Tensor, fn):
    """Runs fn on a 4-D input; a 3-D input [C, H, W] is treated as a batch of one, as in PyTorch."""
    if input.dim() == 3:
        return fn(input.unsqueeze(0)).squeeze(0)
    return fn(input)


def _check_group_values(op: str, n, channels, num_groups, spatial) -> None:
    """As torch.nn.functional.group_norm (the ops follow aten.group_norm, which normalises it to
    zero): a batch of one whose groups each hold one channel of one pixel is refused. spatial():
    the pixels per channel, computed only for such a batch."""
    if n == 1 and channels == num_groups and spatial() == 1:
        raise ValueError(f"{op}: expected more than 1 value per group (as torch.nn.functional.group_norm), got a "
                         f"batch of 1 with {channels} channels in {num_groups} groups and 1 pixel per channel")


def _float32_params(input: Tensor, *params: Optional[Tensor]) -> bool:
    """Whether a 16-bit input comes with float32 normalisation parameters: the mixed precision
    aten's batch_norm and group_norm accept (a model whose norm layers stay float32), computing in
    float32 and returning the input's dtype. The ops take one dtype, so the Python API runs those
    stages in float32 itself."""
    return input.dtype in (torch.bfloat16, torch.float16) and any(
        p is not None and p.dtype == torch.float32 for p in params)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
                     stride: IntOrPair = 1, padding: IntOrPair = 0, output_padding: IntOrPair = 0,
                     groups: int = 1, dilation: IntOrPair = 1) -> Tensor:
    """2-D transposed convolution, same semantics as ``torch.nn.functional.conv_transpose2d``.

    Args:
        input: ``[N, C_in, H, W]`` (or unbatched ``[C_in, H, W]``).
        weight: ``[C_in, C_out / groups, kH, kW]``.
        bias: optional ``[C_out]``.
        stride, padding, output_padding, dilation: an int or an (h, w) pair.
        groups: number of blocked connections from input to output channels.
    """
    conv_args = _conv_args("conv_transpose2d", stride, padding, output_padding, groups, dilation)
    return _batched(input, lambda x: torch.ops.myops.conv_transpose2d(x, weight, bias, *conv_args))


def _single(v, op: str, name: str) -> list:
    """[v] for an int or a one-element sequence of ints; anything else refused naming the argument."""
    if isinstance(v, _INT_TYPES):
        return [v]
    if isinstance(v, (list, tuple, torch.Size)) and len(v) == 1 and isinstance(v[0], _INT_TYPES):
        return list(v)
    raise TypeError(f"myops.{op}: argument '{name}' must be an int or a 1-tuple of ints, got {v!r}")


def _one_row_args(op: str, stride, padding, output_padding, dilation) -> Tuple[tuple, tuple, tuple, tuple]:
    """A 1-D conv's stride, padding, output_padding and dilation (ints or 1-tuples) as those of the
    one-row image it runs as: (1, s), (0, p), (0, o), (1, d)."""
    s, p, o, d = (_single(v, op, name)[0] for v, name in (
        (stride, "stride"), (padding, "padding"), (output_padding, "output_padding"), (dilation, "dilation")))
    return (1, s), (0, p), (0, o), (1, d)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """1-D transposed convolution, same semantics as ``torch.nn.functional.conv_transpose1d``:
    ``input [N, C_in, L]`` (or unbatched ``[C_in, L]``), ``weight [C_in, C_out / groups, k]``; run
    by the 2-D op's engines as a one-row image."""
    op = "conv_transpose1d"
    if not isinstance(groups, _INT_TYPES):
        raise TypeError(f"myops.{op}: argument 'groups' must be an int, got {groups!r}")
    args = (_single(stride, op, "stride"), _single(padding, op, "padding"),
            _single(output_padding, op, "output_padding"), groups, _single(dilation, op, "dilation"))
    if input.dim() == 2:
        return torch.ops.myops.conv_transpose1d(input.unsqueeze(0), weight, bias, *args).squeeze(0)
    return torch.ops.myops.conv_transpose1d(input, weight, bias, *args)


def explain(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOrPair = 1,
            padding: IntOrPair = 0, output_padding: IntOrPair = 0, groups: int = 1, dilation: IntOrPair = 1,
            op: str = "conv_transpose2d") -> str:
    """What runs the transposed convolution of a call of ``op`` with these arguments, and why: on
    CUDA the conv's source (ours or cuDNN's, timed or forced) and engine, with a one-line reason for
    every engine passed over, under the current ``myops.backends`` options. ``op`` is one of
    "conv_transpose2d", "conv_transpose2d_gelu_group_norm", "conv_transpose2d_gelu_group_stats",
    "conv_transpose2d_channel_stats", "conv_transpose2d_act_stats",
    "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm". A 1-D conv (a 3-D ``weight``; input
    ``[N, C_in, L]`` or ``[C_in, L]``, the conv arguments ints or 1-tuples; ``op`` "conv_transpose1d"
    or a 2-D op) is explained as the one-row image it runs as.
    Nothing is computed; the tensors' sizes, dtype, layout and device are what count."""
    if isinstance(weight, Tensor) and weight.dim() == 3:
        if not isinstance(input, Tensor) or input.dim() not in (2, 3):
            got = f"{input.dim()}-D" if isinstance(input, Tensor) else type(input).__name__
            raise ValueError("myops.explain: argument 'input' must be [N, C_in, L] or [C_in, L] for a 1-D conv "
                             f"(a 3-D weight), got {got}")
        input, weight = input.unsqueeze(-2), weight.unsqueeze(2)
        stride, padding, output_padding, dilation = _one_row_args("explain", stride, padding, output_padding,
                                                                  dilation)
        op = "conv_transpose2d" if op == "conv_transpose1d" else op
    conv_args = _conv_args("explain", stride, padding, output_padding, groups, dilation)
    if input.dim() == 3:
        input = input.unsqueeze(0)
    return torch.ops.myops._explain(input, weight, bias, *conv_args, op)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU, same semantics as ``torch.nn.functional.gelu`` (``approximate`` is "none" or "tanh")."""
    if input.device.type == "cpu" and _eager(input) and _norm_act_backward.takes(input):
        # eager CPU training: the op is ATen's GELU there; ATen's autograd spares our Python formula
        _shapes.check_gelu(input, approximate)
        return torch.nn.functional.gelu(input, approximate=approximate)
    return torch.ops.myops.gelu(input, approximate=approximate)


def group_norm(input: Tensor, num_groups: int, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Group normalisation over ``[N, C, *]``, same semantics as ``torch.nn.functional.group_norm``."""
    if input.dim() >= 2:
        _check_group_values("myops.group_norm", input.shape[0], input.shape[1], num_groups,
                            lambda: input[0, 0].numel())
    if _eager(input) and _norm_act_backward.takes(input, weight, bias):
        # eager training: aten's GroupNorm keeps its statistics for backward (the op's formula
        # recomputes them), the checks and error messages the op's
        _shapes.check_group_norm(input, num_groups, weight, bias)
        return _norm_act_backward.group_norm(input, num_groups, weight, bias, eps)
    args = (input, num_groups, weight, bias, eps)
    if _float32_params(input, weight, bias):
        return _autocast.in_float32(torch.ops.myops.group_norm, _autocast.group_norm_dtype(input), *args)
    return torch.ops.myops.group_norm(*args)


def conv_transpose2d_gelu_group_norm(
        input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOrPair = 1,
        padding: IntOrPair = 0, output_padding: IntOrPair = 0, groups: int = 1,
        dilation: IntOrPair = 1, approximate: str = "none", num_groups: Optional[int] = None,
        gn_weight: Optional[Tensor] = None, gn_bias: Optional[Tensor] = None,
        eps: float = 1e-5) -> Tensor:
    """``group_norm(gelu(conv_transpose2d(input, ...)), num_groups, gn_weight, gn_bias, eps)`` in one op.

    The first eight arguments are those of :func:`conv_transpose2d`, ``approximate`` that of
    :func:`gelu`, the rest those of :func:`group_norm` (``num_groups`` is required).
    """
    if num_groups is None:
        raise TypeError("myops.conv_transpose2d_gelu_group_norm: argument 'num_groups' is required")
    return gelu_group_norm_chain_call(
        input, weight, bias,
        _conv_args("conv_transpose2d_gelu_group_norm", stride, padding, output_padding, groups, dilation),
        approximate, num_groups, gn_weight, gn_bias, eps)


def gelu_group_norm_chain_call(input: Tensor, weight: Tensor, bias: Optional[Tensor], conv_args: tuple,
                               approximate: str, num_groups: int, gn_weight: Optional[Tensor],
                               gn_bias: Optional[Tensor], eps: float) -> Tensor:
    """The body of :func:`conv_transpose2d_gelu_group_norm`, its conv arguments already pairs
    (stride, padding, output_padding, groups, dilation): what the drop-in module calls, positionally
    (as :func:`batch_norm_chain_call`)."""
    if weight.dim() == 4 and (input.dim() == 3 or input.dim() == 4 and input.shape[0] == 1):
        _check_group_values("myops.conv_transpose2d_gelu_group_norm", 1, weight.shape[1] * conv_args[3],
                            num_groups, lambda: math.prod(_conv_output_hw(input, weight, conv_args)))
    from .norm_act import _saves_conv, gelu_group_norm_chain
    if _saves_conv("gelu", 0.01, input, weight, bias):  # training: the conv output kept, no conv in backward
        return _batched(input, lambda x: gelu_group_norm_chain(x, weight, bias, *conv_args, approximate, num_groups,
                                                               gn_weight, gn_bias, eps, split_normalize=False))
    if _float32_params(input, gn_weight, gn_bias):  # GroupNorm in float32 on the statistics
        return _batched(input, lambda x: group_norm_with_stats(*torch.ops.myops.conv_transpose2d_gelu_group_stats(
            x, weight, bias, *conv_args, approximate, num_groups, eps), gn_weight, gn_bias))
    return _batched(input, lambda x: _CONV_GELU_GROUP_NORM(
        x, weight, bias, *conv_args, approximate, num_groups, gn_weight, gn_bias, eps))


def conv_transpose2d_gelu_group_stats(
        input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOrPair = 1,
        padding: IntOrPair = 0, output_padding: IntOrPair = 0, groups: int = 1,
        dilation: IntOrPair = 1, approximate: str = "none", num_groups: Optional[int] = None,
        eps: float = 1e-5):
    """``(act, mean, rstd)``: ``act = gelu(conv_transpose2d(input, ...))`` and GroupNorm's statistics
    of it per (sample, group), ``[N, num_groups]`` in float32 (float64 for float64 input), with
    ``rstd = 1 / sqrt(var + eps)`` (biased variance). ``group_norm_with_stats(act, mean, rstd, ...)``
    then equals :func:`conv_transpose2d_gelu_group_norm`; written with torch ops, it lets
    torch.compile fuse the normalisation into what consumes it (the compile pass does this where
    the group_norm's consumers are pointwise, e.g. a residual add). Arguments as there.
    """
    if num_groups is None:
        raise TypeError("myops.conv_transpose2d_gelu_group_stats: argument 'num_groups' is required")
    conv_args = _conv_args("conv_transpose2d_gelu_group_stats", stride, padding, output_padding, groups, dilation)
    return torch.ops.myops.conv_transpose2d_gelu_group_stats(input, weight, bias, *conv_args, approximate, num_groups,
                                                             eps)


def group_norm_with_stats(input: Tensor, mean: Tensor, rstd: Tensor, weight: Optional[Tensor] = None,
                          bias: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """GroupNorm's normalisation of ``input [N, C, *]`` with given statistics ``mean, rstd
    [N, num_groups]`` (as :func:`conv_transpose2d_gelu_group_stats` returns them), computed in their
    dtype and rounded once to ``out_dtype`` (default: what ``F.group_norm`` returns for ``input``:
    its dtype, or float32 under CUDA autocast); plain torch ops, so that torch.compile fuses it with
    its consumers. The result keeps the input's memory format."""
    spatial = [1] * (input.dim() - 2)
    out = (input.to(mean.dtype) - per_channel(mean, input)) * per_channel(rstd, input)
    if weight is not None:
        out = out * weight.to(mean.dtype).reshape([input.shape[1]] + spatial)
    if bias is not None:
        out = out + bias.to(mean.dtype).reshape([input.shape[1]] + spatial)
    return out.to(_autocast.group_norm_dtype(input) if out_dtype is None else out_dtype)


def per_channel(stat: Tensor, x: Tensor) -> Tensor:
    """A statistic of ``x [N, C, *]`` broadcastable against it: ``[C]`` (per channel) as
    ``[1, C, 1, ...]``, ``[N, G]`` (per sample and group) as ``[N, C, 1, ...]``, each group's value
    for its channels."""
    n, c, spatial = x.shape[0], x.shape[1], [1] * (x.dim() - 2)
    if stat.dim() == 1:
        return stat.reshape([1, c] + spatial)
    groups = stat.shape[1]
    return stat.unsqueeze(-1).expand(n, groups, c // groups).reshape([n, c] + spatial)


def conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
        input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOrPair = 1,
        padding: IntOrPair = 0, output_padding: IntOrPair = 0, groups: int = 1,
        dilation: IntOrPair = 1, *, running_mean: Optional[Tensor] = None,
        running_var: Optional[Tensor] = None, bn_weight: Optional[Tensor] = None,
        bn_bias: Optional[Tensor] = None, training: bool = False, momentum: float = 0.1,
        bn_eps: float = 1e-5, kernel_size: IntOrPair, pool_stride: Optional[IntOrPair] = None,
        pool_padding: IntOrPair = 0, pool_dilation: IntOrPair = 1, ceil_mode: bool = False,
        num_groups: int, gn_weight: Optional[Tensor] = None, gn_bias: Optional[Tensor] = None,
        gn_eps: float = 1e-5) -> Tensor:
    """``group_norm(max_pool2d(tanh(batch_norm(conv_transpose2d(input, ...)))))`` (the BatchNorm chain).

    The conv arguments are those of :func:`conv_transpose2d`; ``running_mean``, ``running_var``,
    ``bn_weight``, ``bn_bias``, ``training``, ``momentum``, ``bn_eps`` those of
    ``torch.nn.functional.batch_norm`` (in training the batch statistics normalise and the running
    buffers, when given, are updated in place exactly as there: the unbiased variance enters
    ``running_var``); ``kernel_size``, ``pool_stride`` (default: ``kernel_size``),
    ``pool_padding``, ``pool_dilation`` those of ``max_pool2d`` (``ceil_mode`` must be False);
    then those of :func:`group_norm`.
    """
    op = "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm"
    return batch_norm_chain_call(
        input, weight, bias, _conv_args(op, stride, padding, output_padding, groups, dilation),
        running_mean, running_var, bn_weight, bn_bias, training, momentum, bn_eps,
        (_pair(kernel_size, op, "kernel_size"), _pair(kernel_size if pool_stride is None else pool_stride, op,
                                                      "pool_stride"),
         _pair(pool_padding, op, "pool_padding"), _pair(pool_dilation, op, "pool_dilation")),
        ceil_mode, num_groups, gn_weight, gn_bias, gn_eps)


def batch_norm_chain_call(input: Tensor, weight: Tensor, bias: Optional[Tensor], conv_args: tuple,
                          running_mean: Optional[Tensor], running_var: Optional[Tensor], bn_weight: Optional[Tensor],
                          bn_bias: Optional[Tensor], training: bool, momentum: float, bn_eps: float, pool_args: tuple,
                          ceil_mode: bool, num_groups: int, gn_weight: Optional[Tensor], gn_bias: Optional[Tensor],
                          gn_eps: float, num_batches_tracked: Optional[Tensor] = None) -> Tensor:
    """The body of :func:`conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm`, its conv and pool
    arguments already pairs (conv_args: stride, padding, output_padding, groups, dilation;
    pool_args: kernel_size, stride, padding, dilation): what the drop-in modules call, positionally,
    since each microsecond of Python before the first kernel is latency on an idle GPU.
    num_batches_tracked: a BatchNorm counter this step adds 1 to (with the buffers' update)."""
    op = "myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm"
    if ceil_mode:
        raise ValueError(f"{op}: argument 'ceil_mode' must be False (ceil_mode=True is not implemented)")
    if not training and (running_mean is None or running_var is None):
        raise ValueError(f"{op}: argument 'running_mean' / 'running_var' are required when training=False "
                         "(as in torch.nn.functional.batch_norm)")
    four_d = input.dim() == 4 and weight.dim() == 4
    if four_d and input.shape[0] == 1:  # only a batch of one can hold one value per channel or group
        _check_batch_of_one(op, input, weight, conv_args, pool_args, training, num_groups)
    mixed = _float32_params(input, bn_weight, bn_bias, gn_weight, gn_bias)
    if not mixed and not _needs_grad(input, weight, bias, running_mean, running_var, bn_weight, bn_bias, gn_weight,
                                     gn_bias):
        # No gradient: the one-call op, free to pick a cheaper intermediate than the conv output.
        # (With one, the two ops below keep the conv output for backward instead of recomputing it.)
        y, mean, var = _CONV_BATCH_NORM_CHAIN(
            input, weight, bias, *conv_args,
            None if training else running_mean, None if training else running_var, bn_weight, bn_bias, training,
            bn_eps, *pool_args, num_groups, gn_weight, gn_bias, gn_eps)
    else:
        if training:
            out, mean, var = torch.ops.myops.conv_transpose2d_channel_stats(input, weight, bias, *conv_args)
        else:
            out = torch.ops.myops.conv_transpose2d(input, weight, bias, *conv_args)
            mean, var = running_mean, running_var
        tail = torch.ops.myops.batch_norm_tanh_max_pool2d_group_norm
        args = (out, mean, var, bn_weight, bn_bias, bn_eps, *pool_args, num_groups, gn_weight, gn_bias, gn_eps)
        if training and not mixed and _eager(out) and _norm_act_backward.takes(out, bn_weight, bn_bias, gn_weight,
                                                                                gn_bias):
            # eager training: aten's fused norm backward, the batch statistics' part included
            y = _norm_act_backward.BatchNormChainOfBatchStats.apply(
                out, mean.detach(), var.detach(), bn_weight, bn_bias, gn_weight, gn_bias, bn_eps, pool_args,
                num_groups, gn_eps)
        else:
            # mixed: BatchNorm to GroupNorm in float32 on the 16-bit conv output, as those norms compute
            y = _autocast.in_float32(tail, _autocast.group_norm_dtype(out), *args) if mixed else tail(*args)
    if training and running_mean is not None and running_var is not None:
        # (the count once the kernels are queued: host arithmetic the GPU need not wait for)
        count = input.shape[0] * math.prod(_conv_output_hw(input, weight, conv_args)) if four_d else None
        update_running_stats(running_mean, running_var, mean, var, count, momentum, num_batches_tracked)
    elif num_batches_tracked is not None:
        num_batches_tracked.add_(1)
    return y


def _check_batch_of_one(op: str, input: Tensor, weight: Tensor, conv_args, pool_args, training: bool,
                        num_groups) -> None:
    """The checks only a batch of one can fail, as torch.nn.functional.batch_norm / group_norm
    make them (ValueError): in training, one value per channel; one value per group."""
    out_hw = _conv_output_hw(input, weight, conv_args)
    if training and math.prod(out_hw) == 1:  # as torch.nn.functional.batch_norm
        raise ValueError(f"{op}: expected more than 1 value per channel when training, got a "
                         f"conv_transpose2d output of 1 value per channel")
    # (the pool arguments checked as the op checks them, naming the op as it does)
    _check_group_values(op, 1, weight.shape[1] * conv_args[3], num_groups, lambda: math.prod(
        _shapes.max_pool2d_out_hw(op.removeprefix("myops."), *out_hw, *pool_args)))


def _conv_output_hw(input: Tensor, weight: Tensor, conv_args):
    """OH, OW of the conv output (input [.., H, W], weight [.., kH, kW])."""
    stride, padding, output_padding, _, dilation = conv_args
    return [_shapes.conv_transpose_out_size(input.shape[-2 + i], weight.shape[2 + i], stride[i], padding[i],
                                            output_padding[i], dilation[i]) for i in range(2)]


def update_running_stats(running_mean: Tensor, running_var: Tensor, mean: Tensor, var: Tensor,
                         count: int, momentum: float, num_batches_tracked: Optional[Tensor] = None) -> None:
    """BatchNorm's buffer update, in place: ``r = (1 - momentum) * r + momentum * batch`` with the
    unbiased variance ``var * count / (count - 1)`` entering ``running_var``, and
    ``num_batches_tracked += 1`` where given: one kernel (``myops.batch_norm_update_running_stats``)
    where torch's ops take four launches after every training step."""
    var = var.detach()
    if isinstance(count, torch.SymInt):
        # traced with a dynamic size: a Python float of it would specialise the graph to this size
        unbiased, var = 1.0, (var * count / (count - 1) if count > 1 else var)
    else:
        unbiased = count / (count - 1) if count > 1 else 1.0
    _UPDATE_RUNNING_STATS(running_mean, running_var, mean.detach(), var, momentum, unbiased, num_batches_tracked)
