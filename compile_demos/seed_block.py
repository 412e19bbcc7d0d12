"""Demo 1: the seed block ConvTranspose2d -> GELU -> GroupNorm(8) (workload L2_19).

Builds the block as a user writes it and runs it eagerly, through the fused op
torch.ops.myops.conv_transpose2d_gelu_group_norm, through torch.compile, and through torch.compile
with myops.compile enabled (which rewrites the unmodified module to the fused op). Prints the
replacements, each one's max error against float64 and the timings. Full size (128x64x256x256)
on a GPU, 4x64x64x64 on the CPU.
"""
import torch

from demo_common import compare, parse_args
from myops.workloads import build


def main():
    args = parse_args(__doc__)
    torch.manual_seed(0)
    case = build("L2_19", args.device, getattr(torch, args.dtype))
    print(f"block: {case.module}\ninput: {tuple(case.input.shape)} {args.dtype} on {args.device}")
    compare(case.module, case.input, args.device, args.reps, measure=args.measure, profile=args.profile,
            extra_rows=[("torch.ops.myops.conv_transpose2d_gelu_group_norm", lambda: case.myops_fn(case.input))])


if __name__ == "__main__":
    main()
