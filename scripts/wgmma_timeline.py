"""Per-SM timeline of the two-block wgmma kernel's blocks (a diagnostic, GPU only).

Needs a build with notes/wgmma_timeline.patch applied (`git apply`, then `python3 setup.py
build_ext --inplace`): with MYOPS_TIMELINE=<file> set, that build records per block %smid and
%globaltimer at its start, when its first chunk is ready, when its MMAs are done and at its end, and
writes them to the file after each launch. Usage: python3 scripts/wgmma_timeline.py L2_19:bfloat16 ...
Prints per phase the mean duration and, per SM, the share of time spent with each combination of
blocks in fill / MMA phase / epilogue (NOTES_GPU.md, session 27)."""
import os, sys, collections
import torch
import myops  # noqa
from myops.workloads import build
for spec in sys.argv[1:]:
    name, dtn = spec.split(":")
    path = f"/tmp/tl_{name}_{dtn}.bin"
    case = build(name, "cuda", getattr(torch, dtn))
    os.environ["MYOPS_TIMELINE"] = path
    with torch.no_grad():
        for _ in range(3): case.myops_fn(case.input)
        torch.cuda.synchronize()
    del os.environ["MYOPS_TIMELINE"]
    a = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.int64).reshape(-1, 5)
    sm, t0, t1, t2, t3 = a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4]
    base = t0.min().item(); span = t3.max().item() - base
    print(f"== {name}/{dtn}: {len(a)} blocks, span {span/1e3:.0f} us, SMs {len(set(sm.tolist()))}")
    for lab, d in (("fill (start->first chunk)", t1 - t0), ("MMA phase", t2 - t1), ("epilogue", t3 - t2), ("block life", t3 - t0)):
        d = d.double()
        print(f"   {lab:28s} mean {d.mean()/1e3:6.2f} us  p10 {d.quantile(0.1)/1e3:6.2f}  p90 {d.quantile(0.9)/1e3:6.2f}")
    # per SM sweep: state = (#fill, #mma, #epi)
    acc = collections.Counter(); gaps = []
    L0, L1, L2, L3, SM = t0.tolist(), t1.tolist(), t2.tolist(), t3.tolist(), sm.tolist()
    by = collections.defaultdict(list)
    for i, s in enumerate(SM): by[s].append(i)
    for s, idx in by.items():
        ev = []
        for i in idx:
            ev += [(L0[i], 0, 1), (L1[i], 0, -1), (L1[i], 1, 1), (L2[i], 1, -1), (L2[i], 2, 1), (L3[i], 2, -1)]
        ev.sort()
        st = [0, 0, 0]; prev = ev[0][0]
        for t, k, dlt in ev:
            acc[tuple(st)] += t - prev; prev = t; st[k] += dlt
        # slot turnover: each start after the first two matched to the latest earlier end
        ends = sorted(L3[i] for i in idx); starts = sorted(L0[i] for i in idx)[2:]
        for st_, en in zip(starts, ends): gaps.append(st_ - en)
    tot = sum(acc.values())
    print("   time share per SM by (blocks in fill, in MMA phase, in epilogue):")
    for k, v in sorted(acc.items(), key=lambda kv: -kv[1])[:10]:
        print(f"     {k}: {v/tot*100:5.1f}%")
    g = torch.tensor(gaps, dtype=torch.float64)
    print(f"   slot turnover (next block start - a block end, same SM): mean {g.mean()/1e3:.2f} us, p50 {g.median()/1e3:.2f}")
    # phase alignment: fraction of MMA-phase time where the other block is also in its MMA phase
    both = sum(v for k, v in acc.items() if k[1] >= 2); one = sum(v for k, v in acc.items() if k[1] == 1)
    print(f"   MMA phase busy (>=1 block) {(both+one)/tot*100:.1f}%, both blocks {both/tot*100:.1f}%")
