"""The fused op's normalise pass run alongside its conv (csrc/cuda/group_norm_follow.cuh): where the
Hopper kernel's two-block form runs the conv, a few persistent blocks on a higher-priority stream
normalise each image as soon as its conv blocks have counted themselves done. It must give the
same bits as the separate statistics and normalise passes (gn_followers=0), whatever the
number of follower blocks, on any stream, and inside CUDA graphs (where the op keeps the separate
passes). By default it runs only where it pays (group_norm_follow_pays: large shapes); the tests
force it through the gn_followers option (myops.backends)."""
import random

import pytest
import torch

import myops.backends

from conftest import HAS_CUDA, NO_CUDA
from reference import (assert_matches, conv_args, hopper_engine_runs, make_conv_inputs, random_tma_conv_config,
                       random_wide_conv_config, ref_fused, set_conv_kernel, tolerance)

pytestmark = pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)


@pytest.fixture(autouse=True)
def _hopper_engine():
    # (after conftest's options: --myops-option hopper=0 turns the engine off)
    if not hopper_engine_runs():
        pytest.skip("the overlap runs with the Hopper (wgmma) conv kernel: sm_90 and the option hopper on")

OP = torch.ops.myops.conv_transpose2d_gelu_group_norm


def case(n, c_in, c_out, hw, k, padding, groups, num_groups, affine, dtype, approximate="none"):
    cfg = dict(N=n, C_in=c_in, C_out_g=c_out // groups, groups=groups, H=hw[0], W=hw[1], kH=k, kW=k,
               stride=(1, 1), dilation=(1, 1), padding=(padding, padding), output_padding=(0, 0), bias=True)
    x, w, b = make_conv_inputs(cfg, dtype, "cuda")
    gn_w = torch.randn(c_out, dtype=dtype, device="cuda") if affine else None
    gn_b = torch.randn(c_out, dtype=dtype, device="cuda") if affine else None
    return [x, w, b, *conv_args(cfg), approximate, num_groups, gn_w, gn_b, 1e-5]


# outputs of whole 16-row tiles (the two-block form), several images, two channel blocks, conv
# groups, GroupNorm of one group and of one channel per group, no affine, every tensor-core dtype
CASES = {
    "seed_like": dict(n=4, c_in=16, c_out=64, hw=(62, 62), k=3, padding=0, groups=1, num_groups=8, affine=True),
    "two_channel_blocks": dict(n=3, c_in=24, c_out=128, hw=(30, 46), k=3, padding=1, groups=1, num_groups=4,
                               affine=True),
    "conv_groups": dict(n=2, c_in=32, c_out=128, hw=(32, 32), k=3, padding=1, groups=2, num_groups=2,
                        affine=False),
    "one_group": dict(n=5, c_in=8, c_out=64, hw=(14, 30), k=3, padding=0, groups=1, num_groups=1, affine=True),
    "per_channel": dict(n=2, c_in=16, c_out=64, hw=(62, 30), k=3, padding=0, groups=1, num_groups=64,
                        affine=True),
}


def follower_ran(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return any("group_norm_follow" in e.name for e in prof.events())


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("followers", [1, 3, 1000])
def test_same_bits_as_separate_passes(name, dtype, followers, monkeypatch):
    # small shapes, where the default rule keeps the separate passes: the followers forced
    args = case(**CASES[name], dtype=dtype)
    myops.backends.set_options(gn_followers=0)
    separate = OP(*args)
    myops.backends.set_options(gn_followers=followers)
    assert follower_ran(lambda: OP(*args))
    out = OP(*args)
    assert torch.equal(out, separate)
    assert_matches(out, ref_fused(*args), tolerance(dtype, "cuda") * 4, floor=1.0)


def test_default_rule(monkeypatch):
    # by default the overlap runs where it pays (32 images, 512 KiB groups, 1152 FLOPs per value)
    # and gives the separate passes' bits; a small shape keeps the separate passes
    myops.backends.set_options(gn_followers=None)
    large = case(n=32, c_in=64, c_out=64, hw=(126, 126), k=3, padding=0, groups=1, num_groups=8, affine=True,
                 dtype=torch.float32)
    assert follower_ran(lambda: OP(*large))
    overlapped = OP(*large)
    myops.backends.set_options(gn_followers=0)
    assert not follower_ran(lambda: OP(*large))
    assert torch.equal(OP(*large), overlapped)
    myops.backends.set_options(gn_followers=None)
    small = case(**CASES["seed_like"], dtype=torch.float32)
    assert not follower_ran(lambda: OP(*small))


def test_separate_passes_when_turned_off(monkeypatch):
    args = case(**CASES["seed_like"], dtype=torch.float32)
    myops.backends.set_options(gn_followers=0)
    assert not follower_ran(lambda: OP(*args))


def on_new_stream(fn):
    """fn() on a fresh stream, ordered after and before the current stream's work."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        result = fn()
    torch.cuda.current_stream().wait_stream(stream)
    return result


def test_non_default_stream(monkeypatch):
    myops.backends.set_options(gn_followers=3)
    args = case(**CASES["two_channel_blocks"], dtype=torch.bfloat16)
    expected = OP(*args)
    # back to back on that stream: the second conv must wait for the first pass
    out, out_again = on_new_stream(lambda: (OP(*args), OP(*args)))
    assert torch.equal(out, expected) and torch.equal(out_again, expected)


def test_inside_cuda_graph(monkeypatch):
    myops.backends.set_options(gn_followers=3)  # asked for, yet off while capturing
    args = case(**CASES["seed_like"], dtype=torch.float32)
    expected = OP(*args)
    on_new_stream(lambda: OP(*args))  # warm-up outside the capture (plans)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = OP(*args)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


@pytest.mark.parametrize("kernel", ["wgmma", "wgmma_nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_random_wide_configs_same_bits(kernel, dtype, monkeypatch):
    # the Hopper kernel wherever it can run (its two-block form counts its blocks): random shapes,
    # partial tiles, channel tails, strides; the pass alongside or not, the same bits
    set_conv_kernel(kernel)
    rng = random.Random(31)
    for i in range(20):
        cfg = (random_wide_conv_config if i % 2 else random_tma_conv_config)(rng)
        c_out = cfg["C_out_g"] * cfg["groups"]
        num_groups = rng.choice([d for d in range(1, c_out + 1) if c_out % d == 0])
        x, w, b = make_conv_inputs(cfg, dtype, "cuda")
        gn_w = torch.randn(c_out, dtype=dtype, device="cuda")
        args = [x, w, b, *conv_args(cfg), rng.choice(["none", "tanh"]), num_groups, gn_w, None, 1e-5]
        myops.backends.set_options(gn_followers=0)
        separate = OP(*args)
        myops.backends.set_options(gn_followers=rng.choice([1, 2, 16]))
        assert torch.equal(OP(*args), separate), f"config {i}: {cfg}, groups={num_groups}"
