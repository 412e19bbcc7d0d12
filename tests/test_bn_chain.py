"""The L2_11 chain conv_transpose2d -> batch_norm -> tanh -> max_pool2d -> group_norm: the two ops
and the Python API against PyTorch (float64 references), gradients, BatchNorm buffer updates."""
import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import myops
from conftest import DEVICES, HAS_CUDA, NO_CUDA
from reference import (assert_matches, conv_args, f64, hopper_engine_runs, make_conv_inputs, random_conv_config,
                       tolerance)

OP = "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm"
RANDOM_RUNS = [(torch.float32, 100), (torch.float64, 30), (torch.bfloat16, 30), (torch.float16, 20)]


def random_pool(rng, h, w):
    while True:
        k = (rng.randint(1, 3), rng.randint(1, 3))
        pad = tuple(rng.randint(0, ki // 2) for ki in k)
        dil = (rng.randint(1, 2), rng.randint(1, 2))
        stride = (rng.randint(1, 3), rng.randint(1, 3))
        if all(size + 2 * p - d * (ki - 1) - 1 >= 0 for size, p, d, ki in zip((h, w), pad, dil, k)):
            return dict(kernel_size=k, pool_stride=stride, pool_padding=pad, pool_dilation=dil)


def reference(x, w, b, cfg, bn, pool, num_groups, gn_w, gn_b, gn_eps):
    """float64 chain as a PyTorch user writes it; bn = (running_mean, running_var, weight, bias,
    training, momentum, eps) with float64 copies of the buffers (updated in place)."""
    conv = F.conv_transpose2d(f64(x), f64(w), f64(b), *conv_args(cfg)[:3], cfg["groups"], cfg["dilation"])
    rm, rv, bw, bb, training, momentum, eps = bn
    y = torch.tanh(F.batch_norm(conv, rm, rv, f64(bw), f64(bb), training, momentum, eps))
    y = F.max_pool2d(y, pool["kernel_size"], pool["pool_stride"], pool["pool_padding"], pool["pool_dilation"])
    return F.group_norm(y, num_groups, f64(gn_w), f64(gn_b), gn_eps)


def random_case(rng, dtype, device):
    cfg = random_conv_config(rng)
    x, w, b = make_conv_inputs(cfg, dtype, device)
    c_out = cfg["C_out_g"] * cfg["groups"]
    oh = (cfg["H"] - 1) * cfg["stride"][0] - 2 * cfg["padding"][0] + cfg["dilation"][0] * (cfg["kH"] - 1) + cfg["output_padding"][0] + 1
    ow = (cfg["W"] - 1) * cfg["stride"][1] - 2 * cfg["padding"][1] + cfg["dilation"][1] * (cfg["kW"] - 1) + cfg["output_padding"][1] + 1
    pool = random_pool(rng, oh, ow)
    training = cfg["N"] * oh * ow > 1 and rng.random() < 0.7  # batch statistics need 2+ values
    affine = rng.random() < 0.7
    bw = torch.randn(c_out, dtype=dtype, device=device) if affine else None
    bb = torch.randn(c_out, dtype=dtype, device=device) if affine else None
    rm = torch.randn(c_out, dtype=torch.float32, device=device)
    rv = torch.rand(c_out, dtype=torch.float32, device=device) + 0.5
    num_groups = rng.choice([d for d in range(1, c_out + 1) if c_out % d == 0])
    gn_w = torch.randn(c_out, dtype=dtype, device=device) if rng.random() < 0.7 else None
    gn_b = torch.randn(c_out, dtype=dtype, device=device) if gn_w is not None and rng.random() < 0.8 else None
    bn = dict(running_mean=rm, running_var=rv, bn_weight=bw, bn_bias=bb, training=training,
              momentum=rng.choice([0.1, 0.3]), bn_eps=rng.choice([1e-5, 1e-3]))
    return cfg, x, w, b, bn, pool, num_groups, gn_w, gn_b


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,count", RANDOM_RUNS, ids=lambda v: str(v))
def test_random_configs_match_pytorch_chain(device, dtype, count):
    check_random_chain(random.Random(7 + count), count, dtype, device)


def check_random_chain(rng, count, dtype, device):
    """The one-call Python API on `count` random cases against the float64 chain, running buffers
    included."""
    for i in range(count):
        cfg, x, w, b, bn, pool, num_groups, gn_w, gn_b = random_case(rng, dtype, device)
        rm64, rv64 = f64(bn["running_mean"]), f64(bn["running_var"])
        ref = reference(x, w, b, cfg, (rm64, rv64, bn["bn_weight"], bn["bn_bias"], bn["training"], bn["momentum"],
                                       bn["bn_eps"]), pool, num_groups, gn_w, gn_b, 1e-5)
        out = myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
            x, w, b, cfg["stride"], cfg["padding"], cfg["output_padding"], cfg["groups"], cfg["dilation"],
            **bn, **pool, num_groups=num_groups, gn_weight=gn_w, gn_bias=gn_b, gn_eps=1e-5)
        try:
            assert out.dtype == dtype
            assert_matches(out, ref, tolerance(dtype, device) * 8, floor=1.0)
            # running buffers: float32 tensors, updated from statistics of the rounded conv output
            buf_tol = max(tolerance(dtype, device) * 4, 2e-6)
            assert_matches(bn["running_mean"], rm64, buf_tol, floor=1.0)
            assert_matches(bn["running_var"], rv64, buf_tol, floor=1.0)
        except AssertionError as e:
            raise AssertionError(f"config {i}: {cfg}, pool {pool}, training {bn['training']}: {e}") from None


# (C_out, H = W, num_groups, dtype): CUDA keeps a pooled (n, group) in shared memory when it fits
# (64 KB) and stages input planes in 32 KB batches; these cover a group too large (the three-kernel
# path), single-plane batches, 16-bit planes that start off 16-byte alignment, and a group of so
# many channels that their per-channel factors alone would overflow shared memory.
TAIL_SHAPES = [(16, 100, 1, torch.float32), (4, 90, 1, torch.float32), (6, 45, 2, torch.bfloat16),
               (12, 33, 3, torch.float16), (16384, 2, 1, torch.float32)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c_out,hw,num_groups,dtype", TAIL_SHAPES, ids=lambda v: str(v))
def test_large_and_misaligned_planes_match_pytorch_chain(device, c_out, hw, num_groups, dtype):
    torch.manual_seed(0)
    cfg = dict(N=2, C_in=3, C_out_g=c_out, groups=1, bias=True, H=hw, W=hw, kH=1, kW=1, stride=(1, 1), padding=(0, 0),
               output_padding=(0, 0), dilation=(1, 1))
    x, w, b = make_conv_inputs(cfg, dtype, device)
    pool = dict(kernel_size=(2, 2), pool_stride=(2, 2), pool_padding=(0, 0), pool_dilation=(1, 1))
    bn_w, bn_b = torch.randn(c_out, dtype=dtype, device=device), torch.randn(c_out, dtype=dtype, device=device)
    gn_w, gn_b = torch.randn(c_out, dtype=dtype, device=device), torch.randn(c_out, dtype=dtype, device=device)
    rm = torch.zeros(c_out, device=device)
    rv = torch.ones(c_out, device=device)
    rm64, rv64 = f64(rm), f64(rv)
    ref = reference(x, w, b, cfg, (rm64, rv64, bn_w, bn_b, True, 0.1, 1e-5), pool, num_groups, gn_w, gn_b, 1e-5)
    out = myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
        x, w, b, cfg["stride"], cfg["padding"], cfg["output_padding"], 1, cfg["dilation"], running_mean=rm,
        running_var=rv, bn_weight=bn_w, bn_bias=bn_b, training=True, momentum=0.1, bn_eps=1e-5, **pool,
        num_groups=num_groups, gn_weight=gn_w, gn_bias=gn_b, gn_eps=1e-5)
    assert_matches(out, ref, tolerance(dtype, device) * 8, floor=1.0)


class Block(nn.Module):
    """L2_11's block as a user writes it (scaled-down sizes)."""

    def __init__(self, cin=8, cout=16, groups=4, momentum=0.1, affine=True):
        super().__init__()
        self.conv = nn.ConvTranspose2d(cin, cout, 5, padding=1)
        self.bn = nn.BatchNorm2d(cout, momentum=momentum, affine=affine)
        self.pool = nn.MaxPool2d(2, 2)
        self.gn = nn.GroupNorm(groups, cout)

    def forward(self, x):
        return self.gn(self.pool(torch.tanh(self.bn(self.conv(x)))))


def api_call(m, x):
    bn = m.bn
    factor = 0.0
    if m.training:  # nn.BatchNorm2d's own bookkeeping
        bn.num_batches_tracked.add_(1)
        factor = 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum
    return myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
        x, m.conv.weight, m.conv.bias, m.conv.stride, m.conv.padding, running_mean=bn.running_mean,
        running_var=bn.running_var, bn_weight=bn.weight, bn_bias=bn.bias, training=m.training, momentum=factor,
        bn_eps=bn.eps, kernel_size=2, num_groups=m.gn.num_groups, gn_weight=m.gn.weight, gn_bias=m.gn.bias,
        gn_eps=m.gn.eps)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("momentum", [0.1, None])
def test_training_steps_match_modules_gradients_and_buffers(device, momentum):
    torch.manual_seed(0)
    ref = Block(momentum=momentum).to(device).double()
    mine = Block(momentum=momentum).to(device).double()
    mine.load_state_dict(ref.state_dict())
    for step in range(3):
        x = torch.randn(2, 8, 7, 6, device=device, dtype=torch.float64)
        xr, xm = x.clone().requires_grad_(), x.clone().requires_grad_()
        yr, ym = ref(xr), api_call(mine, xm)
        assert_matches(ym, yr, 1e-9)
        g = torch.randn_like(yr)
        yr.backward(g)
        ym.backward(g)
        assert_matches(xm.grad, xr.grad, 1e-9)
        for (name, pr), pm in zip(ref.named_parameters(), mine.parameters()):
            assert_matches(pm.grad, pr.grad, 1e-9), name
        for (name, br), bm in zip(ref.named_buffers(), mine.buffers()):
            assert torch.allclose(bm, br, rtol=1e-12, atol=1e-12), (step, name)
    ref.eval()
    mine.eval()
    x = torch.randn(2, 8, 7, 6, device=device, dtype=torch.float64)
    assert_matches(api_call(mine, x), ref(x), 1e-9)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [True, False])
def test_training_api_gradients_and_double_backward(device, affine):
    # the API in training (eager: aten's fused norm backwards on the CPU) on a channels-last input,
    # a GroupNorm with a bias but no weight, and its double backward (gradient penalties)
    torch.manual_seed(0)
    d = torch.float64
    x = torch.randn(2, 3, 5, 4, device=device, dtype=d).contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    w = torch.randn(3, 4, 3, 2, device=device, dtype=d, requires_grad=True)
    bn_w, bn_b, gn_b = (torch.randn(4, device=device, dtype=d, requires_grad=True) if affine else None
                        for _ in range(3))

    def chain(x, w, *params):
        bn_w, bn_b, gn_b = params if params else (None, None, None)
        return myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
            x, w, None, 2, 1, bn_weight=bn_w, bn_bias=bn_b, training=True, kernel_size=2, num_groups=2,
            gn_bias=gn_b)

    def reference(x, w, *params):
        bn_w, bn_b, gn_b = params if params else (None, None, None)
        z = F.batch_norm(F.conv_transpose2d(x, w, None, 2, 1), None, None, bn_w, bn_b, True)
        ones = None if gn_b is None else torch.ones_like(gn_b)  # (aten's backward fails on a bias without weight)
        return F.group_norm(F.max_pool2d(torch.tanh(z), 2), 2, ones, gn_b)

    inputs = (x, w, *((bn_w, bn_b, gn_b) if affine else ()))
    g = torch.randn_like(reference(*inputs))
    out = chain(*inputs)
    want = torch.autograd.grad(reference(*inputs), inputs, g)
    # twice through the retained graph: the second backward recomputes what the first released
    for got in (torch.autograd.grad(out, inputs, g, retain_graph=True), torch.autograd.grad(out, inputs, g)):
        for a, e in zip(got, want, strict=True):
            assert_matches(a, e, 1e-9)
    assert torch.autograd.gradgradcheck(chain, inputs, fast_mode=True)


# The batch statistics reduce each channel's (image, tile) partials; on CUDA a cluster of blocks
# may share a channel (one per 2048 entries, up to 8; the bn_stats_blocks option forces a count).
# Compared with float64 statistics of the op's own output, over batch sizes and forced clusters.
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [3, 300, 1100, 2100])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_batch_statistics_match_float64_of_the_output(device, n, dtype, monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(n, 4, 6, 6, device=device, dtype=dtype)
    w = torch.randn(4, 5, 3, 3, device=device, dtype=dtype) * 0.5
    b = torch.randn(5, device=device, dtype=dtype) + 3  # a mean well off zero
    for blocks in [None, 3, 8] if device == "cuda" else [None]:
        myops.backends.set_options(bn_stats_blocks=blocks)
        out, mean, var = torch.ops.myops.conv_transpose2d_channel_stats(x, w, b, [1, 1], [0, 0], [0, 0], 1, [1, 1])
        ref_var, ref_mean = torch.var_mean(out.double(), dim=(0, 2, 3), unbiased=False)
        rtol = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(mean.double(), ref_mean, rtol=rtol, atol=0, msg=f"blocks {blocks!r}")
        torch.testing.assert_close(var.double(), ref_var, rtol=rtol, atol=0, msg=f"blocks {blocks!r}")


def test_gradcheck_both_ops():
    torch.manual_seed(0)
    d = torch.float64
    x = torch.randn(2, 3, 4, 3, dtype=d, requires_grad=True)
    w = torch.randn(3, 4, 2, 3, dtype=d, requires_grad=True)
    b = torch.randn(4, dtype=d, requires_grad=True)

    def stats(x, w, b):
        out, mean, var = torch.ops.myops.conv_transpose2d_channel_stats(x, w, b, [2, 1], [0, 1], [1, 0], 1, [1, 1])
        return out, mean, var

    assert torch.autograd.gradcheck(stats, (x, w, b))
    y = torch.randn(2, 4, 5, 6, dtype=d, requires_grad=True)
    mean = torch.randn(4, dtype=d, requires_grad=True)
    var = (torch.rand(4, dtype=d) + 0.5).requires_grad_()
    bw, bb = torch.randn(4, dtype=d, requires_grad=True), torch.randn(4, dtype=d, requires_grad=True)
    gw, gb = torch.randn(4, dtype=d, requires_grad=True), torch.randn(4, dtype=d, requires_grad=True)

    def chain(y, mean, var, bw, bb, gw, gb):
        return torch.ops.myops.batch_norm_tanh_max_pool2d_group_norm(
            y, mean, var, bw, bb, 1e-5, [3, 2], [2, 2], [1, 0], [1, 2], 2, gw, gb, 1e-5)

    assert torch.autograd.gradcheck(chain, (y, mean, var, bw, bb, gw, gb))


@pytest.mark.parametrize("training", [True, False])
def test_gradcheck_one_call_op(training):
    # gradients of the output and of the returned batch statistics, through the recomputed conv
    torch.manual_seed(0)
    d = torch.float64
    x = torch.randn(2, 3, 4, 3, dtype=d, requires_grad=True)
    w = torch.randn(3, 4, 2, 3, dtype=d, requires_grad=True)
    b, bw, bb, gw, gb = (torch.randn(4, dtype=d, requires_grad=True) for _ in range(5))
    stats = [] if training else [torch.randn(4, dtype=d, requires_grad=True),
                                 (torch.rand(4, dtype=d) + 0.5).requires_grad_()]

    def chain(x, w, b, bw, bb, gw, gb, *stats):
        mean, var = stats if stats else (None, None)
        return getattr(torch.ops.myops, OP)(x, w, b, [2, 1], [0, 1], [1, 0], 1, [1, 1], mean, var, bw, bb, training,
                                            1e-5, [2, 2], [2, 1], [1, 0], [1, 2], 2, gw, gb, 1e-5)

    assert torch.autograd.gradcheck(chain, (x, w, b, bw, bb, gw, gb, *stats))


# Where the conv kernel stores 2 x 2 windows (the ping-pong wgmma kernel: 34- or 51-row output
# maps, 4+ input-channel chunks, 64+ output channels per group; float32, or 16-bit input staged
# channels-last), the one-call op's intermediate holds each window's max, or min by the sign of
# BatchNorm's weight, a window split by the 17-row tiles (rows 16 / 17, 50 / 51) as two halves.
# The result must be bit-identical to the two ops' (tanh(BN) of the window maximum either way).
WINDOW_INPUT_PATHS = {"default": {}, "registers": {"nhwc_staging": "never"}, "nhwc": {"nhwc_staging": "always"}}


@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("path", list(WINDOW_INPUT_PATHS))
@pytest.mark.parametrize("width", [32, 31], ids=["even_width", "odd_width"])
@pytest.mark.parametrize("height", [32, 49], ids=["34_rows", "51_rows"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_window_stored_intermediate_matches_two_ops_exactly(dtype, path, width, height, training, monkeypatch):
    myops.backends.set_options(**WINDOW_INPUT_PATHS[path])
    torch.manual_seed(0)
    dev = "cuda"
    c_in, c_out = 64, 128
    x = torch.rand(3, c_in, height, width, device=dev, dtype=dtype)
    w = torch.randn(c_in, c_out, 5, 5, device=dev, dtype=dtype) * 0.05
    b = torch.randn(c_out, device=dev, dtype=dtype)
    bn_w = torch.randn(c_out, device=dev, dtype=dtype)  # about half negative: those windows keep their minimum
    bn_w[:4] = 0
    bn_b, gn_w, gn_b = (torch.randn(c_out, device=dev, dtype=dtype) for _ in range(3))
    if not training:  # NaN reaches the windows it touches, as in max_pool2d (then image 1's groups)
        x[1, :, 15, 7] = float("nan")  # output rows 14-18: windows on both sides of the tile edge
    conv = ([1, 1], [1, 1], [0, 0], 1, [1, 1])
    pool = ([2, 2], [2, 2], [0, 0], [1, 1])
    if training:
        out, mean, var = torch.ops.myops.conv_transpose2d_channel_stats(x, w, b, *conv)
        stats = (None, None)
    else:
        mean, var = torch.randn(c_out, device=dev), torch.rand(c_out, device=dev) + 0.5
        out = torch.ops.myops.conv_transpose2d(x, w, b, *conv)
        stats = (mean, var)
    two_ops = torch.ops.myops.batch_norm_tanh_max_pool2d_group_norm(out, mean, var, bn_w, bn_b, 1e-5, *pool, 8, gn_w,
                                                                    gn_b, 1e-5)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        y, batch_mean, batch_var = getattr(torch.ops.myops, OP)(x, w, b, *conv, *stats, bn_w, bn_b, training, 1e-5,
                                                                *pool, 8, gn_w, gn_b, 1e-5)
        torch.cuda.synchronize()
    assert torch.equal(y.isnan(), two_ops.isnan()) and y.isnan().any() == (not training)
    assert torch.equal(y.nan_to_num(), two_ops.nan_to_num())
    if training:
        assert torch.equal(batch_mean, mean) and torch.equal(batch_var, var)
    else:
        assert batch_mean.numel() == 0 and batch_var.numel() == 0
    window_kernels = [e.name for e in prof.events() if "pingpong" in e.name and ", true>" in e.name]
    assert bool(window_kernels) == (hopper_engine_runs() and (dtype == torch.float32 or path != "registers")), \
        "window stores: the Hopper engine, float32 or 16-bit input staged channels-last"


# The window-stored tail runs as persistent blocks that copy each (n, group)'s input with
# cp.async while finishing the previous one (bn_tail_prefetch=False: the one-block-per-group
# kernel). 96 images x 32 or 8 groups: up to 3 items per block on an H100 (132 SMs x 4-8 blocks),
# runs that cross from one group to the next (BatchNorm's fold recomputed), and an item count no
# multiple of the grid. Every item is computed as by the one-block kernel: the same bits.
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("num_groups", [32, 8])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_prefetching_tail_matches_one_block_per_group(dtype, num_groups, training, monkeypatch):
    torch.manual_seed(0)
    dev = "cuda"
    x = torch.rand(96, 64, 32, 31, device=dev, dtype=dtype)
    w = torch.randn(64, 128, 5, 5, device=dev, dtype=dtype) * 0.05
    bn_w = torch.randn(128, device=dev, dtype=dtype)
    bn_b, gn_w, gn_b = (torch.randn(128, device=dev, dtype=dtype) for _ in range(3))
    if not training:  # image 5's groups: NaN through the prefetched copies as well
        x[5, :, 15, 7] = float("nan")
    stats = (None, None) if training else (torch.randn(128, device=dev), torch.rand(128, device=dev) + 0.5)

    def chain(prefetch):
        myops.backends.set_options(bn_tail_prefetch=prefetch)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            y, _, _ = getattr(torch.ops.myops, OP)(x, w, None, [1, 1], [1, 1], [0, 0], 1, [1, 1], *stats, bn_w, bn_b,
                                                   training, 1e-5, [2, 2], [2, 2], [0, 0], [1, 1], num_groups, gn_w,
                                                   gn_b, 1e-5)
            torch.cuda.synchronize()
        return y, [e.name for e in prof.events() if "prefetch" in e.name]

    expected, one_block_prefetch = chain(False)
    got, prefetch = chain(True)
    assert not one_block_prefetch and bool(prefetch) == hopper_engine_runs(), \
        "the prefetching tail runs after the Hopper engine's window stores, unless bn_tail_prefetch is off"
    assert torch.equal(got.isnan(), expected.isnan())
    assert got[5].isnan().any() == (not training) and not got[4].isnan().any()
    assert torch.equal(got.nan_to_num(), expected.nan_to_num())


# In training the prefetching tail is launched to start under the batch statistics' kernel
# (programmatic dependent launch: its blocks copy their first input, then wait for the
# statistics); early_launch=False launches it after that kernel ends. Several rounds, since a
# missing wait would show as an occasional difference.
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_tail_started_under_the_statistics_matches_a_plain_launch(dtype, monkeypatch):
    torch.manual_seed(0)
    dev = "cuda"
    x = torch.rand(96, 64, 32, 31, device=dev, dtype=dtype)
    w = torch.randn(64, 128, 5, 5, device=dev, dtype=dtype) * 0.05
    bn_w, bn_b, gn_w, gn_b = (torch.randn(128, device=dev, dtype=dtype) for _ in range(4))

    def chain(early):
        myops.backends.set_options(early_launch=early)
        return getattr(torch.ops.myops, OP)(x, w, None, [1, 1], [1, 1], [0, 0], 1, [1, 1], None, None, bn_w, bn_b,
                                            True, 1e-5, [2, 2], [2, 2], [0, 0], [1, 1], 8, gn_w, gn_b, 1e-5)

    expected = chain(False)
    for _ in range(5):
        got = chain(True)
        for g, e in zip(got, expected):
            assert torch.equal(g, e)


# Under CUDA graph capture the tail is launched plainly (the early start is kept out of graphs): a
# captured training step, replayed on new input, gives eager's outputs and buffer updates.
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_training_chain_replayed_from_a_cuda_graph_matches_eager(dtype):
    torch.manual_seed(0)
    dev = "cuda"
    conv = nn.ConvTranspose2d(64, 128, 5, padding=1).to(dev, dtype)
    pool, gn = nn.MaxPool2d(2, 2), nn.GroupNorm(8, 128).to(dev, dtype)
    bn_eager = nn.BatchNorm2d(128).to(dev, dtype)
    bn_graph = nn.BatchNorm2d(128).to(dev, dtype)
    static_x = torch.rand(96, 64, 32, 31, device=dev, dtype=dtype)
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture (first-call set-up, conv source choice)
            for _ in range(2):
                myops.nn.batch_norm_chain(conv, bn_graph, pool, gn, static_x)
        torch.cuda.current_stream().wait_stream(side)
        bn_graph.load_state_dict(bn_eager.state_dict())  # in place: the captured buffers stay
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = myops.nn.batch_norm_chain(conv, bn_graph, pool, gn, static_x)
        for _ in range(3):
            x = torch.rand_like(static_x)
            static_x.copy_(x)
            graph.replay()
            expected = myops.nn.batch_norm_chain(conv, bn_eager, pool, gn, x)
            torch.cuda.synchronize()
            assert torch.equal(static_out, expected)
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                assert torch.equal(getattr(bn_graph, name), getattr(bn_eager, name)), name


def test_max_pool_ties_route_gradient_like_pytorch():
    # constant planes: every window is a tie; PyTorch sends the gradient to the first maximum
    x = torch.zeros(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    mean, var = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    gb = torch.tensor([0.5, -1.0], dtype=torch.float64)
    out = torch.ops.myops.batch_norm_tanh_max_pool2d_group_norm(x, mean, var, None, None, 1e-5, [2, 2], [2, 2],
                                                                [0, 0], [1, 1], 1, None, gb, 1e-5)
    xr = x.detach().clone().requires_grad_()
    ref = F.group_norm(F.max_pool2d(torch.tanh(F.batch_norm(xr, mean, var, None, None, False, 0.0, 1e-5)), 2), 1,
                       None, gb, 1e-5)
    g = torch.arange(out.numel(), dtype=torch.float64).view_as(out)
    out.backward(g)
    ref.backward(g)
    assert torch.equal(x.grad, xr.grad)


def test_ceil_mode_and_missing_running_stats_are_reported():
    x, w = torch.randn(1, 2, 3, 3), torch.randn(2, 2, 3, 3)
    with pytest.raises(ValueError, match=f"myops.{OP}: argument 'ceil_mode' must be False"):
        getattr(myops, OP)(x, w, kernel_size=2, ceil_mode=True, num_groups=1, training=True)
    with pytest.raises(ValueError, match=f"myops.{OP}: argument 'running_mean'"):
        getattr(myops, OP)(x, w, kernel_size=2, num_groups=1, training=False)


def test_training_with_one_value_per_channel_is_reported_and_leaves_buffers():
    # a 1x1 conv output of one sample: F.batch_norm refuses it in training, and so do we, before
    # the running buffers change
    x, w = torch.randn(1, 2, 1, 1), torch.randn(2, 3, 1, 1)
    rm, rv = torch.zeros(3), torch.ones(3)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        F.batch_norm(F.conv_transpose2d(x, w), rm, rv, training=True)
    with pytest.raises(ValueError, match=f"myops.{OP}: expected more than 1 value per channel when training"):
        getattr(myops, OP)(x, w, running_mean=rm, running_var=rv, kernel_size=1, num_groups=1, training=True)
    assert torch.equal(rm, torch.zeros(3)) and torch.equal(rv, torch.ones(3))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_update_running_stats_op_matches_batch_norm(device, dtype):
    # myops.batch_norm_update_running_stats against aten's own update (F.batch_norm in training),
    # given the batch's mean and biased variance in the statistics dtype; the counter steps by one
    torch.manual_seed(0)
    x = torch.randn(4, 6, 5, 3, device=device, dtype=dtype) * 3 + 1
    rm = torch.randn(6, device=device, dtype=dtype)
    rv = torch.rand(6, device=device, dtype=dtype) + 0.5
    ref_m, ref_v = rm.clone(), rv.clone()
    F.batch_norm(x, ref_m, ref_v, training=True, momentum=0.3)
    var, mean = torch.var_mean(x.to(torch.float64 if dtype == torch.float64 else torch.float32), dim=(0, 2, 3),
                               unbiased=False)
    count = x.numel() // 6
    nbt = torch.tensor(7, device=device)
    torch.ops.myops.batch_norm_update_running_stats(rm, rv, mean, var, 0.3, count / (count - 1), nbt)
    torch.testing.assert_close(rm, ref_m)
    torch.testing.assert_close(rv, ref_v)
    assert nbt.item() == 8


@pytest.mark.parametrize("device", DEVICES)
def test_update_running_stats_op_on_strided_buffers(device):
    # buffers that are views with a stride (the kernels index them with it), against float64; the
    # elements between them stay as they were
    rm_base, rv_base = torch.randn(12, device=device), torch.rand(18, device=device) + 0.5
    rm, rv = rm_base[::2], rv_base[::3]
    between_m, between_v = rm_base[1::2].clone(), rv_base[1::3].clone()
    mean, var = torch.randn(6, device=device), torch.rand(6, device=device)
    exp_m = 0.9 * rm.double() + 0.1 * mean.double()
    exp_v = 0.9 * rv.double() + 0.1 * var.double() * 1.25
    torch.ops.myops.batch_norm_update_running_stats(rm, rv, mean, var, 0.1, 1.25, None)
    torch.testing.assert_close(rm.double(), exp_m, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rv.double(), exp_v, rtol=1e-6, atol=1e-6)
    assert torch.equal(rm_base[1::2], between_m) and torch.equal(rv_base[1::3], between_v)
