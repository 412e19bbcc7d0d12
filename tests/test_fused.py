import random

import pytest
import torch
import torch.nn.functional as F

import myops
from conftest import DEVICES
from reference import (assert_matches, conv_args, make_conv_inputs, random_conv_config,
                       random_narrow_conv_config, random_stride2_conv_config, random_tma_conv_config,
                       random_unit_input_conv_config, random_wide_conv_config,
                       ref_conv_transpose2d, ref_fused,
                       set_conv_kernel, tolerance)

RANDOM_RUNS = [(torch.float32, 100), (torch.float64, 30), (torch.bfloat16, 30), (torch.float16, 30)]


def random_fused_case(rng, dtype, device, config=random_conv_config):
    cfg = config(rng)
    c_out = cfg["C_out_g"] * cfg["groups"]
    num_groups = rng.choice([d for d in range(1, c_out + 1) if c_out % d == 0])
    x, w, b = make_conv_inputs(cfg, dtype, device)
    affine = rng.random() < 0.7
    gn_w = torch.randn(c_out, dtype=dtype, device=device) if affine else None
    gn_b = torch.randn(c_out, dtype=dtype, device=device) if affine and rng.random() < 0.8 else None
    args = [x, w, b, *conv_args(cfg), rng.choice(["none", "tanh"]), num_groups, gn_w, gn_b,
            rng.choice([1e-5, 1e-3])]
    return cfg, args


def check_random_fused(rng, count, dtype, device, config):
    """The fused op against float64 PyTorch on `count` random cases drawn with config."""
    for i in range(count):
        cfg, args = random_fused_case(rng, dtype, device, config)
        out = torch.ops.myops.conv_transpose2d_gelu_group_norm(*args)
        assert out.dtype == dtype
        try:
            # the normalised output is O(1) whatever the conv's magnitude; the bound must also cover
            # groups of a single element (output = beta), so it is taken against the tensor's scale
            assert_matches(out, ref_fused(*args), tolerance(dtype, device) * 4, floor=1.0)
        except AssertionError as e:
            raise AssertionError(f"config {i}: {cfg}, gelu={args[8]}, groups={args[9]}: {e}") from None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,count", RANDOM_RUNS, ids=lambda v: str(v))
def test_random_configs_match_pytorch_chain(device, dtype, count):
    check_random_fused(random.Random(99 + count), count, dtype, device, random_conv_config)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("config", [random_conv_config, random_wide_conv_config], ids=["small", "wide"])
def test_group_stats_random_configs(device, dtype, config):
    check_group_stats(random.Random(4242), 20, dtype, device, config)


def check_group_stats(rng, count, dtype, device, config):
    """The chain up to GroupNorm's statistics: GELU's output against float64 PyTorch, mean / rstd
    against those of the output as returned (float64), and group_norm_with_stats on top against
    the whole chain."""
    for i in range(count):
        cfg, args = random_fused_case(rng, dtype, device, config)
        x, w, b, *conv, approximate, num_groups, gn_w, gn_b, eps = args
        act, mean, rstd = torch.ops.myops.conv_transpose2d_gelu_group_stats(x, w, b, *conv, approximate, num_groups, eps)
        stats_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        assert act.dtype == dtype and mean.dtype == rstd.dtype == stats_dtype
        assert mean.shape == rstd.shape == (x.shape[0], num_groups)
        try:
            ref_act = F.gelu(ref_conv_transpose2d(x, w, b, *conv), approximate=approximate)
            assert_matches(act, ref_act, tolerance(dtype, device))
            if act.numel() == 0:
                continue
            grouped = act.double().reshape(act.shape[0], num_groups, act.shape[1:].numel() // num_groups)
            var, ref_mean = torch.var_mean(grouped, dim=2, correction=0)
            stat_tol = 1e-10 if dtype == torch.float64 else 1e-5
            torch.testing.assert_close(mean.double(), ref_mean, atol=stat_tol * (1 + ref_mean.abs().max().item()),
                                       rtol=stat_tol)
            torch.testing.assert_close(rstd.double(), (var + eps).rsqrt(), atol=0, rtol=stat_tol * 10)
            out = myops.group_norm_with_stats(act, mean, rstd, gn_w, gn_b)
            assert out.dtype == dtype
            assert_matches(out, ref_fused(*args), tolerance(dtype, device) * 4, floor=1.0)
        except AssertionError as e:
            raise AssertionError(f"config {i}: {cfg}, gelu={approximate}, groups={num_groups}: {e}") from None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,hw,c_out", [(37, 2, 40), (21, 4, 48), (7, 8, 64), (3, 16, 24), (5, 3, 40)],
                         ids=["phase-4px", "phase-16px", "phase-64px", "phase-256px", "phase-9px"])
def test_small_maps_tiles_spanning_images(device, dtype, n, hw, c_out):
    # DCGAN-style stride-2 layers on small maps: a tensor-core tile holds several images' phase
    # grids (hw x hw pixels each), whose GroupNorm partials are reduced per image (butterflies
    # over an image's lanes for power-of-two grids, one lane per image for the 9-pixel grids);
    # batch sizes leave the last tile partly empty
    torch.manual_seed(n)
    x = torch.randn(n, 32, hw, hw, device=device, dtype=dtype)
    w = torch.randn(32, c_out, 4, 4, device=device, dtype=dtype) / 12
    gn_w = torch.randn(c_out, device=device, dtype=dtype)
    args = [x, w, None, [2, 2], [1, 1], [0, 0], 1, [1, 1], "none", 8, gn_w, None, 1e-5]
    out = torch.ops.myops.conv_transpose2d_gelu_group_norm(*args)
    assert_matches(out, ref_fused(*args), tolerance(dtype, device) * 4, floor=1.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_seed_block_scaled_down(device, dtype):
    # L2_19's block (64 -> 64, k3, s1, p0, bias, GroupNorm(8)) at a CPU-sized input
    conv = torch.nn.ConvTranspose2d(64, 64, 3).to(device, dtype)
    gn = torch.nn.GroupNorm(8, 64).to(device, dtype)
    torch.nn.init.normal_(gn.weight)
    torch.nn.init.normal_(gn.bias)
    x = torch.rand(2, 64, 24, 24, device=device, dtype=dtype)
    out = myops.conv_transpose2d_gelu_group_norm(x, conv.weight, conv.bias, num_groups=8,
                                                 gn_weight=gn.weight, gn_bias=gn.bias, eps=gn.eps)
    ref = ref_fused(x, conv.weight, conv.bias, [1, 1], [0, 0], [0, 0], 1, [1, 1], "none", 8,
                    gn.weight, gn.bias, gn.eps)
    assert_matches(out, ref, tolerance(dtype, device) * 4)


@pytest.mark.parametrize("device", DEVICES)
def test_channels_last_and_python_api(device):
    x = torch.randn(2, 4, 6, 5, device=device, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, device=device, dtype=torch.float64)
    gn_w = torch.randn(6, device=device, dtype=torch.float64)
    ref = F.group_norm(F.gelu(F.conv_transpose2d(x, w, None, 2, 1, 1, 2), approximate="tanh"), 3, gn_w)
    out = myops.conv_transpose2d_gelu_group_norm(
        x.contiguous(memory_format=torch.channels_last), w, stride=2, padding=1, output_padding=1,
        groups=2, approximate="tanh", num_groups=3, gn_weight=gn_w)
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, ref)
    out3d = myops.conv_transpose2d_gelu_group_norm(x[1], w, stride=2, padding=1, output_padding=1,
                                                   groups=2, approximate="tanh", num_groups=3, gn_weight=gn_w)
    torch.testing.assert_close(out3d, ref[1])
    with pytest.raises(TypeError, match="num_groups"):
        myops.conv_transpose2d_gelu_group_norm(x, w)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hw,kernel,stride,padding", [((1, 1), 4, 1, 0), ((4, 4), 4, 2, 1), ((3, 5), 3, 2, 1)],
                         ids=["1x1-k4", "4x4-k4s2", "3x5-k3s2"])
def test_small_maps_tile_several_images(device, dtype, hw, kernel, stride, padding):
    # DCGAN-like layers: on CUDA one tile spans several images (37 images: the last tile is
    # partial), so the GroupNorm and BatchNorm partials must still be kept per image
    torch.manual_seed(0)
    x = torch.randn(37, 40, *hw, device=device, dtype=dtype)
    w = torch.randn(40, 24, kernel, kernel, device=device, dtype=dtype) / 20
    b = torch.randn(24, device=device, dtype=dtype)
    gn_w, gn_b = torch.randn(24, device=device, dtype=dtype), torch.randn(24, device=device, dtype=dtype)
    conv = [[stride] * 2, [padding] * 2, [0, 0], 1, [1, 1]]
    out = torch.ops.myops.conv_transpose2d_gelu_group_norm(x, w, b, *conv, "none", 4, gn_w, gn_b, 1e-5)
    assert_matches(out, ref_fused(x, w, b, *conv, "none", 4, gn_w, gn_b, 1e-5), tolerance(dtype, device) * 4,
                   floor=1.0)
    check_channel_stats(x, w, b, conv, tolerance(dtype, device))


def check_channel_stats(x, w, b, conv, tol):
    """conv_transpose2d_channel_stats: the output against float64 PyTorch, the mean and biased
    variance against those of the output as returned."""
    y, mean, var = torch.ops.myops.conv_transpose2d_channel_stats(x, w, b, *conv)
    ref_y = ref_conv_transpose2d(x, w, b, *conv)
    assert_matches(y, ref_y, tol)
    if y[:, 0].numel() == 0:  # no value per channel: mean 0, variance NaN (the op's contract)
        assert torch.all(mean == 0) and torch.all(var.isnan())
        return
    ref_y = y.double()  # the statistics are those of the stored (rounded) output
    assert_matches(mean, ref_y.mean((0, 2, 3)), tol, floor=1.0)
    assert_matches(var, ref_y.var((0, 2, 3), unbiased=False), tol, floor=1.0)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kernel", ["default", "mma", "wgmma", "wgmma_nhwc"])
def test_wide_layers_random_configs_chain(device, dtype, kernel, monkeypatch):
    # wide layers through the fused epilogue (GELU, GroupNorm partials): the kernel choice as
    # shipped, the mma.sync kernel alone, and (on an H100) the wgmma kernel wherever it can run
    set_conv_kernel(kernel)
    check_random_fused(random.Random(2024), 20, dtype, device, random_wide_conv_config)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("kernel", ["wgmma_wide", "wgmma_wide_nhwc"])
def test_wide_tiles_random_configs_chain(device, kernel, monkeypatch):
    # the Hopper kernel's 8 x 32-pixel tiles (16-bit) under the fused epilogue: the GroupNorm
    # partials of four-strip tiles (the choice as shipped keeps fused calls on 16 x 16 tiles)
    set_conv_kernel(kernel)
    check_random_fused(random.Random(2030), 20, torch.bfloat16, device, random_wide_conv_config)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kernel", ["default", "mma"])
def test_stride2_layers_random_configs_chain(device, dtype, kernel, monkeypatch):
    # stride 2 x 2 layers through the fused epilogue: GroupNorm partials of joint tiles (all
    # four phases of a region per block; several images per tile on small maps)
    set_conv_kernel(kernel)
    check_random_fused(random.Random(2028), 20, dtype, device, random_stride2_conv_config)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unit_input_random_configs_chain(device, dtype):
    # one-row / one-column inputs through the fused epilogue; on CUDA the 1 x 1 inputs' GEMM
    # view folds kH * kW view channels into each channel's GroupNorm partials (tiles of up to
    # 256 one-pixel images)
    check_random_fused(random.Random(2029), 20, dtype, device, random_unit_input_conv_config)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("kernel", ["wgmma", "wgmma_no_tma"])
def test_tma_layers_random_configs_chain(device, kernel, monkeypatch):
    # the Hopper kernel's float32 TMA input path (and its register path) under the fused epilogue
    set_conv_kernel(kernel)
    check_random_fused(random.Random(2027), 20, torch.float32, device, random_tma_conv_config)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
def test_strict_float32_wide_layers_chain(device, monkeypatch):
    # TF32 off: the FFMA mode of the mma kernel under the fused epilogue, tight float32 tolerance
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    check_random_fused(random.Random(2025), 30, torch.float32, device, random_wide_conv_config)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_narrow_layers_random_configs_chain(device, dtype):
    # the CUDA direct kernel's epilogue: GELU and GroupNorm partials per tile row
    check_random_fused(random.Random(2026), 20, dtype, device, random_narrow_conv_config)
