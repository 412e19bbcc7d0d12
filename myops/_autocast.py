"""torch.autocast for the myops ops: each op casts as autocast treats the aten ops it fuses.

- conv_transpose2d, and the ops that stop at the conv's output and statistics
  (conv_transpose2d_gelu_group_stats, conv_transpose2d_channel_stats): aten.conv_transpose2d is
  on autocast's lower-precision list, so their floating inputs are cast to the autocast dtype (the
  statistics stay float32).
- gelu: on no list (as aten.gelu), it runs in its input's dtype: no kernel here.
- The ops that end in GroupNorm (group_norm, batch_norm_tanh_max_pool2d_group_norm and the two
  chains): aten.group_norm is on CUDA's float32 list (float32 output), and on the CPU takes a
  lower-precision input with float32 parameters, computes in float32 and returns the input's
  dtype. So their normalisations run in float32 on float32 parameters and return float32 on CUDA,
  the lower-precision dtype on the CPU; the chains' convolutions run in the autocast dtype, as
  eager's do. (BatchNorm, tanh and max-pool, which eager runs on the lower-precision conv output
  with float32 parameters, run in float32 here too, without eager's rounding between them.)

Without these kernels a custom op runs in whatever dtypes autocast hands it: a chain whose input
an autocast op made bfloat16 met float32 weights and failed the dtype check.
"""
import torch
from torch import Tensor

_AUTOCAST_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}  # device type -> its autocast dispatch key
_lib = torch.library.Library("myops", "IMPL")


def _eligible(t, device_type: str) -> bool:
    # autocast's own rule: floating tensors on its device, float64 excepted
    return isinstance(t, Tensor) and t.is_floating_point() and t.device.type == device_type and t.dtype != torch.float64


def _cast(args, dtype, device_type: str) -> tuple:
    return tuple(a.to(dtype) if _eligible(a, device_type) else a for a in args)


def group_norm_dtype(input: Tensor) -> torch.dtype:
    """The dtype aten.group_norm returns for ``input`` under the current autocast state."""
    device_type = input.device.type
    return _autocast_output(input, device_type) if torch.is_autocast_enabled(device_type) else input.dtype


def _autocast_output(t: Tensor, device_type: str) -> torch.dtype:
    """group_norm's result dtype under autocast on device_type: float32 on CUDA (its float32
    list), the input's on the CPU. (Inside an autocast kernel autocast is excluded, so there
    is_autocast_enabled no longer tells: the kernels call this.)"""
    return torch.float32 if device_type == "cuda" and _eligible(t, device_type) else t.dtype


def _lower_precision(op, device_type, *args):
    return op(*_cast(args, torch.get_autocast_dtype(device_type), device_type))


def in_float32(op, out_dtype: torch.dtype, *args):
    """op on args with their floating tensors (float64 aside) in float32, its result in out_dtype:
    how a GroupNorm-ending op runs on a 16-bit input (args[0]) and float32 parameters."""
    return op(*_cast(args, torch.float32, args[0].device.type)).to(out_dtype)


def _float32_normalisation(op, device_type, *args):
    """Ops whose result is a GroupNorm's: computed in float32, returned in group_norm's dtype."""
    return in_float32(op, _autocast_output(args[0], device_type), *args)


def _gelu_chain(op, device_type, x, w, b, stride, padding, output_padding, groups, dilation, approximate,
                num_groups, gn_weight, gn_bias, eps):
    # the conv and GELU in the autocast dtype, the normalisation in float32 (the statistics op
    # returns float32 statistics of the lower-precision activation, as eager's GroupNorm sees it)
    from .ops import group_norm_with_stats
    act, mean, rstd = torch.ops.myops.conv_transpose2d_gelu_group_stats.default(
        *_cast((x, w, b), torch.get_autocast_dtype(device_type), device_type), stride, padding, output_padding,
        groups, dilation, approximate, num_groups, eps)
    return group_norm_with_stats(act, mean, rstd, gn_weight, gn_bias, out_dtype=_autocast_output(act, device_type))


def _batch_norm_chain(op, device_type, x, w, b, stride, padding, output_padding, groups, dilation, mean, var,
                      bn_weight, bn_bias, training, bn_eps, kernel_size, pool_stride, pool_padding, pool_dilation,
                      num_groups, gn_weight, gn_bias, gn_eps):
    conv_args = (*_cast((x, w, b), torch.get_autocast_dtype(device_type), device_type), stride, padding,
                 output_padding, groups, dilation)
    if training:
        out, mean, var = torch.ops.myops.conv_transpose2d_channel_stats.default(*conv_args)
        stats = (mean, var)
    else:
        out = torch.ops.myops.conv_transpose2d.default(*conv_args)
        empty = out.new_empty((0,), dtype=torch.float32 if out.dtype != torch.float64 else out.dtype)
        stats = (empty, empty.clone())
    y = in_float32(torch.ops.myops.batch_norm_tanh_max_pool2d_group_norm.default, _autocast_output(out, device_type),
                   out, mean, var, bn_weight, bn_bias, bn_eps, kernel_size, pool_stride, pool_padding, pool_dilation,
                   num_groups, gn_weight, gn_bias, gn_eps)
    return y, *stats


_KERNELS = {
    "conv_transpose2d": _lower_precision,
    "conv_transpose2d_gelu_group_stats": _lower_precision,
    "conv_transpose2d_channel_stats": _lower_precision,
    "conv_transpose2d_act_stats": _lower_precision,
    "group_norm": _float32_normalisation,
    "batch_norm_tanh_max_pool2d_group_norm": _float32_normalisation,
    "conv_transpose2d_gelu_group_norm": _gelu_chain,
    "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm": _batch_norm_chain,
}


def _register(name: str, kernel, device_type: str) -> None:
    op = getattr(torch.ops.myops, name).default
    key_name = _AUTOCAST_KEYS[device_type]
    key = getattr(torch._C.DispatchKey, key_name)

    def autocast_kernel(*args):
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            if not any(_eligible(a, device_type) for a in args):
                return op(*args)
            return kernel(op, device_type, *args)

    # the Python dispatcher's entry (tracing: AOTAutograd, export) and the C++ dispatcher's
    op.py_impl(key)(autocast_kernel)
    _lib.impl(name, lambda _keyset, *args: autocast_kernel(*args), key_name, with_keyset=True)


for _name, _kernel in _KERNELS.items():
    for _device_type in _AUTOCAST_KEYS:
        _register(_name, _kernel, _device_type)
