"""Small CUDA calls of every op for compute-sanitizer (memcheck / racecheck); checks results too."""
import sys

import torch
import torch.nn.functional as F

import myops
import myops.backends

fused_only = "--fused-only" in sys.argv
# --kernel NAME: the conv engines' options for the whole run (the choice as shipped without it)
KERNEL_OPTIONS = {"wgmma": {"force_wgmma": True},  # the Hopper engine on every case it can run
                  "wgmma_nhwc": {"force_wgmma": True, "nhwc_staging": "always"},  # its input staged NHWC
                  "no_wgmma": {"wgmma": False}}  # the mma.sync engine where the Hopper one would run
if "--kernel" in sys.argv:
    myops.backends.set_options(**KERNEL_OPTIONS[sys.argv[sys.argv.index("--kernel") + 1]])
# --ours-only: skip the cases whose conv is cuDNN's. Racecheck is for our kernels (run it with
# --kernel-name kns=myops); on cuDNN's float32 channels-last conv it stops with "Internal Sanitizer
# Error: failed to handle a hardware exception" (H100, compute-sanitizer of CUDA 13.0).
ours_only = "--ours-only" in sys.argv
# the fused op's normalise pass alongside the conv runs by default only on large shapes: forced
# here (3 follower blocks) so that the sanitizers see it, unless the caller chose
myops.backends.set_options(gn_followers=3)
dev = "cuda"
torch.manual_seed(0)
CONFIGS = [  # (N, C_in, C_out_g, groups, H, W, k, stride, padding, output_padding, dilation, bias)
    (2, 8, 8, 1, 7, 9, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True),
    (1, 8, 4, 2, 5, 6, (3, 5), (2, 3), (1, 2), (1, 0), (2, 1), False),
    (2, 4, 40, 1, 3, 4, (2, 2), (3, 2), (0, 1), (2, 1), (1, 1), True),
    (5, 8, 24, 1, 2, 3, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True),     # tiles spanning images
    (6, 8, 24, 1, 4, 4, (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), False),    # ... of 16 pixels each
    (3, 8, 24, 1, 8, 8, (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), False),    # ... of 64 pixels each
    (1, 16, 48, 1, 20, 18, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), True),  # wgmma's shapes
    (1, 8, 40, 1, 12, 13, (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), False),
    (2, 12, 40, 1, 11, 21, (5, 3), (2, 2), (2, 1), (1, 0), (1, 2), True),  # stride 2, unequal taps
    (300, 20, 40, 1, 1, 1, (4, 4), (1, 1), (0, 0), (0, 0), (1, 1), True),   # 1 x 1 input: the GEMM view
    (3, 8, 24, 1, 1, 7, (3, 2), (1, 2), (1, 0), (0, 1), (2, 1), True),      # one input row
    (1, 16, 64, 1, 15, 12, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True),   # wgmma's 17-row strips
    (1, 12, 64, 1, 30, 32, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), True),   # wgmma, float32 input via TMA
    (1, 20, 64, 1, 18, 40, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), True),   # ... 16-bit boxes, channel tail
    (2, 6, 20, 2, 9, 40, (3, 4), (2, 3), (1, 1), (0, 1), (1, 2), True),     # direct: several tiles
    (1, 12, 64, 1, 9, 11, (5, 5), (1, 1), (1, 2), (0, 0), (1, 1), True),   # strict: the one-block FFMA build
    (1, 12, 64, 1, 9, 13, (3, 7), (1, 1), (1, 2), (0, 0), (1, 1), True),   # strict: Winograd rows
    (2, 10, 40, 1, 7, 9, (6, 3), (2, 1), (2, 1), (1, 0), (1, 1), False),   # ... two phases (k6 s2)
    (2, 24, 3, 1, 9, 45, (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), True),    # few-channels (plain op): RGB head
    (1, 40, 2, 2, 7, 10, (5, 3), (3, 2), (2, 1), (1, 1), (2, 1), False),   # ... groups, stride 3, dilation
]
worst = 0.0
# float32 four times: TF32 (tensor cores), strict (allow_tf32 off) through our FFMA kernels, and
# TF32 / strict through cuDNN's conv and our passes after it (GroupNorm read through bias + GELU;
# the fused op's channels-last passes); bfloat16 through either source
for dtype, tf32, source in ((torch.float32, True, "myops"), (torch.float32, False, "myops"),
                            (torch.float32, True, "cudnn"), (torch.float32, False, "cudnn"),
                            (torch.bfloat16, True, "myops"), (torch.bfloat16, True, "cudnn"),
                            (torch.float64, True, "myops")):
    if ours_only and source == "cudnn":
        continue
    torch.backends.cudnn.allow_tf32 = tf32
    myops.backends.set_options(conv_source=source)
    for n, cin, cog, g, h, w, k, s, p, op, d, has_b in CONFIGS:
        print(f"{dtype} tf32={tf32} {source}: {(n, cin, cog, g, h, w, k, s, p, op, d, has_b)}", flush=True)
        x = torch.randn(n, cin, h, w, device=dev, dtype=dtype)
        wt = torch.randn(cin, cog, *k, device=dev, dtype=dtype)
        b = torch.randn(cog * g, device=dev, dtype=dtype) if has_b else None
        args = [list(s), list(p), list(op), g, list(d)]
        ref = F.conv_transpose2d(x.double(), wt.double(), None if b is None else b.double(), s, p, op, g, d)
        if not fused_only:
            y = torch.ops.myops.conv_transpose2d(x, wt, b, *args)
            worst = max(worst, ((y.double() - ref).abs().max() / ref.abs().max()).item())
            torch.ops.myops.gelu(y, approximate="tanh")
            torch.ops.myops.group_norm(y, 2 if (cog * g) % 2 == 0 else 1, None, None, 1e-5)
        c_out = cog * g
        gn_w = torch.randn(c_out, device=dev, dtype=dtype)
        out = torch.ops.myops.conv_transpose2d_gelu_group_norm(x, wt, b, *args, "none", 2 if c_out % 2 == 0 else 1,
                                                               gn_w, None, 1e-5)
        fref = F.group_norm(F.gelu(ref), 2 if c_out % 2 == 0 else 1, gn_w.double(), None, 1e-5)
        worst = max(worst, ((out.double() - fref).abs().max() / fref.abs().max()).item())
        # the same chain stopping at GroupNorm's statistics, normalised by torch ops
        act, gmean, grstd = torch.ops.myops.conv_transpose2d_gelu_group_stats(x, wt, b, *args, "none",
                                                                              2 if c_out % 2 == 0 else 1, 1e-5)
        out = myops.group_norm_with_stats(act, gmean, grstd, gn_w, None)
        worst = max(worst, ((out.double() - fref).abs().max() / fref.abs().max()).item())
        # the L2_11 chain: conv with batch statistics, then BN + tanh + max-pool + GroupNorm
        out, mean, var = torch.ops.myops.conv_transpose2d_channel_stats(x, wt, b, *args)
        worst = max(worst, ((mean.double() - ref.mean((0, 2, 3))).abs().max() / ref.abs().max()).item())
        pool = [[2, 1], [2, 1], [1, 0], [1, 1]] if out.shape[2] >= 2 else [[1, 1], [1, 1], [0, 0], [1, 1]]
        y = torch.ops.myops.batch_norm_tanh_max_pool2d_group_norm(out, mean, var, None, None, 1e-5, *pool,
                                                                   2 if c_out % 2 == 0 else 1, gn_w, None, 1e-5)
        yref = F.group_norm(F.max_pool2d(torch.tanh(F.batch_norm(out.double(), None, None, training=True, eps=1e-5)),
                                         *pool), 2 if c_out % 2 == 0 else 1, gn_w.double(), None, 1e-5)
        worst = max(worst, ((y.double() - yref).abs().max() / yref.abs().max()).item())
        # BatchNorm's buffer step on buffers of the input's dtype, one of them strided, and a counter
        rm, rv = torch.zeros(2 * c_out, device=dev, dtype=dtype)[::2], torch.ones(c_out, device=dev, dtype=dtype)
        torch.ops.myops.batch_norm_update_running_stats(rm, rv, mean, var, 0.1, 1.0, torch.zeros((), dtype=torch.int64,
                                                                                                  device=dev))
        worst = max(worst, ((rm.double() - 0.1 * mean.double()).abs().max() / ref.abs().max()).item())
        # the norm + activation family's conv step: per-group and per-channel statistics, GELU epilogue
        groups_n = 2 if c_out % 2 == 0 else 1
        for activation, stats in (("gelu", "group"), ("none", "channel"), ("none", "group"), ("relu", "group")):
            act, mean, var = torch.ops.myops.conv_transpose2d_act_stats(x, wt, b, *args, activation, 0.01, "none", stats,
                                                                        groups_n)
            aref = F.gelu(ref) if activation == "gelu" else F.relu(ref) if activation == "relu" else ref
            sref = aref.mean((0, 2, 3)) if stats == "channel" else aref.reshape(n, groups_n, -1).mean(-1)
            worst = max(worst, ((mean.double() - sref.reshape(mean.shape)).abs().max() / ref.abs().max()).item())
        # the family's eager normalise + activation pass over that output (vectors where they fit)
        if not fused_only:
            ct = torch.float64 if dtype == torch.float64 else torch.float32
            p_nc = torch.randn(n, c_out, device=dev, dtype=ct)
            y = torch.ops.myops.normalize_act(act, p_nc, p_nc.abs() + 0.5, p_nc, "silu", 0.01, "none")
            yref = F.silu((act.double() - p_nc.double()[..., None, None]) * (p_nc.double().abs() + 0.5)[..., None, None]
                          + p_nc.double()[..., None, None])
            worst = max(worst, ((y.double() - yref).abs().max() / yref.abs().max().clamp_min(1)).item())
# channels-last inputs (a 16-bit one is the Hopper kernel's NHWC input as it is; float32 gets a
# rounding copy) and an NCHW one with an odd pixel count (the staging's generic transpose)
for dtype, shape in ((torch.bfloat16, (2, 16, 17, 20)), (torch.float32, (2, 16, 17, 20)), (torch.bfloat16, (1, 16, 15, 13))):
    torch.backends.cudnn.allow_tf32 = True
    x = torch.randn(*shape, device=dev, dtype=dtype)
    if shape[2] * shape[3] % 2 == 0:
        x = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(16, 64, 3, 3, device=dev, dtype=dtype)
    b = torch.randn(64, device=dev, dtype=dtype)
    ref = F.conv_transpose2d(x.double(), wt.double(), b.double(), 1, 1)
    y = torch.ops.myops.conv_transpose2d(x, wt, b, [1, 1], [1, 1], [0, 0], 1, [1, 1])
    worst = max(worst, ((y.double() - ref).abs().max() / ref.abs().max()).item())
# the L2_11 chain in one call on a layer the ping-pong wgmma kernel runs (34-row maps, 4 input
# chunks, 64 output channels): both store 2 x 2 windows (bfloat16 given channels-last, which it
# reads as such; odd width: the last column in none; the window of rows 16 / 17 split by the
# tiles); negative BatchNorm weights take the window minimum. 48 images: 288 tiles, so that on an
# H100 (132 persistent blocks) each block takes 2-3 tiles, both consumers working (the turn, the
# per-consumer stage barriers' parity)
# The tail after it: persistent blocks over the (n, group) items, 32 groups for several items per
# block.
for dtype in (torch.float32, torch.bfloat16):
    torch.backends.cudnn.allow_tf32 = True
    x = torch.rand(48, 64, 32, 31, device=dev, dtype=dtype)
    if dtype == torch.bfloat16:
        x = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(64, 64, 5, 5, device=dev, dtype=dtype) * 0.05
    bn_w, gn_w = torch.randn(64, device=dev, dtype=dtype), torch.randn(64, device=dev, dtype=dtype)
    for training in (True, False):
        stats = (None, None) if training else (torch.randn(64, device=dev), torch.rand(64, device=dev) + 0.5)
        y, _, _ = torch.ops.myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
            x, wt, None, [1, 1], [1, 1], [0, 0], 1, [1, 1], *stats, bn_w, None, training, 1e-5, [2, 2], [2, 2], [0, 0],
            [1, 1], 32, gn_w, None, 1e-5)
        conv = F.conv_transpose2d(x.double(), wt.double(), None, 1, 1)
        bn = F.batch_norm(conv, *(s.double() if s is not None else None for s in stats), bn_w.double(), None,
                          training, 0.0, 1e-5)
        yref = F.group_norm(F.max_pool2d(torch.tanh(bn), 2), 32, gn_w.double(), None, 1e-5)
        worst = max(worst, ((y.double() - yref).abs().max() / yref.abs().max()).item())
torch.cuda.synchronize()
print(f"sanitize cases done; worst relative max error {worst:.2e}")
