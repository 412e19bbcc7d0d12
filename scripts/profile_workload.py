"""Per-kernel CUDA times of one bench workload's myops call (torch.profiler), a tuning aid.
Usage: python3 scripts/profile_workload.py NAME [float32|bfloat16] [strict]  (strict: TF32 off)"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import myops  # noqa: F401
from myops.workloads import build

name = sys.argv[1]
dtype = getattr(torch, sys.argv[2] if len(sys.argv) > 2 else "float32")
if "strict" in sys.argv[3:]:
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
case = build(name, "cuda", dtype)
for _ in range(3):
    case.myops_fn(case.input)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    for _ in range(5):
        case.myops_fn(case.input)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15, max_name_column_width=70))
