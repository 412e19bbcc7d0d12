"""Python API: thin wrappers over torch.ops.myops.* with PyTorch-style defaults.

Scalars that PyTorch accepts as an int or a pair (stride, padding, output_padding, dilation) are
accepted as either here; the C++ checks (csrc/shapes.h) validate them and name the bad argument.
"""
from typing import Optional, Sequence, Union

import torch
from torch import Tensor

IntOrPair = Union[int, Sequence[int]]


def _pair(v: IntOrPair) -> list:
    return [v, v] if isinstance(v, (int, torch.SymInt)) else list(v)


def _batched(input: Tensor, fn):
    """Runs fn on a 4-D input; a 3-D input [C, H, W] is treated as a batch of one, as in PyTorch."""
    if input.dim() == 3:
        return fn(input.unsqueeze(0)).squeeze(0)
    return fn(input)


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
    return _batched(input, lambda x: torch.ops.myops.conv_transpose2d(
        x, weight, bias, _pair(stride), _pair(padding), _pair(output_padding), groups, _pair(dilation)))


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU, same semantics as ``torch.nn.functional.gelu`` (``approximate`` is "none" or "tanh")."""
    return torch.ops.myops.gelu(input, approximate=approximate)


def group_norm(input: Tensor, num_groups: int, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Group normalisation over ``[N, C, *]``, same semantics as ``torch.nn.functional.group_norm``."""
    return torch.ops.myops.group_norm(input, num_groups, weight, bias, eps)


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
    return _batched(input, lambda x: torch.ops.myops.conv_transpose2d_gelu_group_norm(
        x, weight, bias, _pair(stride), _pair(padding), _pair(output_padding), groups, _pair(dilation),
        approximate, num_groups, gn_weight, gn_bias, eps))
