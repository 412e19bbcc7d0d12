"""python -m myops.bench: the seed workloads, eager PyTorch vs torch.compile (Inductor) vs myops (for
the norm + activation family's chains: torch.compile with the myops rewrite).

Each row times the three side by side in one process (CUDA events on a GPU, median of many runs
after warm-up, the three timed in turn, one call each per round) and reports each one's error
against a float64 reference, and each one's peak memory. ``--train`` times a training
step instead (forward and backward: the gradients of the input and of every parameter), the
chains' myops row then being torch.compile with the rewrite against plain torch.compile;
``--eager`` makes every chain's myops row its ``myops.nn`` module in eager mode. ``--sweep`` times
standalone transposed convs over many layer shapes instead (myops/sweep.py).
"""
import argparse
import copy
import datetime
import gc
import json
import os
import sys

import torch

from . import sweep, workloads
from ._timing import median_ms_each

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _errors(out, ref):
    diff = (out.double() - ref).abs()
    rel_l2 = (diff.norm() / ref.norm().clamp_min(1e-30)).item()
    return diff.max().item(), rel_l2


def _reference(case, device):
    # float64 on the same device (the CPU for a CPU run); the module copy leaves the original as is
    module64 = copy.deepcopy(case.module).double()
    with torch.no_grad():
        return module64(case.input.double())


def _peak_mib(fn, device):
    """The memory fn allocates at its peak beyond what was allocated before it, in MiB: from CUDA's
    allocator statistics; on the CPU from the profiler's allocation events, summed in order (an
    extra, profiled call); None elsewhere."""
    gc.collect()
    if device == "cpu":
        return _cpu_peak_mib(fn)
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2 ** 20


def _cpu_peak_mib(fn):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    allocations = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                         key=lambda e: e.start_ns())
    held = peak = 0
    for event in allocations:
        held += event.nbytes()
        peak = max(peak, held)
    return peak / 2 ** 20


def _training_step(forward, module, x, grad_out):
    """One training step of forward: the gradients of x and of every parameter of module, reset first."""
    def step():
        _clear_grads(module, x)
        forward(x).backward(grad_out)
    return step


def _clear_grads(module, x):
    for t in (x, *module.parameters()):
        t.grad = None


def _reference_input_grad(case, grad_out):
    """The input's gradient in float64 eager PyTorch, for grad_out."""
    module64 = copy.deepcopy(case.module).double()
    x64 = case.input.detach().double().requires_grad_()
    module64(x64).backward(grad_out.double())
    return x64.grad


def run_workload(name, device, dtype, compile_inductor, reps, train=False, eager=False):
    case = workloads.build(name, device, dtype, train=train, eager=eager)
    ref = _reference(case, device)
    results = {"workload": name, "device": device, "dtype": str(dtype).replace("torch.", ""), "train": train}
    forwards = {"eager": case.module, "myops": case.myops_fn}
    if compile_inductor:
        forwards["inductor"] = torch.compile(case.module)
    with torch.no_grad():
        for label, forward in forwards.items():
            out = forward(case.input)
            results[f"{label}_max_err"], results[f"{label}_rel_l2"] = _errors(out, ref)
            del out
    if train:
        x = case.input.detach().requires_grad_()
        grad_out = torch.randn_like(ref, dtype=dtype)
        fns = {label: _training_step(forward, case.module, x, grad_out) for label, forward in forwards.items()}
        grad_ref = _reference_input_grad(case, grad_out)
        for label in ("myops", "eager"):  # (eager's: the error a TF32 / 16-bit step has anyway)
            fns[label]()
            results[f"{label}_grad_rel_l2"] = _errors(x.grad, grad_ref)[1]
        for label, fn in fns.items():
            _clear_grads(case.module, x)  # (each from no gradient held, not the previous row's)
            results[f"{label}_peak_mib"] = _peak_mib(fn, device)
        times = median_ms_each(fns, device, warmup=3, reps=reps)
    else:
        fns = {label: (lambda forward=forward: forward(case.input)) for label, forward in forwards.items()}
        with torch.no_grad():
            for label, fn in fns.items():
                results[f"{label}_peak_mib"] = _peak_mib(fn, device)
            times = median_ms_each(fns, device, warmup=3, reps=reps)
    for label, ms in times.items():
        results[f"{label}_ms"] = ms
    results["flops"], results["bytes_min"] = case.flops, case.bytes_min
    del case, ref, fns, forwards
    gc.collect()
    torch._dynamo.reset()
    if device == "cuda":
        torch.cuda.empty_cache()
    return results


def _table(rows):
    cols = ["eager", "inductor", "myops"]
    present = [c for c in cols if f"{c}_ms" in rows[0]]
    head = "| workload | dtype | " + " | ".join(f"{c} ms" for c in present)
    head += " | myops vs eager | myops vs inductor |" if "inductor" in present else " | myops vs eager |"
    head += " myops rel-L2 err | eager rel-L2 err |"
    if rows[0].get("train"):
        head += " myops input-grad rel-L2 err | eager input-grad rel-L2 err |"
    peaks = rows[0].get("eager_peak_mib") is not None
    if peaks:
        head += "".join(f" {c} peak MiB |" for c in present)
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["workload"], r["dtype"]] + [f"{r[c + '_ms']:.3f}" for c in present]
        cells.append(f"{r['eager_ms'] / r['myops_ms']:.2f}x")
        if "inductor" in present:
            cells.append(f"{r['inductor_ms'] / r['myops_ms']:.2f}x")
        cells += [f"{r['myops_rel_l2']:.2e}", f"{r['eager_rel_l2']:.2e}"]
        if "myops_grad_rel_l2" in r:
            cells += [f"{r['myops_grad_rel_l2']:.2e}", f"{r['eager_grad_rel_l2']:.2e}"]
        if peaks:
            cells += [_mib(r[c + "_peak_mib"]) for c in present]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mib(v: float) -> str:
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"  # (CPU-size rows hold a few MiB)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m myops.bench", description=__doc__)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32")
    p.add_argument("--strict-fp32", action="store_true", help="TF32 off everywhere (cuDNN, cuBLAS, Inductor, myops)")
    p.add_argument("--workloads", default=None, help="comma-separated subset (default: every one with a size for the device)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--train", action="store_true",
                   help="time a training step (forward + backward: gradients of the input and every parameter)")
    p.add_argument("--eager", action="store_true",
                   help="the chains' myops row: their myops.nn module in eager mode (default: torch.compile with "
                        "the rewrite for a training step and for the family's chains)")
    p.add_argument("--sweep", action="store_true",
                   help="time standalone transposed convs over many layer shapes against every stock choice, "
                        "in both layouts (see myops/sweep.py) instead of the workloads")
    p.add_argument("--sweep-limit", type=int, default=None, metavar="N", help="with --sweep: the first N layers only")
    p.add_argument("--sweep-target-ms", type=float, default=None, metavar="MS",
                   help="with --sweep: the floor each layer's size aims at (default 0.5 on CUDA, 2 on CPU)")
    p.add_argument("--reps", type=int, default=None, help="timed runs per cell (default 50 on CUDA, 10 on CPU)")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--markdown", metavar="PATH",
                   help="also write the table as a Markdown page (docs/PERF.md) with the device, versions, "
                        "date and command; several runs may append to one page with --append")
    p.add_argument("--append", action="store_true", help="with --markdown: add this run's section to the page")
    p.add_argument("--plot", metavar="PATH", help="also draw ms per workload and backend as an image (needs matplotlib)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a myops.backends option for the run (e.g. aten_training=always); repeatable")
    args = p.parse_args(argv)

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.strict_fp32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    reps = args.reps or (50 if device == "cuda" else 10)
    import myops  # noqa: F401  (registers the ops)
    from myops import backends
    previous = backends.set_options(**dict(backends.parse_assignment(o) for o in args.option))
    try:
        return _run(args, device, reps, argv)
    finally:
        backends.set_options(**previous)


def _run(args, device: str, reps: int, argv):
    """The workloads' rows (or the sweep), under the run's options."""
    if args.sweep:
        return _sweep(args, device, argv)
    rows = []
    for name in (args.workloads.split(",") if args.workloads else workloads.names(device)):
        r = run_workload(name, device, DTYPES[args.dtype], not args.no_compile, reps, train=args.train,
                         eager=args.eager)
        r["strict_fp32"] = args.strict_fp32
        rows.append(r)
        timing = ", ".join(f"{k[:-3]} {v:.3f} ms" for k, v in r.items() if k.endswith("_ms"))
        print(f"[bench] {name} {args.dtype} on {device}: {timing}; myops rel-L2 err {r['myops_rel_l2']:.2e}",
              file=sys.stderr, flush=True)
    print(_table(rows))
    if args.json:
        _write_json(args.json, rows)
    if args.markdown:
        mode = (", training step" if rows[0].get("train") else "") + (", eager modules" if args.eager else "")
        _write_markdown(args.markdown, _title(rows[0], mode), _table(rows), device, argv, args.append)
    if args.plot:
        _plot(args.plot, rows, device)
    return rows


def _write_json(path: str, rows) -> None:
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)


def _title(row, mode: str) -> str:
    return f"{row['dtype']}{' (strict float32)' if row.get('strict_fp32') else ''}{mode}"


def _sweep(args, device: str, argv):
    def log(line):
        print(line, file=sys.stderr, flush=True)
    rows = sweep.run(device, DTYPES[args.dtype], not args.no_compile, args.reps, args.sweep_limit,
                     args.sweep_target_ms, log)
    for r in rows:
        r["strict_fp32"] = args.strict_fp32
    text = sweep.table(rows)
    print(text)
    if args.json:
        _write_json(args.json, rows)
    if args.markdown:
        _write_markdown(args.markdown, _title(rows[0], ", layer sweep"), text, device, argv, args.append)
    return rows


def _plot(path: str, rows, device: str) -> bool:
    """Grouped bars of ms per workload and backend (log scale); False, with a message, where
    matplotlib is missing (an optional dependency: the table is printed either way)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("myops.bench: --plot needs matplotlib (pip install matplotlib); no plot written", file=sys.stderr)
        return False
    labels = [c for c in ("eager", "inductor", "myops") if f"{c}_ms" in rows[0]]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)), 4))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        ax.bar([k + i * width for k in range(len(rows))], [r[f"{label}_ms"] for r in rows], width, label=label)
    ax.set_xticks([k + width * (len(labels) - 1) / 2 for k in range(len(rows))])
    ax.set_xticklabels([r["workload"] for r in rows], rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("ms per " + ("training step" if rows[0].get("train") else "call"))
    ax.set_title(f"{rows[0]['dtype']} on {_environment(device)}", fontsize=8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _environment(device: str) -> str:
    if device == "cuda":
        where = f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
    else:
        where = f"CPU ({os.cpu_count()} cores visible)"
    return f"{where}; torch {torch.__version__}; {datetime.date.today().isoformat()}"


def _write_markdown(path: str, title: str, table: str, device: str, argv, append: bool) -> None:
    command = "python -m myops.bench " + " ".join(sys.argv[1:] if argv is None else argv)
    section = f"## {title}\n\n{_environment(device)}. Command: `{command}`\n\n{table}\n"
    header = ("# Performance\n\nGenerated by `python -m myops.bench --markdown docs/PERF.md` (medians of timed "
              "runs in one process, each workload's rows side by side; ms per call). Workloads: "
              "`myops/workloads.py`; the layer sweep (`--sweep`): `myops/sweep.py`.\n\n")
    if append and os.path.exists(path):
        with open(path, "a") as f:
            f.write("\n" + section)
    else:
        with open(path, "w") as f:
            f.write(header + section)


if __name__ == "__main__":
    main()
