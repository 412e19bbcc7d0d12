"""Repeats the seed GELU chain's fused op (conv_transpose2d 64 -> 64 k3 + GELU + GroupNorm(8) on
128 x 64 x 256^2) `reps` times per path and counts the calls whose output differs in any bit from
the path's first call: the separate passes, the plain conv, then the default (the GroupNorm
followers beside the conv) and 33 followers forced, both compared with the separate passes' first
call. Exits 1 if any call differs. A race between the conv and the followers shows as an
occasional wrong band of rows (one such, a missing proxy fence in the conv's producer, is fixed:
csrc/cuda/conv/wgmma/wgmma_ops.cuh, fence_proxy_async_shared).
Usage (GPU; scripts/gpu_check.sh runs it):
    python3 scripts/follower_race_repro.py [reps] [dtype,...]
"""
import sys

import torch

import myops
import myops.backends
from myops.workloads import build


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
    myops.backends.set_options(conv_source="myops")  # our conv in every dtype (not a timed choice)
    for dtype in (sys.argv[2] if len(sys.argv) > 2 else "float32,bfloat16").split(","):
        case = build("L2_19", "cuda", getattr(torch, dtype))
        conv = next(m for m in case.module.modules() if isinstance(m, torch.nn.ConvTranspose2d))
        fused = lambda: case.myops_fn(case.input)  # noqa: E731
        with torch.no_grad():
            myops.backends.set_options(gn_followers=0)
            separate, bad = count_mismatches(f"{dtype} fused op, separate passes", fused, reps)
            wrong += bad
            wrong += count_mismatches(f"{dtype} plain conv",
                                      lambda: myops.conv_transpose2d(case.input, conv.weight, conv.bias), reps)[1]
            myops.backends.set_options(gn_followers=None)
            wrong += count_mismatches(f"{dtype} fused op, default", fused, reps, separate)[1]
            myops.backends.set_options(gn_followers=33)
            wrong += count_mismatches(f"{dtype} fused op, 33 followers", fused, reps, separate)[1]
            myops.backends.set_options(gn_followers=None)
        del case, conv
        torch.cuda.empty_cache()
    print(f"{wrong} calls differ in all" if wrong else "every call gave the same bits")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
