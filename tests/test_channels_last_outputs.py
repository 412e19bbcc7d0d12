"""Channels-last inputs: every op returns its output channels-last, as PyTorch's ops do (on CUDA
made by our transposing kernel from the NCHW result the kernels write: csrc/cuda/bindings.cpp,
in_output_format). The values must be exactly those of the same call on the NCHW-contiguous
input: a transpose moves bits, it computes nothing. The shapes cover the transposing kernels'
paths: odd pixel counts (the 16-bit kernel's element-wise fallback), channel counts that are not
multiples of 4 (float32's scalar transposer), and single-pixel outputs, whose NCHW tensor is
already channels-last contiguous. Two CUDA calls compute in the channels-last layout itself and are
checked against float64 PyTorch instead: group_norm (NHWC statistics and normalise passes), and
conv_transpose2d where cuDNN's channels-last conv is chosen (the timed choice); on the CPU the
plain conv of a channels-last input runs oneDNN's NHWC kernels (close, not the same bits)."""
import pytest
import torch

import myops.backends
import torch.nn.functional as F

from conftest import DEVICES, HAS_CUDA, NO_CUDA
from reference import assert_matches, f64, ref_conv_transpose2d, ref_fused, tolerance

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
CL = torch.channels_last
ops = torch.ops.myops

# (N, C_in, C_out, H, W, kernel_size, padding): conv outputs 9x9 (odd pixel count), 10x10, 1x1
CONV_SHAPES = [(2, 5, 6, 7, 7, 3, 0), (2, 16, 32, 8, 8, 3, 0), (3, 8, 8, 1, 1, 1, 0)]


def _conv_inputs(shape, dtype, device):
    n, c_in, c_out, h, w, k, _ = shape
    x = torch.randn(n, c_in, h, w, device=device, dtype=dtype)
    weight = torch.randn(c_in, c_out, k, k, device=device, dtype=dtype) / (c_in * k * k) ** 0.5
    bias = torch.randn(c_out, device=device, dtype=dtype)
    return x, weight, bias


def _conv_args(shape):
    pad = shape[6]
    return [1, 1], [pad, pad], [0, 0], 1, [1, 1]


def _assert_channels_last_equal(out_cl, out_nchw):
    assert out_cl.is_contiguous(memory_format=CL)
    assert out_cl.shape == out_nchw.shape and out_cl.dtype == out_nchw.dtype
    assert torch.equal(out_cl, out_nchw)


def _assert_plain_conv_channels_last(out_cl, out_nchw, device):
    """The plain conv: on CUDA the same bits; on the CPU oneDNN's NHWC kernels run a channels-last
    input where it lies, summing in another order than its NCHW ones."""
    if device != "cpu":
        return _assert_channels_last_equal(out_cl, out_nchw)
    assert out_cl.is_contiguous(memory_format=CL) and out_cl.dtype == out_nchw.dtype
    assert_matches(out_cl, out_nchw, tolerance(out_nchw.dtype, device))


def _both_layouts(fn, x):
    """fn on the NCHW-contiguous x and on its channels-last copy."""
    return fn(x.contiguous(memory_format=CL)), fn(x.contiguous())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", CONV_SHAPES)
def test_conv_ops_channels_last_output(device, dtype, shape, monkeypatch):
    # our kernels for both calls (on CUDA a channels-last call may otherwise time cuDNN's conv:
    # test_conv_transpose2d_channels_last_sources)
    myops.backends.set_options(conv_source="myops")
    x, weight, bias = _conv_inputs(shape, dtype, device)
    args = _conv_args(shape)
    num_groups = 2
    out_cl, out = _both_layouts(lambda t: ops.conv_transpose2d(t, weight, bias, *args), x)
    _assert_plain_conv_channels_last(out_cl, out, device)
    out_cl, out = _both_layouts(
        lambda t: ops.conv_transpose2d_gelu_group_norm(t, weight, bias, *args, "none", num_groups, None, None, 1e-5), x)
    _assert_channels_last_equal(out_cl, out)
    (y_cl, *stats_cl), (y, *stats) = _both_layouts(
        lambda t: ops.conv_transpose2d_gelu_group_stats(t, weight, bias, *args, "tanh", num_groups, 1e-5), x)
    _assert_channels_last_equal(y_cl, y)
    assert all(torch.equal(a, b) for a, b in zip(stats_cl, stats))
    (y_cl, *stats_cl), (y, *stats) = _both_layouts(
        lambda t: ops.conv_transpose2d_channel_stats(t, weight, bias, *args), x)
    _assert_channels_last_equal(y_cl, y)
    assert all(torch.equal(a, b) for a, b in zip(stats_cl, stats))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_chain_channels_last_output(device, dtype, training):
    shape = (2, 16, 32, 8, 8, 3, 0)  # conv 10x10, pooled 5x5 (an odd pixel count)
    x, weight, bias = _conv_inputs(shape, dtype, device)
    c = shape[2]
    param = lambda: torch.randn(c, device=device, dtype=dtype)  # noqa: E731
    bn_w, bn_b, gn_w, gn_b = param().abs() + 0.5, param(), param(), param()
    stats = torch.float64 if dtype == torch.float64 else torch.float32
    mean = None if training else torch.randn(c, device=device, dtype=stats)
    var = None if training else torch.rand(c, device=device, dtype=stats) + 0.5
    pool = ([2, 2], [2, 2], [0, 0], [1, 1])
    (y_cl, *s_cl), (y, *s) = _both_layouts(
        lambda t: ops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
            t, weight, bias, *_conv_args(shape), mean, var, bn_w, bn_b, training, 1e-5, *pool, 4, gn_w, gn_b, 1e-5),
        x)
    _assert_channels_last_equal(y_cl, y)
    assert all(torch.equal(a, b) for a, b in zip(s_cl, s))
    # the tail op alone, on the conv's output
    conv = torch.randn(2, c, 9, 11, device=device, dtype=dtype)
    m, v = torch.randn(c, device=device, dtype=stats), torch.rand(c, device=device, dtype=stats) + 0.5
    out_cl, out = _both_layouts(
        lambda t: ops.batch_norm_tanh_max_pool2d_group_norm(t, m, v, bn_w, bn_b, 1e-5, *pool, 4, gn_w, gn_b, 1e-5),
        conv)
    _assert_channels_last_equal(out_cl, out)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 6, 9, 9), (2, 32, 10, 10), (3, 8, 1, 1)])
def test_group_norm_channels_last_output(device, dtype, shape):
    x = torch.randn(*shape, device=device, dtype=dtype) + 3.0  # a mean well away from zero
    w, b = torch.randn(shape[1], device=device, dtype=dtype), torch.randn(shape[1], device=device, dtype=dtype)
    out = ops.group_norm(x.contiguous(memory_format=CL), 2, w, b, 1e-5)
    assert out.is_contiguous(memory_format=CL) and out.dtype == dtype
    assert_matches(out, F.group_norm(f64(x), 2, f64(w), f64(b), 1e-5), tolerance(dtype, device))


@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("source", ["cudnn", "timed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_transpose2d_channels_last_sources(source, dtype, monkeypatch):
    # cuDNN's channels-last conv (forced, or chosen where it times faster) returns its output as it is
    if source == "timed":
        myops.backends.set_options(conv_source="auto")
    else:
        myops.backends.set_options(conv_source=source)
    for shape in CONV_SHAPES + [(4, 64, 64, 32, 32, 3, 1)]:
        x, weight, bias = _conv_inputs(shape, dtype, "cuda")
        x = x.contiguous(memory_format=CL)
        args = _conv_args(shape)
        for _ in range(2):  # the timed call, then the chosen source's
            out = ops.conv_transpose2d(x, weight, bias, *args)
            assert out.is_contiguous(memory_format=CL) and out.dtype == dtype
            assert_matches(out, ref_conv_transpose2d(x, weight, bias, *args), tolerance(dtype, "cuda"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [(12, 20), (9, 11)])
def test_grouped_strided_conv_channels_last_input(device, dtype, size, monkeypatch):
    # L1_75's layer, smaller: kernels that read NCHW only (on CUDA the input's NHWC -> NCHW copy is
    # our transposer's, run with channels and pixels swapped); an even and an odd pixel count
    myops.backends.set_options(conv_source="myops")
    x = torch.randn(2, 32, *size, device=device, dtype=dtype)
    weight = torch.randn(32, 16, 3, 5, device=device, dtype=dtype) / (8 * 15) ** 0.5
    bias = torch.randn(64, device=device, dtype=dtype)
    args = ([2, 3], [1, 2], [1, 0], 4, [2, 1])
    out_cl, out = _both_layouts(lambda t: ops.conv_transpose2d(t, weight, bias, *args), x)
    _assert_plain_conv_channels_last(out_cl, out, device)
    out_cl, out = _both_layouts(
        lambda t: ops.conv_transpose2d_gelu_group_norm(t, weight, bias, *args, "none", 8, None, None, 1e-5), x)
    _assert_channels_last_equal(out_cl, out)
    assert_matches(out, ref_fused(x, weight, bias, *args, "none", 8, None, None, 1e-5), tolerance(dtype, device))


@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("dtype, source", [(torch.float32, "myops"), (torch.float32, "cudnn-strict"),
                                           (torch.float64, "myops"), (torch.float16, "myops"),
                                           (torch.bfloat16, "myops")])
def test_gelu_group_norm_channels_last_normalise_pass(dtype, source, monkeypatch):
    # a channels-last call's normalise pass writes the channels-last output itself (transposing
    # while it normalises): over our conv, the bits of the NCHW call's output (which may take the
    # pass that follows the conv); over cuDNN's strict float32 conv (bias and GELU still pending
    # in the pass) the float64 reference
    strict = source == "cudnn-strict"
    myops.backends.set_options(conv_source="cudnn" if strict else "myops")
    if strict:
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    shapes = [(2, 64, 64, 30, 30, 3, 0), (3, 32, 24, 15, 16, 3, 1), (2, 16, 8, 6, 7, 3, 0)]
    for shape in shapes:
        x, weight, bias = _conv_inputs(shape, dtype, "cuda")
        gn_w = torch.randn(shape[2], device="cuda", dtype=dtype)
        gn_b = torch.randn(shape[2], device="cuda", dtype=dtype)
        args = _conv_args(shape)
        out_cl, out = _both_layouts(
            lambda t: ops.conv_transpose2d_gelu_group_norm(t, weight, bias, *args, "none", 8, gn_w, gn_b, 1e-5), x)
        if strict:
            assert out_cl.is_contiguous(memory_format=CL)
            assert_matches(out_cl, ref_fused(x, weight, bias, *args, "none", 8, gn_w, gn_b, 1e-5),
                           tolerance(dtype, "cuda"))
        else:
            _assert_channels_last_equal(out_cl, out)
