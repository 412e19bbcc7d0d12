"""Fake (meta) impls: output metadata of every op, with SymInts, for torch.compile and export."""
import torch

from . import _shapes


def _empty_4d(shape, input, dtype=None):
    return input.new_empty(shape, dtype=dtype).contiguous(memory_format=_shapes.output_memory_format(input))


@torch.library.register_fake("myops::conv_transpose2d")
def _conv_transpose2d_fake(input, weight, bias, stride, padding, output_padding, groups, dilation):
    shape = _shapes.conv_transpose2d_out_shape(
        "conv_transpose2d", input, weight, bias, stride, padding, output_padding, groups, dilation)
    return _empty_4d(shape, input)


@torch.library.register_fake("myops::gelu")
def _gelu_fake(self, *, approximate="none"):
    _shapes.check_gelu(self, approximate)
    return torch.empty_like(self)


@torch.library.register_fake("myops::group_norm")
def _group_norm_fake(input, num_groups, weight, bias, eps):
    _shapes.check_group_norm(input, num_groups, weight, bias)
    return input.new_empty(input.shape).contiguous(memory_format=_shapes.output_memory_format(input))


def _conv_gelu_group_norm_shape(op, input, weight, bias, stride, padding, output_padding, groups, dilation,
                                approximate, num_groups, gn_weight, gn_bias):
    """The checks of the conv_transpose2d -> gelu -> group_norm ops; the conv's output shape."""
    shape = _shapes.conv_transpose2d_out_shape(
        op, input, weight, bias, stride, padding, output_padding, groups, dilation)
    _shapes.check(approximate in ("none", "tanh"), op, "approximate",
                  f"must be 'none' or 'tanh', got '{approximate}'")
    _shapes.check_group_norm_channels(op, input, shape[1], num_groups, gn_weight, gn_bias, "gn_weight", "gn_bias")
    return shape


@torch.library.register_fake("myops::conv_transpose2d_gelu_group_norm")
def _fused_fake(input, weight, bias, stride, padding, output_padding, groups, dilation,
                approximate, num_groups, gn_weight, gn_bias, eps):
    shape = _conv_gelu_group_norm_shape("conv_transpose2d_gelu_group_norm", input, weight, bias, stride, padding,
                                        output_padding, groups, dilation, approximate, num_groups, gn_weight, gn_bias)
    return _empty_4d(shape, input)


@torch.library.register_fake("myops::conv_transpose2d_gelu_group_stats")
def _fused_stats_fake(input, weight, bias, stride, padding, output_padding, groups, dilation,
                      approximate, num_groups, eps):
    shape = _conv_gelu_group_norm_shape("conv_transpose2d_gelu_group_stats", input, weight, bias, stride, padding,
                                        output_padding, groups, dilation, approximate, num_groups, None, None)
    stats = input.new_empty([shape[0], num_groups], dtype=_shapes.stats_dtype(input))
    return _empty_4d(shape, input), stats, torch.empty_like(stats)


@torch.library.register_fake("myops::conv_transpose2d_channel_stats")
def _conv_channel_stats_fake(input, weight, bias, stride, padding, output_padding, groups, dilation):
    shape = _shapes.conv_transpose2d_out_shape(
        "conv_transpose2d_channel_stats", input, weight, bias, stride, padding, output_padding, groups, dilation)
    stats = input.new_empty([shape[1]], dtype=_shapes.stats_dtype(input))
    return _empty_4d(shape, input), stats, torch.empty_like(stats)


@torch.library.register_fake("myops::batch_norm_tanh_max_pool2d_group_norm")
def _bn_chain_fake(input, mean, var, bn_weight, bn_bias, bn_eps, kernel_size, pool_stride, pool_padding,
                   pool_dilation, num_groups, gn_weight, gn_bias, gn_eps):
    op = "batch_norm_tanh_max_pool2d_group_norm"
    _shapes.check(input.dim() == 4, op, "input", f"must be a 4-D tensor [N, C, H, W], got {input.dim()}-D")
    _shapes.check_floating(op, "input", input)
    c = input.shape[1]
    _shapes.check_batch_norm_stats(op, input, c, mean, var, bn_weight, bn_bias)
    ph, pw = _shapes.max_pool2d_out_hw(op, input.shape[2], input.shape[3], kernel_size, pool_stride,
                                       pool_padding, pool_dilation)
    _shapes.check_group_norm_channels(op, input, c, num_groups, gn_weight, gn_bias, "gn_weight", "gn_bias")
    return _empty_4d([input.shape[0], c, ph, pw], input)


@torch.library.register_fake("myops::batch_norm_update_running_stats")
def _running_stats_fake(running_mean, running_var, mean, var, momentum, var_factor, num_batches_tracked):
    _shapes.check_batch_norm_update_running_stats("batch_norm_update_running_stats", running_mean, running_var,
                                                  mean, var, num_batches_tracked)


@torch.library.register_fake("myops::conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm")
def _conv_bn_chain_fake(input, weight, bias, stride, padding, output_padding, groups, dilation, mean, var,
                        bn_weight, bn_bias, training, bn_eps, kernel_size, pool_stride, pool_padding, pool_dilation,
                        num_groups, gn_weight, gn_bias, gn_eps):
    conv_shape, pooled = _shapes.conv_batch_norm_chain_shape(
        "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm", input, weight, bias, stride, padding,
        output_padding, groups, dilation, mean, var, bn_weight, bn_bias, training, kernel_size, pool_stride,
        pool_padding, pool_dilation, num_groups, gn_weight, gn_bias)
    stats = input.new_empty([conv_shape[1] if training else 0], dtype=_shapes.stats_dtype(input))
    return _empty_4d(pooled, input), stats, torch.empty_like(stats)


@torch.library.register_fake("myops::conv_transpose2d_act_stats")
def _conv_act_stats_fake(input, weight, bias, stride, padding, output_padding, groups, dilation, activation,
                         negative_slope, approximate, stats, num_groups):
    shape, stats_shape = _shapes.conv_act_stats_shape(
        "conv_transpose2d_act_stats", input, weight, bias, stride, padding, output_padding, groups, dilation,
        activation, negative_slope, approximate, stats, num_groups)
    mean = input.new_empty(stats_shape, dtype=_shapes.stats_dtype(input))
    return _empty_4d(shape, input), mean, torch.empty_like(mean)


@torch.library.register_fake("myops::normalize_act")
def _normalize_act_fake(input, mean, scale, shift, activation, negative_slope, approximate):
    _shapes.check_normalize_act("normalize_act", input, mean, scale, shift, activation, negative_slope, approximate)
    return input.new_empty(input.shape).contiguous(memory_format=_shapes.output_memory_format(input))
