"""Strict float32 through Winograd F(2, 3) rows: the mma kernel's FFMA mode where every phase has 3
row taps one input row apart (k3 s1 d1, k6 s2 d1). Checked against float64 PyTorch at the strict
float32 tolerance, and against the direct FFMA taps (winograd=False), whose other
rounding shows that the transformed path ran."""
import random

import pytest
import torch

import myops.backends

from conftest import DEVICES
from reference import (assert_matches, conv_args, make_conv_inputs, ref_conv_transpose2d, set_conv_kernel,
                       tolerance, with_output_padding)
from test_fused import check_channel_stats, check_random_fused

CUDA = [d for d in DEVICES if "cuda" in str(d)]


def random_winograd_config(rng: random.Random):
    """A random layer whose row taps allow Winograd rows: kH 3 at stride 1 or kH 6 at stride 2
    (dilation 1), anything along the width, more than 32 output channels per group (the FFMA mode)."""
    while True:
        groups = rng.choice([1, 1, 2])
        s_h = rng.choice([1, 1, 2])
        cfg = dict(
            N=rng.choice([1, 2]), C_in=groups * rng.choice([3, 8, 13, 24, 40]),
            C_out_g=rng.choice([33, 48, 64, 72, 128]), groups=groups,
            H=rng.randint(1, 40), W=rng.randint(1, 40), kH=3 * s_h, kW=rng.randint(1, 7),
            stride=(s_h, rng.randint(1, 3)), dilation=(1, rng.randint(1, 2)),
            padding=(rng.randint(0, 2), rng.randint(0, 3)), bias=rng.random() < 0.5,
        )
        if with_output_padding(rng, cfg):
            return cfg


def strict_conv(x, w, b, args, monkeypatch, winograd):
    myops.backends.set_options(winograd=winograd)
    return torch.ops.myops.conv_transpose2d(x, w, b, *args)


@pytest.fixture
def strict_mma(monkeypatch):
    # TF32 off, our kernels (not a timed cuDNN choice), the mma kernel's FFMA mode
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    myops.backends.set_options(conv_source="myops")
    set_conv_kernel("mma")


@pytest.mark.parametrize("device", CUDA)
def test_winograd_rows_random_configs(device, strict_mma, monkeypatch):
    rng = random.Random(2023)
    tol = tolerance(torch.float32, device)
    assert tol == 2e-5
    differing = 0
    for i in range(60):
        cfg = random_winograd_config(rng)
        x, w, b = make_conv_inputs(cfg, torch.float32, device)
        args = conv_args(cfg)
        ref = ref_conv_transpose2d(x, w, b, *args)
        wino = strict_conv(x, w, b, args, monkeypatch, True)
        direct = strict_conv(x, w, b, args, monkeypatch, False)
        for out in (wino, direct):
            try:
                assert_matches(out, ref, tol)
            except AssertionError as e:
                raise AssertionError(f"config {i}: {cfg}: {e}") from None
        differing += not torch.equal(wino, direct)
    # the transformed products round differently from the direct taps on all but tiny outputs
    assert differing >= 50, differing


@pytest.mark.parametrize("device", CUDA)
@pytest.mark.parametrize("shape", [(2, 64, 64, 40, 44, 3, 7), (1, 24, 96, 33, 29, 3, 3), (3, 64, 64, 17, 70, 6, 4)],
                         ids=["k3x7", "k3x3", "k6x4s2"])
def test_winograd_rows_layers(device, shape, strict_mma, monkeypatch):
    # larger maps: many tiles, partial last tiles in both directions, 7 / 3 / 4 width taps (the
    # pipeline's weight stage scales with them); the stride-2 case has two phases of 3 row taps each
    n, c_in, c_out, h, w_, k_h, k_w = shape
    s_h = k_h // 3
    x = torch.randn(n, c_in, h, w_, device=device)
    w = torch.randn(c_in, c_out, k_h, k_w, device=device) * 0.1
    b = torch.randn(c_out, device=device)
    args = [[s_h, 1], [1, 2], [s_h - 1, 0], 1, [1, 1]]
    ref = ref_conv_transpose2d(x, w, b, *args)
    wino = strict_conv(x, w, b, args, monkeypatch, True)
    assert_matches(wino, ref, tolerance(torch.float32, device))
    assert not torch.equal(wino, strict_conv(x, w, b, args, monkeypatch, False))
    # the same conv through the fused GELU + GroupNorm statistics epilogue and the BatchNorm
    # chain's channel statistics
    check_channel_stats(x, w, b, args, tolerance(torch.float32, device))


@pytest.mark.parametrize("device", CUDA)
def test_winograd_rows_fused_op(device, strict_mma):
    # conv_transpose2d -> GELU -> GroupNorm with the conv through Winograd rows
    check_random_fused(random.Random(2025), 20, torch.float32, device, random_winograd_config)
