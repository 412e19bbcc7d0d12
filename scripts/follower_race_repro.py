"""Repeats L2_19's fused op (conv_transpose2d + GELU + GroupNorm, 128 x 64 x 256^2) `reps` times per
path and counts the calls whose output differs in any bit from the path's first call: the separate
passes, the plain conv, then the default (the GroupNorm followers beside the conv) and 33 followers
forced, both compared with the separate passes' first call. Exits 1 if any call differs.
This is how sessions 53-54 saw the race that kept the followers off (H100, float32, 33 followers:
a wrong image in ~1% of calls, one conv tile's band of rows in every channel). Its cause, found in
session 55 with notes/wip_s54_race_trace.patch, was a missing proxy fence in the conv
(csrc/cuda/wgmma_ops.cuh, fence_proxy_async_shared).
Usage (GPU; scripts/gpu_check.sh runs it):
    python3 scripts/follower_race_repro.py [reps] [dtype,...]
"""
import os
import sys

import torch

os.environ["MYOPS_CONV_SOURCE"] = "myops"  # our conv in every dtype (not a timed choice)
import myops  # noqa: E402
from myops.workloads import build  # noqa: E402


def count_mismatches(name, fn, reps, first=None):
    """Prints the calls differing from `first` (default: fn's first call); returns (first, how many)."""
    first = fn().clone() if first is None else first
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
    return first, len(bad)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    wrong = 0
    for dtype in (sys.argv[2] if len(sys.argv) > 2 else "float32,bfloat16").split(","):
        case = build("L2_19", "cuda", getattr(torch, dtype))
        conv = next(m for m in case.module.modules() if isinstance(m, torch.nn.ConvTranspose2d))
        fused = lambda: case.myops_fn(case.input)  # noqa: E731
        with torch.no_grad():
            os.environ["MYOPS_GN_FOLLOWERS"] = "0"
            separate, bad = count_mismatches(f"{dtype} fused op, separate passes", fused, reps)
            wrong += bad
            wrong += count_mismatches(f"{dtype} plain conv",
                                      lambda: myops.conv_transpose2d(case.input, conv.weight, conv.bias), reps)[1]
            os.environ.pop("MYOPS_GN_FOLLOWERS")
            wrong += count_mismatches(f"{dtype} fused op, default", fused, reps, separate)[1]
            os.environ["MYOPS_GN_FOLLOWERS"] = "33"
            wrong += count_mismatches(f"{dtype} fused op, 33 followers", fused, reps, separate)[1]
            os.environ.pop("MYOPS_GN_FOLLOWERS")
        del case, conv
        torch.cuda.empty_cache()
    print(f"{wrong} calls differ in all" if wrong else "every call gave the same bits")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
