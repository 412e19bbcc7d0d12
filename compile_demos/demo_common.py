"""Shared driver of the compile demos: eager vs torch.compile vs torch.compile + myops."""
import argparse
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import myops  # noqa: E402,F401
import myops.backends  # noqa: E402
import myops.compile as mc  # noqa: E402
from myops._timing import median_ms_each, queued_median_ms_each  # noqa: E402


def parse_args(description, extra=None):
    p = argparse.ArgumentParser(description=description)
    if extra is not None:
        extra(p)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--measure", action="store_true",
                   help="myops.compile.enable(measure=True): rewrite only chains timed faster than Inductor")
    p.add_argument("--profile", action="store_true", help="print the CUDA kernels of each row (torch.profiler)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a myops.backends option for the run (e.g. recompute_conv=1)")
    args = p.parse_args()
    myops.backends.set_options(**dict(myops.backends.parse_assignment(o) for o in args.option))
    return args


def _compiled_pair(model, x, device, measure, options=None):
    """The model compiled without and with the myops rewrite, both kept alive so that they can be
    timed in alternating rounds. Dynamo caches compiled code per code object: two functions of
    their own (not closures of one function, which would share a code object) keep the two
    compilations apart, and fullgraph=True leaves no nested frame for them to share."""
    def plain_forward(inp):
        return model(inp)

    def myops_forward(inp):
        return model(inp)

    mc.disable()
    torch._dynamo.reset()
    plain = torch.compile(plain_forward, fullgraph=True)
    plain(x)
    mc.reset_stats()
    if device == "cpu":
        print("note: myops.compile.enable() leaves CPU chains to Inductor by default (the CPU kernels are "
              "slower than its oneDNN conv); this demo passes devices=('cpu',) to show the rewrite")
    mc.enable(devices=(device,), measure=measure, **(options or {}))
    try:
        fused = torch.compile(myops_forward, fullgraph=True)
        # compile for real (no cache hit), so that stats() counts this compilation's rewrites
        with torch._inductor.config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            fused(x)
    finally:
        mc.disable()
    return plain, fused, {"found": _nonzero(mc.stats(found=True)), "rewritten": _nonzero(mc.stats())}


def _nonzero(counts):
    return {k: v for k, v in counts.items() if v}


def compare_training(model, x, device, reps=None, measure=False, options=None):
    """Median time of a training step (forward, a mean-square loss, backward; gradients reset each
    step) under plain torch.compile and under torch.compile + myops, timed in alternating rounds."""
    reps = reps or (50 if device == "cuda" else 3)

    def plain_forward(inp):
        return model(inp)

    def myops_forward(inp):
        return model(inp)

    def step(forward):
        def run():
            model.zero_grad(set_to_none=True)
            forward(x).float().square().mean().backward()
        return run

    mc.disable()
    torch._dynamo.reset()
    plain = torch.compile(plain_forward, fullgraph=True)
    step(plain)()
    mc.reset_stats()
    mc.enable(devices=(device,), measure=measure, **(options or {}))
    try:
        fused = torch.compile(myops_forward, fullgraph=True)
        with torch._inductor.config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            step(fused)()
    finally:
        mc.disable()
    print(f"training step: myops rewrote {_nonzero(mc.stats())}")
    rows = {"torch.compile (Inductor)": step(plain), "torch.compile + myops": step(fused)}
    times = median_ms_each(rows, device, warmup=3, reps=reps)
    for name, ms in times.items():
        print(f"training step, {name:38s} median {ms:9.3f} ms")
    print(f"training step: torch.compile + myops vs plain torch.compile: "
          f"{times['torch.compile (Inductor)'] / times['torch.compile + myops']:.2f}x")
    return times


def _profile(rows):
    """A tuning aid (MYOPS_DEMO_PROFILE=1): per-kernel CUDA times of each row."""
    for name, fn in rows.items():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        print(f"--- {name}")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))


def compare(model, x, device, reps=None, extra_rows=(), measure=False, profile=False, options=None):
    """Prints replacements, max |err| against a float64 eager reference, and median timings, two
    ways on a GPU: each call from an idle GPU (the host's dispatch before the first kernel
    counted), and calls queued back to back (GPU time, as in a loop whose host runs ahead).
    Every row is timed in the same rounds (one call of each in turn), so that a drift of the
    device's clocks during the run falls on all rows alike."""
    reps = reps or (100 if device == "cuda" else 5)
    with torch.no_grad():
        ref = copy.deepcopy(model).double()(x.double())
        plain, fused, replaced = _compiled_pair(model, x, device, measure, options)
        print(f"myops replacements: {replaced}")
        rows = {"eager PyTorch": lambda: model(x), **dict(extra_rows),
                "torch.compile (Inductor)": lambda: plain(x), "torch.compile + myops": lambda: fused(x)}
        errors = {name: (fn().double() - ref).abs().max().item() for name, fn in rows.items()}
        idle = median_ms_each(rows, device, warmup=3, reps=reps)
        queued = queued_median_ms_each(rows, device, warmup=3, reps=reps) if device == "cuda" else None
        for name in rows:
            line = f"{name:52s} max |err| vs float64 {errors[name]:.2e}   median {idle[name]:9.3f} ms"
            print(line + (f"   queued {queued[name]:9.3f} ms" if queued else ""))
        if profile and device == "cuda":
            _profile(rows)
        speedup = idle["torch.compile (Inductor)"] / idle["torch.compile + myops"]
        line = f"torch.compile + myops vs plain torch.compile: {speedup:.2f}x"
        if queued:
            line += f" from an idle GPU, {queued['torch.compile (Inductor)'] / queued['torch.compile + myops']:.2f}x queued"
        print(line + f" (medians of {reps} alternating rounds)")
    return replaced, idle
