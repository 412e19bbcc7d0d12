"""Wall medians and per-kernel GPU time per call (torch.profiler) of bench workloads through myops,
a tuning aid (one line per workload and dtype; the bench CLI is the measure of record).
Usage: python3 scripts/kernel_times.py L2_19:bfloat16,float32 [L1_57:bfloat16 ...]"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import myops  # noqa: F401
from myops._timing import median_ms
from myops.workloads import build


def kernel_times(fn, calls: int = 5) -> dict:
    """GPU time per call of each kernel fn launches (us), by the kernel's short name."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.key.split("<")[0].split("::")[-1][:32]
            times[name] = times.get(name, 0.0) + e.device_time_total / calls
    return times


for spec in sys.argv[1:]:
    name, dtypes = spec.split(":")
    for dtype_name in dtypes.split(","):
        case = build(name, "cuda", getattr(torch, dtype_name))
        fn = lambda: case.myops_fn(case.input)  # noqa: E731
        with torch.no_grad():
            walls = [median_ms(fn, "cuda", warmup=3, reps=20) for _ in range(2)]
            times = kernel_times(fn)
        top = sorted(times.items(), key=lambda kv: -kv[1])[:4]
        print(f"{name} {dtype_name}: wall {[round(w, 3) for w in walls]} ms; "
              + "; ".join(f"{k} {v:.0f} us" for k, v in top), flush=True)
