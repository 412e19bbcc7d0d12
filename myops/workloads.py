"""The seed workloads of DESIGN.md as PyTorch modules plus the equivalent myops call.

Full sizes on CUDA; on the CPU the same layers at a CPU-sized input (batch 2-4, ~64x64), which is
what the CPU bench mode and the demos run (rows without a CPU size run on CUDA only).
"""
import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

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


class ConvTransposeNormAct(nn.Module):
    """ConvTranspose1d / 2d -> a normalisation -> an activation, as published generators write them
    (in train() mode as constructed: BatchNorm normalises with batch statistics)."""

    def __init__(self, conv: nn.Module, norm: nn.Module, act: nn.Module):
        super().__init__()
        self.conv, self.norm, self.act = conv, norm, act

    def forward(self, x):
        return self.act(self.norm(self.conv(x)))


def compiled_with_myops(module: nn.Module, x: torch.Tensor, train: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    """module under torch.compile with the myops rewrite, compiled now (a function of its own, so
    that Dynamo keeps it apart from a plain torch.compile of the module): for inference, or for a
    training step (train: the input and the parameters require gradients)."""
    import myops.compile as mc

    def forward(inp):
        return module(inp)

    with mc.enabled(devices=(x.device.type,)), torch.set_grad_enabled(train):
        compiled = torch.compile(forward, fullgraph=True)
        compiled(x.detach().requires_grad_(train))
    return compiled


@dataclass
class Case:
    module: nn.Module          # what eager PyTorch / Inductor run
    input: torch.Tensor
    myops_fn: Optional[Callable[[torch.Tensor], torch.Tensor]]  # the same computation through myops
    flops: float               # multiply-adds x 2 of the useful work
    bytes_min: float           # each input and parameter read once, the output written once
    # a chain the compile pass rewrites: its training row (and, where myops_fn is None, its
    # inference row) is torch.compile with the rewrite
    chain: bool = False
    # a chain's myops.nn drop-in module over the block's own layers (the rows of bench --eager)
    fused_module: Optional[nn.Module] = None


def _conv_flops(x, conv: nn.Module):  # a ConvTranspose1d / 2d: each input value times its taps
    return 2.0 * x.numel() * math.prod(conv.weight.shape[1:])


def _l2_19(n, hw, device, dtype):
    block = ConvTransposeGeluGroupNorm(64, 64, 3, 8).to(device, dtype)
    x = torch.rand(n, 64, hw, hw, device=device, dtype=dtype)
    out_numel = n * 64 * (hw + 2) ** 2
    fused = myops.nn.ConvTranspose2dGELUGroupNorm.from_modules(block.conv, block.act, block.norm)
    return Case(block, x, fused, _conv_flops(x, block.conv),
                (x.numel() + out_numel) * x.element_size(), chain=True, fused_module=fused)


def _l2_11(n, hw, device, dtype):
    block = ConvTransposeBnTanhPoolGroupNorm(64, 128, 5, 8, padding=1).to(device, dtype)
    x = torch.rand(n, 64, hw, hw, device=device, dtype=dtype)
    out_numel = n * 128 * ((hw + 2) // 2) ** 2
    fused = myops.nn.ConvTranspose2dBatchNormTanhMaxPool2dGroupNorm.from_modules(block.conv, block.bn, block.act,
                                                                              block.pool, block.norm)
    return Case(block, x, fused, _conv_flops(x, block.conv),
                (x.numel() + out_numel) * x.element_size(), chain=True, fused_module=fused)


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


def _norm_act(n, c_in, c_out, hw, norm, act, device, dtype, length=None, **conv_kwargs):
    """A chain of the family at a demo architecture's size (hw x hw images, or with length a 1-D
    signal); the myops row is torch.compile with the rewrite (its normalisation is torch ops that
    Inductor fuses)."""
    conv = (nn.ConvTranspose2d if length is None else nn.ConvTranspose1d)(c_in, c_out, **conv_kwargs)
    block = ConvTransposeNormAct(conv, norm, act).to(device, dtype)
    size = (hw, hw) if length is None else (length,)
    x = torch.rand(n, c_in, *size, device=device, dtype=dtype)
    with torch.no_grad():
        out_numel = conv(x[:1]).numel() * n
    fused = myops.nn._FUSED_BY_DIMS[1 if length is not None else 2].from_modules(
        conv, *[m for m in (norm, act) if not isinstance(m, nn.Identity)])
    return Case(block, x, None, _conv_flops(x, conv), (x.numel() + out_numel) * x.element_size(), chain=True,
                fused_module=fused)


def _dcgan(n, c, hw, d, t):  # DCGAN generator's middle layer: ConvT(k4 s2 p1, no bias) -> BN -> ReLU
    return _norm_act(n, c, c // 2, hw, nn.BatchNorm2d(c // 2), nn.ReLU(True), d, t, kernel_size=4, stride=2,
                     padding=1, bias=False)


def _pix2pix(n, c, hw, d, t):  # U-Net up block: ConvT(k4 s2 p1, no bias) -> BN (then the skip's cat)
    return _norm_act(n, c, c // 4, hw, nn.BatchNorm2d(c // 4), nn.Identity(), d, t, kernel_size=4, stride=2,
                     padding=1, bias=False)


def _cyclegan(n, c, hw, d, t):  # ResNet generator's upsampling: ConvT(k3 s2 p1 op1) -> IN -> ReLU
    return _norm_act(n, c, c // 2, hw, nn.InstanceNorm2d(c // 2), nn.ReLU(True), d, t, kernel_size=3, stride=2,
                     padding=1, output_padding=1)


def _dcgan_head(n, hw, d, t):  # DCGAN generator's image head: ConvT(64 -> 3, k4 s2 p1, no bias) -> Tanh
    return _norm_act(n, 64, 3, hw, nn.Identity(), nn.Tanh(), d, t, kernel_size=4, stride=2, padding=1, bias=False)


def _vocoder(n, c, length, d, t):  # HiFi-GAN's first up-sampler (k16 s8 p4), then the next block's LeakyReLU
    return _norm_act(n, c, c // 2, None, nn.Identity(), nn.LeakyReLU(0.1), d, t, length=length, kernel_size=16,
                     stride=8, padding=4)


def _decoder(n, c, hw, groups, d, t):  # Upsample2D(use_conv_transpose) -> ResnetBlock2D's GN -> SiLU
    return _norm_act(n, c, c // 2, hw, nn.GroupNorm(groups, c // 2, eps=1e-6), nn.SiLU(), d, t, kernel_size=4,
                     stride=2, padding=1)


# name -> (builder at full size on CUDA, builder at CPU size: a few ms of eager work on two cores, so
# that a row measures the layer, not the per-call cost of Python and torch.compile's wrappers)
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
    "dcgan_bn_relu": (lambda d, t: _dcgan(256, 256, 8, d, t), lambda d, t: _dcgan(8, 128, 16, d, t)),
    "pix2pix_bn": (lambda d, t: _pix2pix(16, 512, 16, d, t), lambda d, t: _pix2pix(4, 256, 16, d, t)),
    "cyclegan_in_relu": (lambda d, t: _cyclegan(4, 128, 128, d, t), lambda d, t: _cyclegan(1, 64, 64, d, t)),
    "decoder_gn_silu": (lambda d, t: _decoder(8, 512, 32, 32, d, t), lambda d, t: _decoder(2, 128, 32, 8, d, t)),
    # conv + activation chains: rewritten on CUDA only (on the CPU the pass leaves them to Inductor)
    "dcgan_tanh": (lambda d, t: _dcgan_head(256, 32, d, t), None),
    "vocoder_leaky_relu": (lambda d, t: _vocoder(16, 512, 512, d, t), None),
}


def names(device: str) -> List[str]:
    """The workloads that have a size for device ("cuda" or "cpu")."""
    return [name for name, (full, cpu_sized) in WORKLOADS.items() if device == "cuda" or cpu_sized is not None]


def build(name: str, device: str, dtype: torch.dtype, train: bool = False, eager: bool = False) -> Case:
    """Workload `name`; train: its myops row set up for a training step; eager: a chain's myops row
    is its myops.nn module in eager mode (else torch.compile with the rewrite where it trains or
    has no other myops form)."""
    if name not in names(device):
        raise ValueError(f"myops.bench: no workload {name!r} on {device} (workloads there: {', '.join(names(device))})")
    full, cpu_sized = WORKLOADS[name]
    case = (full if device == "cuda" else cpu_sized)(device, dtype)
    if case.chain and eager:
        case.myops_fn = case.fused_module
    elif case.chain and (train or case.myops_fn is None):
        case.myops_fn = compiled_with_myops(case.module, case.input, train)
    return case
