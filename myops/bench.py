"""python -m myops.bench: the seed workloads, eager PyTorch vs torch.compile (Inductor) vs myops (for
the norm + activation family's chains: torch.compile with the myops rewrite).

Each row times the three side by side in one process (CUDA events on a GPU, median of many runs
after warm-up, the three timed in turn, one call each per round) and reports each one's error
against a float64 reference.
"""
import argparse
import copy
import datetime
import gc
import json
import os
import sys

import torch

from . import workloads
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


def run_workload(name, device, dtype, compile_inductor, reps):
    case = workloads.build(name, device, dtype)
    ref = _reference(case, device)
    results = {"workload": name, "device": device, "dtype": str(dtype).replace("torch.", "")}
    fns = {"eager": lambda: case.module(case.input), "myops": lambda: case.myops_fn(case.input)}
    if compile_inductor:
        compiled = torch.compile(case.module)
        fns["inductor"] = lambda: compiled(case.input)
    with torch.no_grad():
        for label, fn in fns.items():
            out = fn()
            results[f"{label}_max_err"], results[f"{label}_rel_l2"] = _errors(out, ref)
            del out
        for label, ms in median_ms_each(fns, device, warmup=3, reps=reps).items():
            results[f"{label}_ms"] = ms
    results["flops"], results["bytes_min"] = case.flops, case.bytes_min
    del case, ref, fns
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
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["workload"], r["dtype"]] + [f"{r[c + '_ms']:.3f}" for c in present]
        cells.append(f"{r['eager_ms'] / r['myops_ms']:.2f}x")
        if "inductor" in present:
            cells.append(f"{r['inductor_ms'] / r['myops_ms']:.2f}x")
        cells += [f"{r['myops_rel_l2']:.2e}", f"{r['eager_rel_l2']:.2e}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m myops.bench", description=__doc__)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32")
    p.add_argument("--strict-fp32", action="store_true", help="TF32 off everywhere (cuDNN, cuBLAS, Inductor, myops)")
    p.add_argument("--workloads", default=",".join(workloads.WORKLOADS), help="comma-separated subset")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--reps", type=int, default=None, help="timed runs per cell (default 50 on CUDA, 10 on CPU)")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--markdown", metavar="PATH",
                   help="also write the table as a Markdown page (docs/PERF.md) with the device, versions, "
                        "date and command; several runs may append to one page with --append")
    p.add_argument("--append", action="store_true", help="with --markdown: add this run's section to the page")
    args = p.parse_args(argv)

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.strict_fp32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    reps = args.reps or (50 if device == "cuda" else 10)
    import myops  # noqa: F401  (registers the ops)

    rows = []
    for name in args.workloads.split(","):
        r = run_workload(name, device, DTYPES[args.dtype], not args.no_compile, reps)
        r["strict_fp32"] = args.strict_fp32
        rows.append(r)
        timing = ", ".join(f"{k[:-3]} {v:.3f} ms" for k, v in r.items() if k.endswith("_ms"))
        print(f"[bench] {name} {args.dtype} on {device}: {timing}; myops rel-L2 err {r['myops_rel_l2']:.2e}",
              file=sys.stderr, flush=True)
    print(_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.markdown:
        _write_markdown(args.markdown, rows, device, argv, args.append)
    return rows


def _environment(device: str) -> str:
    if device == "cuda":
        where = f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
    else:
        where = f"CPU ({os.cpu_count()} cores visible)"
    return f"{where}; torch {torch.__version__}; {datetime.date.today().isoformat()}"


def _write_markdown(path: str, rows, device: str, argv, append: bool) -> None:
    command = "python -m myops.bench " + " ".join(sys.argv[1:] if argv is None else argv)
    section = (f"## {rows[0]['dtype']}{' (strict float32)' if rows[0].get('strict_fp32') else ''}\n\n"
               f"{_environment(device)}. Command: `{command}`\n\n{_table(rows)}\n")
    header = ("# Performance\n\nGenerated by `python -m myops.bench --markdown docs/PERF.md` (medians of timed "
              "runs in one process, each workload's rows side by side; ms per call). Workloads: "
              "`myops/workloads.py`.\n\n")
    if append and os.path.exists(path):
        with open(path, "a") as f:
            f.write("\n" + section)
    else:
        with open(path, "w") as f:
            f.write(header + section)


if __name__ == "__main__":
    main()
