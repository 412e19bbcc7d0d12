"""Times myops.conv_transpose2d alone (no epilogue) on the seed workloads' conv layers, next to
cuDNN (NCHW and channels_last). A kernel-tuning aid; the bench CLI is the reference.
Usage: python3 scripts/conv_timing.py [float32|bfloat16] [layer name prefix]"""
import sys

import torch
import torch.nn.functional as F

import myops
from myops._timing import median_ms

from conv_timing_layers import LAYERS

dtype = getattr(torch, sys.argv[1] if len(sys.argv) > 1 else "float32")
torch.manual_seed(0)
print(f"| layer ({dtype}) | cuDNN ms | cuDNN channels_last ms | myops ms | TFLOP/s myops | max rel err |")
print("|---|---|---|---|---|---|")
for name, (shape, cout, k, kw) in LAYERS.items():
    if len(sys.argv) > 2 and not name.startswith(sys.argv[2]):
        continue
    x = torch.rand(shape, device="cuda", dtype=dtype)
    groups = kw.get("groups", 1)
    w = torch.randn(shape[1], cout // groups, *k, device="cuda", dtype=dtype) / (shape[1] // groups * k[0] * k[1]) ** 0.5
    b = torch.randn(cout, device="cuda", dtype=dtype)
    ref = F.conv_transpose2d(x, w, b, **kw)
    got = myops.conv_transpose2d(x, w, b, **kw)
    err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    # channels-last input and weight, as Inductor lays out a graph's convs (no copies timed)
    xl, wl = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
    t_cudnn = median_ms(lambda: F.conv_transpose2d(x, w, b, **kw), "cuda")
    t_cl = median_ms(lambda: F.conv_transpose2d(xl, wl, b, **kw), "cuda")
    t_my = median_ms(lambda: myops.conv_transpose2d(x, w, b, **kw), "cuda")
    stride = kw.get("stride", 1)
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    # taps per output pixel ~ kH * kW / (sH * sW) (exact for the phase decomposition's average)
    flops = 2 * ref.numel() * (shape[1] // groups) * k[0] * k[1] / (sh * sw)
    print(f"| {name} | {t_cudnn:.3f} | {t_cl:.3f} | {t_my:.3f} | {flops / t_my / 1e9:.0f} | {err:.2e} |", flush=True)
