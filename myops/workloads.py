"""The seed workloads of DESIGN.md as PyTorch modules plus the equivalent myops call.

Full sizes on CUDA; on the CPU the same layers at a CPU-sized input (batch 2-4, ~64x64), which is
what the CPU bench mode and the demos run.
"""
from dataclasses import dataclass
from typing import Callable, Dict

import torch
from torch import nn

import myops


class ConvTransposeGeluGroupNorm(nn.Module):
    """L2_19: ConvTranspose2d -> GELU -> GroupNorm, as a user writes it."""

    def __init__(self, c_in, c_out, kernel_size, num_groups, approximate="none", **conv_kwargs):
        super().__init__()
        self.conv = nn.ConvTranspose2d(c_in, c_out, kernel_size, **conv_kwargs)
        self.act = nn.GELU(approximate=approximate)
        self.norm = nn.GroupNorm(num_groups, c_out)

    def forward(self, x):
        return self.norm(self.act(self.conv(x)))


# The myops rows go through the Python API as a user calls it: the drop-in modules of myops.nn
# over the block's own layers, or the functions.
def conv_call(conv: nn.ConvTranspose2d, x):
    return myops.conv_transpose2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.output_padding,
                                  conv.groups, conv.dilation)


class ConvTransposeBnTanhPoolGroupNorm(nn.Module):
    """L2_11: ConvTranspose2d -> BatchNorm2d -> Tanh -> MaxPool2d -> GroupNorm, as a user writes it
    (in train() mode as constructed: BatchNorm normalises with batch statistics)."""

    def __init__(self, c_in, c_out, kernel_size, num_groups, pool=2, **conv_kwargs):
        super().__init__()
        self.conv = nn.ConvTranspose2d(c_in, c_out, kernel_size, **conv_kwargs)
        self.bn = nn.BatchNorm2d(c_out)
        self.act = nn.Tanh()
        self.pool = nn.MaxPool2d(pool, pool)
        self.norm = nn.GroupNorm(num_groups, c_out)

    def forward(self, x):
        return self.norm(self.pool(self.act(self.bn(self.conv(x)))))


class GroupNormModule(nn.Module):
    def __init__(self, channels, num_groups):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)

    def forward(self, x):
        return self.norm(x)


@dataclass
class Case:
    module: nn.Module          # what eager PyTorch / Inductor run
    input: torch.Tensor
    myops_fn: Callable[[torch.Tensor], torch.Tensor]  # the same computation through myops
    flops: float               # multiply-adds x 2 of the useful work
    bytes_min: float           # each input and parameter read once, the output written once


def _conv_flops(x, conv: nn.ConvTranspose2d):
    c_in, c_out_g, kh, kw = conv.weight.shape
    return 2.0 * x.numel() * c_out_g * kh * kw


def _l2_19(n, hw, device, dtype):
    block = ConvTransposeGeluGroupNorm(64, 64, 3, 8).to(device, dtype)
    x = torch.rand(n, 64, hw, hw, device=device, dtype=dtype)
    out_numel = n * 64 * (hw + 2) ** 2
    fused = myops.nn.ConvTranspose2dGELUGroupNorm.from_modules(block.conv, block.act, block.norm)
    return Case(block, x, fused, _conv_flops(x, block.conv),
                (x.numel() + out_numel) * x.element_size())


def _l2_11(n, hw, device, dtype):
    block = ConvTransposeBnTanhPoolGroupNorm(64, 128, 5, 8, padding=1).to(device, dtype)
    x = torch.rand(n, 64, hw, hw, device=device, dtype=dtype)
    out_numel = n * 128 * ((hw + 2) // 2) ** 2
    fused = myops.nn.ConvTranspose2dBatchNormTanhMaxPool2dGroupNorm.from_modules(block.conv, block.bn, block.act,
                                                                              block.pool, block.norm)
    return Case(block, x, fused, _conv_flops(x, block.conv),
                (x.numel() + out_numel) * x.element_size())


def _conv(n, c_in, c_out, h, w, device, dtype, **kw):
    conv = nn.ConvTranspose2d(c_in, c_out, bias=False, **kw).to(device, dtype)
    x = torch.rand(n, c_in, h, w, device=device, dtype=dtype)
    with torch.no_grad():
        out_numel = conv(x[:1]).numel() * n
    return Case(conv, x, lambda x: conv_call(conv, x), _conv_flops(x, conv),
                (x.numel() + out_numel) * x.element_size())


def _gelu(n, hw, device, dtype):
    x = torch.randn(n, 64, hw + 2, hw + 2, device=device, dtype=dtype)
    return Case(nn.GELU(), x, lambda x: myops.gelu(x), 0.0, 2 * x.numel() * x.element_size())


def _group_norm(n, hw, device, dtype):
    mod = GroupNormModule(64, 8).to(device, dtype)
    x = torch.randn(n, 64, hw + 2, hw + 2, device=device, dtype=dtype)
    return Case(mod, x, lambda x: myops.group_norm(x, 8, mod.norm.weight, mod.norm.bias, mod.norm.eps),
                0.0, 2 * x.numel() * x.element_size())


# name -> (builder at full size on CUDA, builder at CPU size)
WORKLOADS: Dict[str, tuple] = {
    "L2_19": (lambda d, t: _l2_19(128, 256, d, t), lambda d, t: _l2_19(4, 64, d, t)),
    "L2_11": (lambda d, t: _l2_11(512, 32, d, t), lambda d, t: _l2_11(16, 32, d, t)),
    "L1_75": (lambda d, t: _conv(16, 32, 64, 128, 256, d, t, kernel_size=(3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=4),
              lambda d, t: _conv(2, 32, 64, 32, 64, d, t, kernel_size=(3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=4)),
    "L1_57": (lambda d, t: _conv(8, 64, 64, 1024, 1024, d, t, kernel_size=3),
              lambda d, t: _conv(2, 64, 64, 64, 64, d, t, kernel_size=3)),
    "L1_65": (lambda d, t: _conv(8, 64, 64, 512, 512, d, t, kernel_size=(3, 7)),
              lambda d, t: _conv(2, 64, 64, 64, 64, d, t, kernel_size=(3, 7))),
    "gelu": (lambda d, t: _gelu(128, 256, d, t), lambda d, t: _gelu(4, 64, d, t)),
    "group_norm": (lambda d, t: _group_norm(128, 256, d, t), lambda d, t: _group_norm(4, 64, d, t)),
}


def build(name: str, device: str, dtype: torch.dtype) -> Case:
    full, cpu_sized = WORKLOADS[name]
    return (full if device == "cuda" else cpu_sized)(device, dtype)
