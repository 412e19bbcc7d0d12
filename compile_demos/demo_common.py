"""Shared driver of the compile demos: eager vs torch.compile vs torch.compile + myops."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import myops  # noqa: E402,F401
import myops.compile as mc  # noqa: E402
from myops._timing import median_ms  # noqa: E402


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--measure", action="store_true",
                   help="myops.compile.enable(measure=True): rewrite only chains timed faster than eager")
    return p.parse_args()


def compare(model, x, device, reps=None, extra_rows=(), measure=False):
    """Prints replacements, max |err| against a float64 eager reference, and median timings."""
    reps = reps or (30 if device == "cuda" else 5)
    with torch.no_grad():
        import copy
        ref = copy.deepcopy(model).double()(x.double())
        rows = [("eager PyTorch", lambda: model(x))] + list(extra_rows)
        mc.disable()
        torch._dynamo.reset()
        plain = torch.compile(model)
        rows.append(("torch.compile (Inductor)", lambda: plain(x)))
        results = {}

        def time_row(name, fn):
            err = (fn().double() - ref).abs().max().item()
            results[name] = median_ms(fn, device, warmup=3, reps=reps)
            print(f"{name:52s} max |err| vs float64 {err:.2e}   median {results[name]:9.3f} ms")
            if os.environ.get("MYOPS_DEMO_PROFILE") and device == "cuda":
                # a tuning aid: per-kernel CUDA times, taken here because both compiled models
                # share Dynamo's cache (after the reset below, `plain` would run myops kernels)
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        fn()
                    torch.cuda.synchronize()
                print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))

        for name, fn in rows:
            time_row(name, fn)
        # Dynamo caches compiled code per function: start afresh so that the model recompiles
        # with the rewrite installed
        torch._dynamo.reset()
        mc.reset_stats()
        if device == "cpu":
            print("note: myops.compile.enable() leaves CPU chains to Inductor by default (the CPU kernels are "
                  "slower than its oneDNN conv); this demo passes devices=('cpu',) to show the rewrite")
        mc.enable(devices=(device,), measure=measure)
        fused = torch.compile(model)
        # compile for real (no cache hit), so that stats() counts this compilation's rewrites
        with torch._inductor.config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            fused(x)
        replaced = mc.stats()
        print(f"myops replacements: {replaced}")
        time_row("torch.compile + myops", lambda: fused(x))
        mc.disable()
        speedup = results["torch.compile (Inductor)"] / results["torch.compile + myops"]
        print(f"torch.compile + myops vs plain torch.compile: {speedup:.2f}x")
    return replaced, results
