"""python -m myops.bench --sweep: transposed-conv layers beyond the seed workloads, myops against
every stock choice, in each input layout.

Layers: channels 3-512, kernels 2-7 and asymmetric ones, strides 1-3 with and without dilation,
groups, padding and output_padding, the k4 s2 / k3 s2 up-sampling layers of decoders and GAN
generators, and a latent vector's first layer (1 x 1 input). Each layer gets a batch and map size
that puts its floor (below) near a target time, so that every call takes about 0.2-10 ms on the
device that runs it.

Columns, for each layer and input layout (NCHW, channels-last), all medians of calls queued back
to back on the device (its time inside a model), in turn, in one process:
  myops       myops.conv_transpose2d as shipped (its timed choice among our kernels and cuDNN's)
  ours        our kernels alone (myops.backends conv_source="myops")
  eager       F.conv_transpose2d in that layout (cuDNN with torch.backends.cudnn.benchmark on)
  eager_cl    NCHW input only: copied to channels-last, F.conv_transpose2d, copied back
  inductor    torch.compile of the layer (skipped with --no-compile)
The best stock time is the least of eager, eager_cl and inductor; a ratio over 1 means myops is
faster. The floor is the larger of FLOPs over the measured matrix-multiply rate and the fewest
bytes (input, weight, output once) over the measured copy bandwidth, in the sweep's dtype.
"""
import math
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

import myops
from ._shapes import conv_transpose_out_size
from ._timing import queued_median_ms_each

Pair = Tuple[int, int]


@dataclass(frozen=True)
class Layer:
    c_in: int
    c_out: int
    kernel: Pair
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    output_padding: Pair = (0, 0)
    dilation: Pair = (1, 1)
    groups: int = 1
    latent: bool = False  # a 1 x 1 input (a generator's first layer): only the batch grows

    @property
    def name(self) -> str:
        def pair(p):
            return str(p[0]) if p[0] == p[1] else f"{p[0]}x{p[1]}"
        parts = [f"{self.c_in}->{self.c_out}", f"k{pair(self.kernel)}", f"s{pair(self.stride)}"]
        if self.padding != (0, 0):
            parts.append(f"p{pair(self.padding)}")
        if self.output_padding != (0, 0):
            parts.append(f"op{pair(self.output_padding)}")
        if self.dilation != (1, 1):
            parts.append(f"d{pair(self.dilation)}")
        if self.groups > 1:
            parts.append(f"g{self.groups}")
        return " ".join(parts) + (" (1x1 in)" if self.latent else "")

    def conv_args(self):
        return self.stride, self.padding, self.output_padding, self.groups, self.dilation

    def out_hw(self, h: int, w: int) -> Pair:
        return tuple(conv_transpose_out_size(i, k, s, p, op, d) for i, k, s, p, op, d in
                     zip((h, w), self.kernel, self.stride, self.padding, self.output_padding, self.dilation))


def _sq(v: int) -> Pair:
    return (v, v)


def layers() -> List[Layer]:
    """The sweep's layers (see the module docstring), each once."""
    out: List[Layer] = []
    widths = (16, 32, 64, 128, 256, 512)
    for c in widths:  # up-sampling: k4 s2 p1 (DCGAN, pix2pix, diffusers' ConvT upsampler), k3 s2 p1 op1 (CycleGAN)
        out.append(Layer(c, max(c // 2, 3), _sq(4), _sq(2), _sq(1)))
        out.append(Layer(c, max(c // 2, 3), _sq(3), _sq(2), _sq(1), _sq(1)))
    for c in (32, 64, 128):  # image heads, and a 3-channel input
        out.append(Layer(c, 3, _sq(4), _sq(2), _sq(1)))
        out.append(Layer(c, 3, _sq(7), _sq(1), _sq(3)))
    out.append(Layer(3, 32, _sq(4), _sq(2), _sq(1)))
    for k in (2, 3, 4, 5, 7):  # square kernels at stride 1 (padding keeps the size) and stride 2
        out.append(Layer(64, 64, _sq(k), _sq(1), _sq(k // 2)))
        out.append(Layer(64, 128, _sq(k), _sq(2), _sq((k - 1) // 2)))  # (k2 s2: taps without overlap)
    for k, s in (((1, 7), (1, 2)), ((7, 1), (2, 1)), ((3, 5), (2, 3)), ((3, 7), (1, 1)), ((5, 3), (1, 2))):
        out.append(Layer(64, 64, k, s, (k[0] // 2, k[1] // 2)))
    for c in (16, 64, 256):  # stride 3
        out.append(Layer(c, c, _sq(3), _sq(3)))
        out.append(Layer(c, c, _sq(5), _sq(3), _sq(1), _sq(1)))
    out += [Layer(64, 64, _sq(3), _sq(1), _sq(2), dilation=_sq(2)),  # dilation
            Layer(64, 64, _sq(3), _sq(2), _sq(2), _sq(1), _sq(2)),
            Layer(32, 64, (3, 5), (2, 3), (1, 2), dilation=(2, 1), groups=4),
            Layer(128, 128, _sq(3), _sq(3), _sq(1), dilation=_sq(3))]
    out += [Layer(64, 64, _sq(3), _sq(1), _sq(1), groups=4),  # groups, up to depthwise
            Layer(128, 128, _sq(4), _sq(2), _sq(1), groups=32),
            Layer(64, 64, _sq(3), _sq(1), _sq(1), groups=64),
            Layer(256, 256, _sq(4), _sq(2), _sq(1), groups=2)]
    out += [Layer(100, 512, _sq(4), latent=True), Layer(128, 256, _sq(4), latent=True)]
    return out


def _flops_bytes(layer: Layer, n: int, h: int, w: int, dtype: torch.dtype) -> Tuple[float, float]:
    oh, ow = layer.out_hw(h, w)
    taps = layer.kernel[0] * layer.kernel[1]
    flops = 2.0 * n * layer.c_in * h * w * (layer.c_out // layer.groups) * taps
    numel = n * layer.c_in * h * w + n * layer.c_out * oh * ow + layer.c_in * (layer.c_out // layer.groups) * taps
    return flops, float(numel * dtype.itemsize)


@dataclass
class Ceilings:
    flops_per_ms: float
    bytes_per_ms: float

    def floor_ms(self, flops: float, nbytes: float) -> float:
        return max(flops / self.flops_per_ms, nbytes / self.bytes_per_ms)


def measure_ceilings(device: str, dtype: torch.dtype) -> Ceilings:
    """The device's matrix-multiply rate in dtype (TF32 where allowed for float32) and its copy
    bandwidth (bytes read plus written), measured."""
    m = 8192 if device == "cuda" else 1024
    a = torch.randn(m, m, device=device, dtype=dtype)
    b = torch.randn(m, m, device=device, dtype=dtype)
    src = torch.empty(2 ** 28 if device == "cuda" else 2 ** 24, device=device, dtype=torch.uint8)
    dst = torch.empty_like(src)
    t = queued_median_ms_each({"mm": lambda: a @ b, "copy": lambda: dst.copy_(src)}, device, warmup=3, reps=10)
    return Ceilings(2.0 * m ** 3 / t["mm"], 2.0 * src.numel() / t["copy"])


def size_for(layer: Layer, dtype: torch.dtype, ceilings: Ceilings, target_ms: float) -> Tuple[int, int, int]:
    """(batch, height, width) whose floor is near target_ms: a square map grown from 8 x 8 at
    batch 8 (a 1 x 1 input: the batch alone), the batch grown past a 512 x 512 map."""
    n, hw = 8, 8
    if layer.latent:
        while n < 2 ** 16 and ceilings.floor_ms(*_flops_bytes(layer, n * 2, 1, 1, dtype)) <= target_ms:
            n *= 2
        return n, 1, 1
    while hw < 512 and ceilings.floor_ms(*_flops_bytes(layer, n, hw * 2, hw * 2, dtype)) <= target_ms:
        hw *= 2
    while n < 1024 and ceilings.floor_ms(*_flops_bytes(layer, n * 2, hw, hw, dtype)) <= target_ms:
        n *= 2
    return n, hw, hw


def _stock_and_ours(layer: Layer, x: List[torch.Tensor], weight: torch.Tensor, channels_last: bool,
                    compile_inductor: bool) -> Dict[str, callable]:
    """The row's callables, each cycling through the input sets x (so that no set stays in the
    cache from one call to the next)."""
    args = layer.conv_args()
    state = {"i": 0}

    def nxt():
        state["i"] = (state["i"] + 1) % len(x)
        return x[state["i"]]

    w_stock = weight.contiguous(memory_format=torch.channels_last) if channels_last else weight
    fns = {
        "myops": lambda: myops.conv_transpose2d(nxt(), weight, None, *args),
        "ours": lambda: _forced_ours(nxt(), weight, args),
        "eager": lambda: F.conv_transpose2d(nxt(), w_stock, None, *args),
    }
    if not channels_last:
        w_cl = weight.contiguous(memory_format=torch.channels_last)
        fns["eager_cl"] = lambda: F.conv_transpose2d(nxt().contiguous(memory_format=torch.channels_last), w_cl,
                                                     None, *args).contiguous()
    if compile_inductor:
        compiled = torch.compile(lambda t: F.conv_transpose2d(t, w_stock, None, *args), dynamic=False)
        fns["inductor"] = lambda: compiled(nxt())
    return fns


def _forced_ours(x, weight, args):
    with myops.backends.options(conv_source="myops"):
        return myops.conv_transpose2d(x, weight, None, *args)


STOCK = ("eager", "eager_cl", "inductor")


def run_layer(layer: Layer, layout: str, device: str, dtype: torch.dtype, ceilings: Ceilings, target_ms: float,
              compile_inductor: bool, reps: int) -> dict:
    n, h, w = size_for(layer, dtype, ceilings, target_ms)
    memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    gen = torch.Generator(device=device).manual_seed(0)
    sets = 3 if device == "cuda" else 1
    x = [torch.randn(n, layer.c_in, h, w, device=device, dtype=dtype, generator=gen).contiguous(
        memory_format=memory_format) for _ in range(sets)]
    kh, kw = layer.kernel
    weight = torch.randn(layer.c_in, layer.c_out // layer.groups, kh, kw, device=device, dtype=dtype,
                         generator=gen) / math.sqrt(layer.c_in * kh * kw / layer.groups)
    fns = _stock_and_ours(layer, x, weight, layout == "channels_last", compile_inductor)
    # every callable computes the same conv: a check that each row times what it claims
    ref = F.conv_transpose2d(x[0].double(), weight.double(), None, *layer.conv_args())
    out = myops.conv_transpose2d(x[0], weight, None, *layer.conv_args())
    rel_l2 = ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    del out, ref
    times = queued_median_ms_each(fns, device, warmup=3, reps=reps)
    flops, nbytes = _flops_bytes(layer, n, h, w, dtype)
    row = {"layer": layer.name, "layout": layout, "size": f"{n}x{h}x{w}", "dtype": str(dtype).replace("torch.", ""),
           "myops_rel_l2": rel_l2, "floor_ms": ceilings.floor_ms(flops, nbytes),
           **{f"{k}_ms": v for k, v in times.items()}}
    stock = {k: times[k] for k in STOCK if k in times}
    row["best_stock"] = min(stock, key=stock.get)
    row["vs_best_stock"] = stock[row["best_stock"]] / times["myops"]
    row["ours_vs_best_stock"] = stock[row["best_stock"]] / times["ours"]
    if compile_inductor:
        torch._dynamo.reset()
    return row


def run(device: str, dtype: torch.dtype, compile_inductor: bool = True, reps: Optional[int] = None,
        limit: Optional[int] = None, target_ms: Optional[float] = None, log=None) -> List[dict]:
    """Every layer (the first `limit`) in both layouts; cuDNN's own benchmark mode on meanwhile."""
    reps = reps or (30 if device == "cuda" else 5)
    target_ms = target_ms or (0.5 if device == "cuda" else 2.0)
    ceilings = measure_ceilings(device, dtype)
    rows = []
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        for layer in layers()[:limit]:
            for layout in ("nchw", "channels_last"):
                row = run_layer(layer, layout, device, dtype, ceilings, target_ms, compile_inductor, reps)
                rows.append(row)
                if log:
                    log(f"[sweep] {row['layer']} {layout} {row['size']}: myops {row['myops_ms']:.3f} ms, best stock "
                        f"{row['best_stock']} {row[row['best_stock'] + '_ms']:.3f} ms ({row['vs_best_stock']:.2f}x)")
    finally:
        torch.backends.cudnn.benchmark = benchmark
    return rows


def geomean(values) -> float:
    values = list(values)
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def table(rows: List[dict]) -> str:
    """The sweep's rows, then per layout the geometric mean of myops against the best stock and the
    five rows where myops fares worst."""
    cols = ["myops", "ours", "eager", "eager_cl", "inductor"]
    present = [c for c in cols if any(f"{c}_ms" in r for r in rows)]
    head = ("| layer | layout | N x H x W | " + " | ".join(f"{c} ms" for c in present) +
            " | best stock | myops vs best stock | ours vs best stock | floor ms | myops % of floor | myops rel-L2 |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["layer"], r["layout"], r["size"]] + [f"{r[c + '_ms']:.3f}" if f"{c}_ms" in r else "" for c in present]
        cells += [r["best_stock"], f"{r['vs_best_stock']:.2f}x", f"{r['ours_vs_best_stock']:.2f}x",
                  f"{r['floor_ms']:.3f}", f"{100 * r['floor_ms'] / r['myops_ms']:.0f}%", f"{r['myops_rel_l2']:.1e}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for layout in ("nchw", "channels_last", None):
        sel = [r for r in rows if layout is None or r["layout"] == layout]
        if not sel:
            continue
        worst = sorted(sel, key=lambda r: r["vs_best_stock"])[:5]
        lines.append(f"- {layout or 'all'}: myops vs best stock, geometric mean {geomean(r['vs_best_stock'] for r in sel):.2f}x "
                     f"(ours alone {geomean(r['ours_vs_best_stock'] for r in sel):.2f}x) over {len(sel)} rows; worst: " +
                     ", ".join(f"{r['layer']} {r['layout']} {r['vs_best_stock']:.2f}x" for r in worst))
    return "\n".join(lines)
