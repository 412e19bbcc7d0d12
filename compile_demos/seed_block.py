"""Demo 1: the seed block ConvTranspose2d -> GELU -> GroupNorm(8) (workload L2_19).

Builds the block as a user writes it, runs the same computation through the fused op
torch.ops.myops.conv_transpose2d_gelu_group_norm, and prints the max error of each against a
float64 reference and the timings of both. Full size (128x64x256x256) on a GPU, 4x64x64x64 on
the CPU.
"""
import argparse

import torch

import myops  # noqa: F401  (registers torch.ops.myops.*)
from myops._timing import median_ms
from myops.workloads import build


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = p.parse_args()
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    case = build("L2_19", args.device, dtype)
    print(f"block: {case.module}\ninput: {tuple(case.input.shape)} {args.dtype} on {args.device}")
    with torch.no_grad():
        ref = case.module.double()(case.input.double())
        case.module.to(dtype)
        runs = {"PyTorch module (eager)": lambda: case.module(case.input),
                "torch.ops.myops.conv_transpose2d_gelu_group_norm": lambda: case.myops_fn(case.input)}
        for name, fn in runs.items():
            err = (fn().double() - ref).abs().max().item()
            ms = median_ms(fn, args.device, warmup=3, reps=20)
            print(f"{name:52s} max |err| vs float64 {err:.2e}   median {ms:8.3f} ms")


if __name__ == "__main__":
    main()
