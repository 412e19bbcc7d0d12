"""Reproduces the race that keeps the GroupNorm followers off by default (csrc/cuda/group_norm_follow.cu).

Runs L2_19's fused op (conv_transpose2d + GELU + GroupNorm, 128 x 64 x 256^2) `reps` times per
path and counts the calls whose output differs from the path's first call in any bit:
the separate passes, the plain conv, and the overlap forced on (MYOPS_GN_FOLLOWERS=33). H100,
float32: session 53, the forced overlap mismatched in 2-3 of 30 calls; session 54 (the same rows
in a helper script), separate passes 0/60, plain conv 0/60, forced overlap 0-1.5% of calls.
Each wrong call has one image wrong: a band of one conv tile's rows, in every channel.
notes/wip_s54_race_trace.patch adds per-block timestamps and scripts/follower_race_trace.py.
Usage (GPU):
    python3 scripts/follower_race_repro.py [reps] [dtype,...]
"""
import os
import sys

import torch

os.environ["MYOPS_CONV_SOURCE"] = "myops"  # our conv in every dtype (not a timed choice)
import myops  # noqa: E402
from myops.workloads import build  # noqa: E402


def count_mismatches(name, fn, reps):
    first = fn().clone()
    bad = []
    for i in range(reps):
        out = fn()
        torch.cuda.synchronize()
        if not torch.equal(out, first):
            per_plane = (out.float() - first.float()).abs().flatten(2).amax(-1)  # [N, C]
            planes = per_plane.nonzero()
            bad.append((i, float(per_plane.max()), planes[:2].tolist(), len(planes)))
        del out
    print(f"{name}: {len(bad)}/{reps} calls differ from the first (call, max diff, first planes, planes)",
          bad[:4], flush=True)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    for dtype in (sys.argv[2] if len(sys.argv) > 2 else "float32,bfloat16").split(","):
        case = build("L2_19", "cuda", getattr(torch, dtype))
        conv = next(m for m in case.module.modules() if isinstance(m, torch.nn.ConvTranspose2d))
        with torch.no_grad():
            os.environ["MYOPS_GN_FOLLOWERS"] = "0"
            count_mismatches(f"{dtype} fused op, separate passes", lambda: case.myops_fn(case.input), reps)
            count_mismatches(f"{dtype} plain conv", lambda: myops.conv_transpose2d(case.input, conv.weight, conv.bias),
                             reps)
            os.environ["MYOPS_GN_FOLLOWERS"] = "33"
            count_mismatches(f"{dtype} fused op, 33 followers", lambda: case.myops_fn(case.input), reps)
            os.environ.pop("MYOPS_GN_FOLLOWERS")
        del case, conv
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
