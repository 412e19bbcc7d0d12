"""One conv layer run a few times, for ncu / compute-sanitizer sessions.
Usage: python3 scripts/conv_profile_case.py LAYER DTYPE [N]  (layers as in conv_timing.py)"""
import sys

import torch

import myops
from conv_timing_layers import LAYERS

name, dtype = sys.argv[1], getattr(torch, sys.argv[2])
shape, cout, k, kw = LAYERS[name]
if len(sys.argv) > 3:
    shape = (int(sys.argv[3]),) + shape[1:]
x = torch.rand(shape, device="cuda", dtype=dtype)
groups = kw.get("groups", 1)
w = torch.randn(shape[1], cout // groups, *k, device="cuda", dtype=dtype)
b = torch.randn(cout, device="cuda", dtype=dtype)
for _ in range(3):
    myops.conv_transpose2d(x, w, b, **kw)
torch.cuda.synchronize()
