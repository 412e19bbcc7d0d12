"""Output sizes and layouts in Python, for the fake impls (SymInt-friendly).

These mirror csrc/shapes.h, the source of truth for the real kernels; the fake impls run under
torch.compile / meta tensors, where the C++ checks do not run, so the checks that decide whether a
call is valid at all (ranks, dtypes, devices, channel counts) are repeated here with the same
messages.
"""
import math

import torch

FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def check(cond, op: str, arg: str, msg: str) -> None:
    torch._check(cond, lambda: f"myops::{op}: argument '{arg}' {msg}")


def check_like_input(op: str, arg: str, t: torch.Tensor, input: torch.Tensor) -> None:
    check(t.device == input.device, op, arg, f"is on {t.device} but 'input' is on {input.device}")
    check(t.dtype == input.dtype, op, arg, f"has dtype {t.dtype} but 'input' has dtype {input.dtype}")


def conv_transpose_out_size(size, k, s, p, op, d):
    return (size - 1) * s - 2 * p + d * (k - 1) + op + 1


def conv_transpose2d_out_shape(op, input, weight, bias, stride, padding, output_padding, groups, dilation):
    check(input.dim() == 4, op, "input", f"must be a 4-D tensor [N, C_in, H, W], got {input.dim()}-D")
    check(weight.dim() == 4, op, "weight",
          f"must be a 4-D tensor [C_in, C_out / groups, kH, kW], got {weight.dim()}-D")
    check_floating(op, "input", input)
    check_like_input(op, "weight", weight, input)
    for name, v in (("stride", stride), ("padding", padding), ("output_padding", output_padding), ("dilation", dilation)):
        check(len(v) == 2, op, name, f"must have 2 elements (height, width), got {len(v)}")
    for i in range(2):
        check(stride[i] > 0, op, "stride", f"must be positive, got {list(stride)}")
        check(dilation[i] > 0, op, "dilation", f"must be positive, got {list(dilation)}")
        check(padding[i] >= 0, op, "padding", f"must be non-negative, got {list(padding)}")
        check(output_padding[i] >= 0, op, "output_padding", f"must be non-negative, got {list(output_padding)}")
        check(output_padding[i] < stride[i] or output_padding[i] < dilation[i], op, "output_padding",
              "must be smaller than either stride or dilation")
    check(groups > 0, op, "groups", f"must be positive, got {groups}")
    check(weight.shape[0] == input.shape[1], op, "weight",
          f"must have size(0) == C_in = {input.shape[1]} (layout [C_in, C_out / groups, kH, kW])")
    check(input.shape[1] % groups == 0, op, "groups", f"must divide the {input.shape[1]} input channels")
    c_out = weight.shape[1] * groups
    if bias is not None:
        check_like_input(op, "bias", bias, input)
        check(bias.dim() == 1 and bias.shape[0] == c_out, op, "bias",
              f"must be a 1-D tensor of {c_out} elements (one per output channel)")
    oh = conv_transpose_out_size(input.shape[2], weight.shape[2], stride[0], padding[0], output_padding[0], dilation[0])
    ow = conv_transpose_out_size(input.shape[3], weight.shape[3], stride[1], padding[1], output_padding[1], dilation[1])
    check(oh > 0, op, "padding", f"is too large: the output height would be {oh}")
    check(ow > 0, op, "padding", f"is too large: the output width would be {ow}")
    return [input.shape[0], c_out, oh, ow]


def check_floating(op, arg, t):
    check(t.dtype in FLOATING, op, arg, f"must be float32, float64, float16 or bfloat16, got {t.dtype}")


def check_group_norm_channels(op, reference, channels, num_groups, weight, bias, weight_name, bias_name):
    check(num_groups > 0, op, "num_groups", f"must be positive, got {num_groups}")
    check(channels % num_groups == 0, op, "num_groups", f"must divide the {channels} channels")
    for t, name in ((weight, weight_name), (bias, bias_name)):
        if t is not None:
            check_like_input(op, name, t, reference)
            check(t.dim() == 1 and t.shape[0] == channels, op, name,
                  f"must be a 1-D tensor of {channels} elements (one per channel)")


def check_gelu(self, approximate):
    """myops::gelu's arguments."""
    check_floating("gelu", "self", self)
    check(approximate in ("none", "tanh"), "gelu", "approximate", f"must be 'none' or 'tanh', got '{approximate}'")


def check_group_norm(input, num_groups, weight, bias):
    """myops::group_norm's arguments."""
    check(input.dim() >= 2, "group_norm", "input", f"must have at least 2 dimensions [N, C, *], got {input.dim()}-D")
    check_floating("group_norm", "input", input)
    check_group_norm_channels("group_norm", input, input.shape[1], num_groups, weight, bias, "weight", "bias")


def output_memory_format(input: torch.Tensor) -> torch.memory_format:
    """Same rule as myops::output_memory_format in csrc/shapes.cpp."""
    if input.dim() == 4 and not input.is_contiguous() and input.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


def max_pool2d_out_hw(op, h, w, kernel_size, stride, padding, dilation):
    """Mirror of check_max_pool2d in csrc/shapes.cpp (ceil_mode false)."""
    for name, v in (("kernel_size", kernel_size), ("pool_stride", stride), ("pool_padding", padding),
                    ("pool_dilation", dilation)):
        check(len(v) == 2, op, name, f"must have 2 elements (height, width), got {len(v)}")
    check(kernel_size[0] > 0 and kernel_size[1] > 0, op, "kernel_size", f"must be positive, got {list(kernel_size)}")
    check(stride[0] > 0 and stride[1] > 0, op, "pool_stride", f"must be positive, got {list(stride)}")
    check(dilation[0] > 0 and dilation[1] > 0, op, "pool_dilation", f"must be positive, got {list(dilation)}")
    check(all(padding[i] >= 0 and 2 * padding[i] <= kernel_size[i] for i in range(2)), op, "pool_padding",
          f"must be non-negative and at most half of kernel_size {list(kernel_size)}, got {list(padding)}")
    span = [(h, 0), (w, 1)]
    sizes = []
    for size, i in span:
        room = size + 2 * padding[i] - dilation[i] * (kernel_size[i] - 1) - 1
        check(room >= 0, op, "kernel_size", f"(dilated) is larger than the padded input of {h}x{w}")
        sizes.append(room // stride[i] + 1)
    return sizes


def check_batch_norm_update_running_stats(op, running_mean, running_var, mean, var, num_batches_tracked):
    """Mirror of check_batch_norm_update_running_stats in csrc/shapes.cpp."""
    check_floating(op, "running_mean", running_mean)
    check(running_mean.dim() == 1, op, "running_mean", f"must be a 1-D tensor, got shape {list(running_mean.shape)}")
    channels = running_mean.shape[0]
    for t, name in ((running_var, "running_var"), (mean, "mean"), (var, "var")):
        check_floating(op, name, t)
        check(t.device == running_mean.device, op, name, f"is on {t.device} but 'running_mean' is on {running_mean.device}")
        check(t.dim() == 1 and t.shape[0] == channels, op, name,
              f"must be a 1-D tensor of {channels} elements (as running_mean), got shape {list(t.shape)}")
    check(running_var.dtype == running_mean.dtype, op, "running_var",
          f"must have running_mean's dtype {running_mean.dtype}, got {running_var.dtype}")
    check(var.dtype == mean.dtype, op, "var", f"must have mean's dtype {mean.dtype}, got {var.dtype}")
    if num_batches_tracked is not None:
        check(num_batches_tracked.dtype == torch.int64 and num_batches_tracked.numel() == 1, op, "num_batches_tracked",
              f"must be an int64 tensor of one element, got {num_batches_tracked.dtype} of shape "
              f"{list(num_batches_tracked.shape)}")
        check(num_batches_tracked.device == running_mean.device, op, "num_batches_tracked",
              f"is on {num_batches_tracked.device} but 'running_mean' is on {running_mean.device}")


def check_batch_norm_stats(op, input, channels, mean, var, weight, bias):
    """Mirror of check_batch_norm_stats in csrc/shapes.cpp."""
    for t, name in ((mean, "mean"), (var, "var")):
        check_floating(op, name, t)
        check(t.device == input.device, op, name, f"is on {t.device} but 'input' is on {input.device}")
        check(t.dim() == 1 and t.shape[0] == channels, op, name,
              f"must be a 1-D tensor of {channels} elements (one per channel), got shape {list(t.shape)}")
    check_batch_norm_affine(op, input, channels, weight, bias)


def check_batch_norm_affine(op, input, channels, weight, bias):
    for t, name in ((weight, "bn_weight"), (bias, "bn_bias")):
        if t is not None:
            check_like_input(op, name, t, input)
            check(t.dim() == 1 and t.shape[0] == channels, op, name,
                  f"must be a 1-D tensor of {channels} elements (one per channel), got shape {list(t.shape)}")


def stats_dtype(input: torch.Tensor) -> torch.dtype:
    """Batch statistics are float32, float64 for float64 input (the kernels' compute dtype)."""
    return torch.float64 if input.dtype == torch.float64 else torch.float32


def conv_batch_norm_chain_shape(op, input, weight, bias, stride, padding, output_padding, groups, dilation,
                                mean, var, bn_weight, bn_bias, training, kernel_size, pool_stride,
                                pool_padding, pool_dilation, num_groups, gn_weight, gn_bias):
    """Mirror of check_conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm in csrc/shapes.cpp:
    the conv output's shape and the pooled one."""
    shape = conv_transpose2d_out_shape(op, input, weight, bias, stride, padding, output_padding, groups, dilation)
    n, c, oh, ow = shape
    if training:
        check(mean is None, op, "mean", "must be None when training is True (the batch statistics normalise)")
        check(var is None, op, "var", "must be None when training is True (the batch statistics normalise)")
        check(n * oh * ow != 1, op, "input", "expected more than 1 value per channel when training, got a "
              f"conv_transpose2d output of size {list(shape)}")
        check_batch_norm_affine(op, input, c, bn_weight, bn_bias)
    else:
        check(mean is not None, op, "mean", "is required when training is False")
        check(var is not None, op, "var", "is required when training is False")
        check_batch_norm_stats(op, input, c, mean, var, bn_weight, bn_bias)
    ph, pw = max_pool2d_out_hw(op, oh, ow, kernel_size, pool_stride, pool_padding, pool_dilation)
    check_group_norm_channels(op, input, c, num_groups, gn_weight, gn_bias, "gn_weight", "gn_bias")
    return shape, [n, c, ph, pw]


ACTIVATIONS = ("none", "gelu", "silu", "relu", "leaky_relu", "tanh", "sigmoid")
NORM_STATS = ("none", "channel", "group")


def check_activation(op, activation, negative_slope, approximate):
    """Mirror of check_activation in csrc/shapes.cpp."""
    check(activation in ACTIVATIONS, op, "activation",
          f"must be one of {', '.join(repr(a) for a in ACTIVATIONS)}, got '{activation}'")
    check(math.isfinite(negative_slope), op, "negative_slope", f"must be finite, got {negative_slope}")
    check(approximate in ("none", "tanh"), op, "approximate", f"must be 'none' or 'tanh', got '{approximate}'")


def check_normalize_act(op, input, mean, scale, shift, activation, negative_slope, approximate):
    """Mirror of check_normalize_act in csrc/shapes.cpp."""
    check(input.dim() >= 2, op, "input", f"must have at least 2 dimensions [N, C, *], got {input.dim()}-D")
    check_floating(op, "input", input)
    compute = stats_dtype(input)
    for name, t in (("mean", mean), ("scale", scale), ("shift", shift)):
        check(t.device == input.device, op, name, f"is on {t.device} but 'input' is on {input.device}")
        check(t.dtype == compute, op, name,
              f"must have dtype {compute} (the compute dtype of {input.dtype} input), got {t.dtype}")
        check(t.dim() == 2 and t.shape[0] == input.shape[0] and t.shape[1] == input.shape[1], op, name,
              f"must have shape [N, C] = [{input.shape[0]}, {input.shape[1]}], got {list(t.shape)}")
    check_activation(op, activation, negative_slope, approximate)


def conv_act_stats_shape(op, input, weight, bias, stride, padding, output_padding, groups, dilation, activation,
                         negative_slope, approximate, stats, num_groups):
    """Mirror of check_conv_transpose2d_act_stats in csrc/shapes.cpp: the output's shape and the
    statistics' shape."""
    shape = conv_transpose2d_out_shape(op, input, weight, bias, stride, padding, output_padding, groups, dilation)
    check_activation(op, activation, negative_slope, approximate)
    check(stats in NORM_STATS, op, "stats", f"must be 'none', 'channel' or 'group', got '{stats}'")
    if stats == "group":
        check_group_norm_channels(op, input, shape[1], num_groups, None, None, "", "")
    stats_shape = {"none": [0], "channel": [shape[1]], "group": [shape[0], num_groups]}[stats]
    return shape, stats_shape
