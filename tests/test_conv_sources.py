"""Whose conv an op runs on CUDA (csrc/cuda/conv_source.h): in strict float32
(torch.backends.cudnn.allow_tf32 off) every op with a conv runs either our exact FFMA kernels or
cuDNN's conv followed by our own passes; the fused GELU + GroupNorm op does so in every dtype,
cuDNN's conv then running channels-last. Each source is forced in turn through myops.backends (conv_source),
and the shipped timed choice runs unforced; all against float64 PyTorch (the tight float32
tolerance in strict float32). (conftest forces "myops" for every other test, so that our
kernels' tests keep testing them.)"""
import random

import pytest
import torch

import myops.backends

from conftest import HAS_CUDA, NO_CUDA
from reference import (assert_matches, conv_args, make_conv_inputs, random_conv_config,
                       random_wide_conv_config, ref_conv_transpose2d, ref_fused, tolerance)
from test_bn_chain import check_random_chain
from test_conv_transpose2d import check_random_configs
from test_norm_act import check_combo
from test_fused import check_channel_stats, check_group_stats, check_random_fused, random_fused_case

pytestmark = pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
SOURCES = ["myops", "cudnn", "timed"]


def use_source(source, monkeypatch, allow_tf32):
    """Forces `source` (or, "timed", leaves the choice to the op) with TF32 on or off."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", allow_tf32)
    if source == "timed":
        myops.backends.set_options(conv_source="auto")
    else:
        myops.backends.set_options(conv_source=source)
    return source


@pytest.fixture(params=SOURCES)
def strict_source(request, monkeypatch):
    use_source(request.param, monkeypatch, False)
    assert tolerance(torch.float32, "cuda") == 2e-5
    return request.param


def test_conv_transpose2d(strict_source):
    check_random_configs(random.Random(71), 40, random_conv_config, torch.float32, "cuda")
    check_random_configs(random.Random(72), 15, random_wide_conv_config, torch.float32, "cuda")
    rng = random.Random(73)
    for _ in range(5):  # channels-last in, channels-last out
        cfg = random_wide_conv_config(rng)
        x, w, b = make_conv_inputs(cfg, torch.float32, "cuda")
        x = x.contiguous(memory_format=torch.channels_last)
        out = torch.ops.myops.conv_transpose2d(x, w, b, *conv_args(cfg))
        assert out.is_contiguous(memory_format=torch.channels_last)
        assert_matches(out, ref_conv_transpose2d(x, w, b, *conv_args(cfg)), 2e-5)


@pytest.mark.parametrize("source", ["myops", "cudnn", "cudnn_channels_last", "timed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=lambda d: str(d).split(".")[-1])
def test_plain_conv_every_source(source, dtype, monkeypatch):
    # the plain conv's candidates in the default math (TF32 allowed): each keeps the input's layout
    use_source(source, monkeypatch, True)
    check_random_configs(random.Random(82), 20, random_wide_conv_config, dtype, "cuda")
    rng = random.Random(83)
    for _ in range(4):
        cfg = random_wide_conv_config(rng)
        x, w, b = make_conv_inputs(cfg, dtype, "cuda")
        x = x.contiguous(memory_format=torch.channels_last)
        out = torch.ops.myops.conv_transpose2d(x, w, b, *conv_args(cfg))
        assert out.is_contiguous(memory_format=torch.channels_last)
        assert_matches(out, ref_conv_transpose2d(x, w, b, *conv_args(cfg)), tolerance(dtype, "cuda"))


def test_gelu_group_norm_chain(strict_source):
    # cuDNN's source: GroupNorm's statistics and normalisation read the conv output through GELU
    check_random_fused(random.Random(74), 30, torch.float32, "cuda", random_conv_config)
    check_random_fused(random.Random(75), 10, torch.float32, "cuda", random_wide_conv_config)


def test_gelu_group_stats(strict_source):
    # cuDNN's source: GELU applied in place, as the op returns it
    check_group_stats(random.Random(76), 15, torch.float32, "cuda", random_conv_config)


def test_channel_stats(strict_source):
    rng = random.Random(77)
    for _ in range(15):
        cfg = random_conv_config(rng)
        x, w, b = make_conv_inputs(cfg, torch.float32, "cuda")
        check_channel_stats(x, w, b, conv_args(cfg), 2e-5)


def test_batch_norm_chain(strict_source):
    # cuDNN's source: no window stores, batch statistics from per-plane moments, the tail on the
    # full output
    check_random_chain(random.Random(78), 40, torch.float32, "cuda")


def test_timed_choice_inside_cuda_graph_capture(monkeypatch):
    # a shape first seen while a CUDA graph is captured is not timed (no synchronisation may
    # happen then): it runs our kernels, and the replayed graph computes the conv
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    myops.backends.set_options(conv_source="auto")
    x = torch.randn(2, 24, 13, 11, device="cuda")
    w = torch.randn(24, 40, 3, 3, device="cuda") * 0.2
    b = torch.randn(40, device="cuda")
    conv = [[1, 1], [0, 0], [0, 0], 1, [1, 1]]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up of the caching allocator's graph pool, another shape
        torch.ops.myops.conv_transpose2d(x[:1], w, b, *conv)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.myops.conv_transpose2d(x, w, b, *conv)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert_matches(out, ref_conv_transpose2d(x, w, b, *conv), 2e-5)


@pytest.mark.parametrize("flag", ["cudnn_deterministic", "cudnn_disabled"])
def test_no_timed_choice_when_determinism_asked_or_cudnn_off(flag, monkeypatch):
    # a timed choice may differ between processes (other bits): with cuDNN's deterministic flag
    # (or cuDNN off) every call runs our kernels, bit for bit what the forced "myops" gives, also
    # for a shape already timed
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    x = torch.randn(2, 16, 21, 19, device="cuda")
    w = torch.randn(16, 32, 3, 5, device="cuda") * 0.2
    b = torch.randn(32, device="cuda")
    gn_w = torch.randn(32, device="cuda")
    args = (x, w, b, [1, 1], [1, 2], [0, 0], 1, [1, 1], "none", 4, gn_w, None, 1e-5)
    ours = torch.ops.myops.conv_transpose2d_gelu_group_norm(*args)
    myops.backends.set_options(conv_source="auto")
    torch.ops.myops.conv_transpose2d_gelu_group_norm(*args)  # timed (either source may win)
    if flag == "cudnn_deterministic":
        monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    else:
        monkeypatch.setattr(torch.backends.cudnn, "enabled", False)
    assert torch.equal(torch.ops.myops.conv_transpose2d_gelu_group_norm(*args), ours)


@pytest.mark.parametrize("source", ["cudnn", "timed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("norm,activation,order", [("batch_norm", "relu", "norm_act"), ("instance_norm", "leaky_relu",
                         "norm_act"), ("group_norm", "silu", "norm_act"), ("group_norm", "gelu", "act_norm"),
                         ("none", "tanh", "norm_act"), ("batch_norm", "none", "norm_act")])
def test_norm_act_family_on_cudnn(source, dtype, norm, activation, order, monkeypatch):
    # the family's conv step on cuDNN: the activation and the statistics as passes of their own
    use_source(source, monkeypatch, True)
    check_combo("cuda", dtype, norm, activation, order)


# --- tensor-core math: the fused op's channels-last cuDNN form --------------------------------
@pytest.fixture(params=SOURCES)
def fused_source(request, monkeypatch):
    return use_source(request.param, monkeypatch, True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=lambda d: str(d).split(".")[-1])
def test_gelu_group_norm_chain_any_dtype(fused_source, dtype):
    # cuDNN's channels-last conv without bias; statistics over pixel tiles read through bias + GELU,
    # the normalise pass transposing to NCHW (16-bit: channel / pixel pairs where C and HW are even)
    check_random_fused(random.Random(79), 25, dtype, "cuda", random_conv_config)
    check_random_fused(random.Random(80), 8, dtype, "cuda", random_wide_conv_config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d).split(".")[-1])
def test_gelu_group_norm_chain_channels_last(fused_source, dtype):
    # a channels-last input: cuDNN's conv reads it as it is, the output stays channels-last
    rng = random.Random(81)
    for _ in range(6):
        cfg, args = random_fused_case(rng, dtype, "cuda", random_wide_conv_config)
        args[0] = args[0].contiguous(memory_format=torch.channels_last)
        out = torch.ops.myops.conv_transpose2d_gelu_group_norm(*args)
        assert out.is_contiguous(memory_format=torch.channels_last)
        assert_matches(out, ref_fused(*args), tolerance(dtype, "cuda") * 4, floor=1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d).split(".")[-1])
def test_gelu_group_norm_large_maps(fused_source, dtype):
    # maps large enough that the statistics split each (image, channel) over several pixel tiles,
    # with a mean far from zero (the per-thread shifted sums must not cancel), odd channel counts
    # (no 16-bit pairs), a map of odd size, and one whose input's channels and pixels end in
    # partial tiles of the 16-byte transpose (36 channels, 50^2 pixels)
    for c_in, c_out, hw, groups in ((24, 64, 48, 8), (16, 33, 45, 3), (36, 40, 50, 4)):
        x = torch.randn(3, c_in, hw, hw, device="cuda", dtype=dtype)
        w = torch.randn(c_in, c_out, 4, 4, device="cuda", dtype=dtype) * 0.1
        b = torch.full((c_out,), 20.0, device="cuda", dtype=dtype)
        gn_w = torch.randn(c_out, device="cuda", dtype=dtype)
        gn_b = torch.randn(c_out, device="cuda", dtype=dtype)
        args = [x, w, b, [2, 2], [1, 1], [0, 0], 1, [1, 1], "tanh", groups, gn_w, gn_b, 1e-5]
        out = torch.ops.myops.conv_transpose2d_gelu_group_norm(*args)
        assert_matches(out, ref_fused(*args), tolerance(dtype, "cuda") * 4, floor=1.0)
