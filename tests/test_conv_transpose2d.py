import random

import pytest
import torch
import torch.nn.functional as F

import myops
from conftest import DEVICES
from reference import (assert_matches, conv_args, hopper_engine_runs, make_conv_inputs, random_conv_config,
                       random_few_channels_conv_config, random_narrow_conv_config, random_stride2_conv_config,
                       random_tma_conv_config, random_unit_input_conv_config, random_wide_conv_config,
                       ref_conv_transpose2d, set_conv_kernel, tolerance)
from test_fused import check_channel_stats

def check_random_configs(rng, count, make_config, dtype, device):
    """myops.conv_transpose2d against float64 PyTorch on `count` configurations from make_config."""
    for i in range(count):
        cfg = make_config(rng)
        x, w, b = make_conv_inputs(cfg, dtype, device)
        out = torch.ops.myops.conv_transpose2d(x, w, b, *conv_args(cfg))
        assert out.dtype == dtype and out.device.type == torch.device(device).type
        try:
            assert_matches(out, ref_conv_transpose2d(x, w, b, *conv_args(cfg)), tolerance(dtype, device))
        except AssertionError as e:
            raise AssertionError(f"config {i}: {cfg}: {e}") from None


# (dtype, number of random configurations)
RANDOM_RUNS = [(torch.float32, 300), (torch.float64, 60), (torch.bfloat16, 60), (torch.float16, 60)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,count", RANDOM_RUNS, ids=lambda v: str(v))
def test_random_configs_match_pytorch(device, dtype, count):
    check_random_configs(random.Random(1234 + count), count, random_conv_config, dtype, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_seed_workload_shapes_scaled_down(device, dtype):
    # L1_75's argument mix (grouped, dilated, strided, asymmetric), L2_19's (k3 s1 p0, bias) and
    # L2_11's (k5 p1 onto 34 x 34 maps: the wgmma kernel's 17-row strips on an H100).
    cases = [
        (torch.randn(2, 32, 16, 24), torch.randn(32, 16, 3, 5), None, [2, 3], [1, 2], [0, 0], 4, [2, 1]),
        (torch.randn(2, 64, 20, 20), torch.randn(64, 64, 3, 3), torch.randn(64), [1, 1], [0, 0], [0, 0], 1, [1, 1]),
        (torch.randn(2, 64, 32, 32), torch.randn(64, 128, 5, 5), torch.randn(128), [1, 1], [1, 1], [0, 0], 1, [1, 1]),
    ]
    for x, w, b, *args in cases:
        x, w = x.to(device, dtype), (w * 0.1).to(device, dtype)
        b = None if b is None else b.to(device, dtype)
        out = torch.ops.myops.conv_transpose2d(x, w, b, *args)
        assert_matches(out, ref_conv_transpose2d(x, w, b, *args), tolerance(dtype, device))


@pytest.mark.parametrize("device", DEVICES)
def test_channels_last_and_strided_inputs(device):
    x = torch.randn(2, 8, 7, 9, device=device)
    w = torch.randn(8, 3, 3, 2, device=device)
    b = torch.randn(6, device=device)
    args = ([2, 1], [1, 0], [1, 0], 2, [1, 2])
    ref = ref_conv_transpose2d(x, w, b, *args)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    out_cl = torch.ops.myops.conv_transpose2d(x_cl, w.contiguous(memory_format=torch.channels_last), b, *args)
    assert out_cl.is_contiguous(memory_format=torch.channels_last)
    assert_matches(out_cl, ref, tolerance(torch.float32, device))
    # a non-contiguous view (every other column of a wider tensor)
    wide = torch.randn(2, 8, 7, 18, device=device)
    view = wide[:, :, :, ::2]
    out_view = torch.ops.myops.conv_transpose2d(view, w, b, *args)
    assert out_view.is_contiguous()
    assert_matches(out_view, ref_conv_transpose2d(view, w, b, *args), tolerance(torch.float32, device))


@pytest.mark.parametrize("device", DEVICES)
def test_python_api_defaults_pairs_and_unbatched(device):
    x = torch.randn(3, 4, 5, 5, device=device, dtype=torch.float64)
    w = torch.randn(4, 2, 3, 3, device=device, dtype=torch.float64)
    torch.testing.assert_close(myops.conv_transpose2d(x, w), F.conv_transpose2d(x, w))
    torch.testing.assert_close(myops.conv_transpose2d(x, w, None, 2, 1, 1, 1, 1),
                               F.conv_transpose2d(x, w, None, 2, 1, 1, 1, 1))
    torch.testing.assert_close(myops.conv_transpose2d(x, w, stride=(2, 1), padding=(0, 1), dilation=(1, 2)),
                               F.conv_transpose2d(x, w, stride=(2, 1), padding=(0, 1), dilation=(1, 2)))
    torch.testing.assert_close(myops.conv_transpose2d(x[0], w, stride=2), F.conv_transpose2d(x[0], w, stride=2))


def test_phases_without_taps_get_only_bias():
    # stride 3 with a 1x1 kernel: two of every three output rows/cols receive no tap at all.
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    w = torch.randn(2, 3, 1, 1, dtype=torch.float64)
    b = torch.randn(3, dtype=torch.float64)
    out = torch.ops.myops.conv_transpose2d(x, w, b, [3, 3], [0, 0], [2, 2], 1, [1, 1])
    torch.testing.assert_close(out, F.conv_transpose2d(x, w, b, 3, 0, 2))
    torch.testing.assert_close(out[:, :, 1::3, :], b.view(1, 3, 1, 1).expand(1, 3, 4, 12))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cpu_reference_kernel_random_configs(dtype):
    # the CPU ops' conv is ATen's; our GEMM + col2im kernel stays as an oracle (option cpu_reference)
    with myops.backends.options(cpu_reference=True):
        check_random_configs(random.Random(99), 60, random_conv_config, dtype, "cpu")


@pytest.mark.parametrize("layout", ["always", "auto"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_channels_last_kernels_random_configs(layout, dtype):
    # an NCHW input through oneDNN's channels-last kernels between two layout copies: forced, or
    # where the first call of the shape timed them faster (the suite runs NCHW: conftest)
    with myops.backends.options(cpu_channels_last=layout):
        check_random_configs(random.Random(5), 30, random_conv_config, dtype, "cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2, 40, 17, 9), (1, 16, 16, 16), (3, 33, 5, 70)])
def test_cpu_layout_copies_are_exact(shape, dtype):
    # an NCHW input forced through the channels-last kernels: the tiled layout copies on both sides
    # of the conv (edge tiles included) give the bits of the channels-last input's copy-free call
    x = torch.randn(shape).to(dtype)
    w = torch.randn(shape[1], 24, 3, 3).to(dtype)
    with myops.backends.options(cpu_channels_last="always"):
        out = myops.conv_transpose2d(x, w, stride=2, padding=1)
    out_cl = myops.conv_transpose2d(x.contiguous(memory_format=torch.channels_last), w, stride=2, padding=1)
    assert out.is_contiguous() and out_cl.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, out_cl)
    assert_matches(out, F.conv_transpose2d(x.double(), w.double(), stride=2, padding=1), tolerance(dtype, "cpu"))


def test_cpu_layout_choice_is_timed_once_and_explained():
    x, w = torch.randn(2, 16, 12, 10), torch.randn(16, 8, 3, 3)
    with myops.backends.options(cpu_channels_last="auto"):
        assert "not chosen yet" in myops.explain(x, w, stride=2)
        out = myops.conv_transpose2d(x, w, stride=2)
        line = myops.explain(x, w, stride=2).splitlines()[-1]
        assert line.startswith("layout: ") and "timed: NCHW" in line
        assert myops.explain(x, w, stride=2).splitlines()[-1] == line  # cached: the same medians
        torch.testing.assert_close(out, F.conv_transpose2d(x, w, stride=2))
        assert out.is_contiguous()
        with myops.backends.options(cpu_channels_last="never"):
            assert myops.explain(x, w, stride=2).splitlines()[-1] == "layout: NCHW (forced)"
        torch.use_deterministic_algorithms(True)
        try:
            assert "deterministic" in myops.explain(x, w, stride=2).splitlines()[-1]
        finally:
            torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_generic_cuda_kernel_random_configs(device, dtype, monkeypatch):
    # every call through the generic implicit-GEMM kernel, which otherwise only runs float64 and
    # strict float32 calls that neither the direct nor the mma kernel takes
    set_conv_kernel("generic")
    check_random_configs(random.Random(77), 100, random_conv_config, dtype, device)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel", ["default", "mma", "wgmma", "wgmma_nhwc"])
def test_wide_layers_random_configs(device, dtype, kernel, monkeypatch):
    # > 32 output channels per group on 12-40 pixel maps, through the kernel choice as shipped,
    # the mma.sync kernel alone, and (on an H100) the wgmma kernel on every config it can run,
    # with its input as given and staged channels-last
    set_conv_kernel(kernel)
    check_random_configs(random.Random(4242), 40, random_wide_conv_config, dtype, device)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel", ["default", "mma"])
def test_stride2_layers_random_configs(device, dtype, kernel, monkeypatch):
    # stride 2 x 2 layers (upsamplers): the mma.sync kernel computes all four phases of a region
    # in one block from one halo; grids that are not powers of two, several images per tile,
    # phases with unequal taps
    set_conv_kernel(kernel)
    check_random_configs(random.Random(5151), 40, random_stride2_conv_config, dtype, device)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel", ["wgmma_wide", "wgmma_wide_no_tma", "wgmma_wide_nhwc", "wgmma_standard"])
def test_wide_tiles_random_configs(device, dtype, kernel, monkeypatch):
    # the Hopper kernel's 8 x 32-pixel tiles (four strips of m64n64 MMAs, 16-bit only) through each
    # way its input arrives (TMA boxes where the rows are 16-byte aligned, registers, channels-last
    # boxes), and its 16 x 16 tiles alone (the choice as shipped takes the wide ones for plain
    # 16-bit convs with few taps)
    set_conv_kernel(kernel)
    check_random_configs(random.Random(4545), 20, random_wide_conv_config, dtype, device)
    check_random_configs(random.Random(4646), 20, random_tma_conv_config, dtype, device)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
def test_wide_tiles_match_standard_tiles(device, monkeypatch):
    # every output value is the same chain of MMAs (chunks, then taps, in order) on either tile
    # shape: bit-identical plain outputs, partial tiles at the maps' right and bottom edges included
    rng = random.Random(4747)
    for _ in range(12):
        cfg = random_wide_conv_config(rng)
        x, w, b = make_conv_inputs(cfg, torch.bfloat16, device)
        args = conv_args(cfg)
        set_conv_kernel("wgmma_standard")
        ref = torch.ops.myops.conv_transpose2d(x, w, b, *args)
        set_conv_kernel("wgmma_wide")
        assert torch.equal(torch.ops.myops.conv_transpose2d(x, w, b, *args), ref), cfg


# the kernel switches choose among the CUDA kernels: the CPU runs once
UNIT_INPUT_RUNS = [("cpu", "default")] + [pytest.param("cuda", kernel, marks=DEVICES[1].marks)
                                          for kernel in ("default", "mma", "generic")]


@pytest.mark.parametrize("device,kernel", UNIT_INPUT_RUNS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_unit_input_random_configs(device, dtype, kernel, monkeypatch):
    # one-row / one-column inputs; 1 x 1 inputs through unpadded, undilated kernels (DCGAN's
    # latent) run on CUDA as one GEMM over kH * kW times the output channels
    set_conv_kernel(kernel)
    check_random_configs(random.Random(6161), 30, random_unit_input_conv_config, dtype, device)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("kernel", ["wgmma", "wgmma_no_tma"])
def test_tma_layers_random_configs(device, kernel, monkeypatch):
    # float32 wide layers whose input rows TMA can address: the Hopper kernel's TMA input path
    # (boxes from 16-byte aligned columns, zero fill past the input's edges, the next group's
    # channels masked) and, for the same configs, its register path
    set_conv_kernel(kernel)
    check_random_configs(random.Random(4343), 40, random_tma_conv_config, torch.float32, device)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
def test_unaligned_input_without_tma(device, monkeypatch):
    # an input view 8 bytes past an aligned address: TMA cannot map it, the call loads through
    # registers instead (same plan), with the same result as the aligned copy through TMA
    set_conv_kernel("wgmma")
    torch.manual_seed(0)
    dtype = torch.float32
    base = torch.randn(2 * 24 * 16 * 32 + 2, device=device, dtype=dtype)
    x = base[2:].view(2, 24, 16, 32)
    assert x.data_ptr() % 16 != 0
    w = torch.randn(24, 64, 3, 3, device=device, dtype=dtype) * 0.3
    b = torch.randn(64, device=device, dtype=dtype)
    args = [[1, 1], [1, 1], [0, 0], 1, [1, 1]]
    out = torch.ops.myops.conv_transpose2d(x, w, b, *args)
    assert_matches(out, ref_conv_transpose2d(x, w, b, *args), tolerance(dtype, device))
    assert torch.equal(out, torch.ops.myops.conv_transpose2d(x.clone(), w, b, *args))


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cfg", [
    dict(N=2, C_in=24, C_out_g=64, groups=1, H=20, W=24, kH=3, kW=3, stride=(1, 1), dilation=(1, 1),
         padding=(1, 1), output_padding=(0, 0), bias=True),   # 16-row strips; bfloat16: a channel tail
    dict(N=2, C_in=64, C_out_g=72, groups=1, H=32, W=30, kH=5, kW=5, stride=(1, 1), dilation=(1, 1),
         padding=(1, 1), output_padding=(0, 0), bias=False),  # 17-row strips: the ping-pong kernel
    dict(N=1, C_in=64, C_out_g=48, groups=2, H=13, W=17, kH=4, kW=3, stride=(2, 1), dilation=(1, 2),
         padding=(1, 0), output_padding=(1, 0), bias=True),   # groups, phases, partial tiles
])
def test_channels_last_staging_matches_register_path(device, dtype, cfg, monkeypatch):
    # The Hopper kernel with its input staged channels-last (TMA boxes straight into the operand
    # layout) runs the same MMAs on the same TF32-rounded / 16-bit operands as with the NCHW
    # input through registers: bit-identical outputs, also for a channels-last input (a 16-bit
    # one is used as it is, no copy) and under the fused epilogue.
    torch.manual_seed(0)
    x, w, b = make_conv_inputs(cfg, dtype, device)
    args = conv_args(cfg)
    set_conv_kernel("wgmma_no_tma")
    ref = torch.ops.myops.conv_transpose2d(x, w, b, *args)
    fused_ref = torch.ops.myops.conv_transpose2d_gelu_group_norm(x, w, b, *args, "none", 8, None, None, 1e-5)
    set_conv_kernel("wgmma_nhwc")
    assert torch.equal(torch.ops.myops.conv_transpose2d(x, w, b, *args), ref)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    assert torch.equal(torch.ops.myops.conv_transpose2d(x_cl, w, b, *args), ref)
    assert torch.equal(torch.ops.myops.conv_transpose2d_gelu_group_norm(x, w, b, *args, "none", 8, None, None, 1e-5),
                       fused_ref)
    assert_matches(ref, ref_conv_transpose2d(x, w, b, *args), tolerance(dtype, device))


# The Hopper kernel's weight preparation starts under the input's staging copy (programmatic
# dependent launch) and waits for it before it ends, so that the conv launched after it reads the
# whole staged input; early_launch=False launches it after the copy. A new input each round (the
# staging buffer is reused from call to call: a conv ahead of the copy would read the last one).
@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_preparation_started_under_the_staging_matches_a_plain_launch(device, dtype, monkeypatch):
    cfg = dict(N=48, C_in=64, C_out_g=128, groups=1, H=32, W=32, kH=5, kW=5, stride=(1, 1), dilation=(1, 1),
               padding=(1, 1), output_padding=(0, 0), bias=True)
    torch.manual_seed(0)
    set_conv_kernel("wgmma_nhwc")
    args = conv_args(cfg)
    for _ in range(4):
        x, w, b = make_conv_inputs(cfg, dtype, device)
        myops.backends.set_options(early_launch=False)
        expected = torch.ops.myops.conv_transpose2d(x, w, b, *args)
        myops.backends.set_options(early_launch=True)
        assert torch.equal(torch.ops.myops.conv_transpose2d(x, w, b, *args), expected)


def checked_pingpong_conv(x, w, b, args, tol):
    """conv_transpose2d through the ping-pong wgmma kernel where the Hopper engine runs (asserted
    from the profiler's kernel names; elsewhere its absence), checked against float64 PyTorch."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = torch.ops.myops.conv_transpose2d(x, w, b, *args)
        torch.cuda.synchronize()
    assert any("pingpong" in e.name for e in prof.events()) == hopper_engine_runs(), "the ping-pong wgmma kernel"
    assert_matches(out, ref_conv_transpose2d(x, w, b, *args), tol)
    return out


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("input_path", [{}, {"nhwc_staging": "never"}], ids=["default", "registers"])
def test_pingpong_kernel_many_tiles_per_block(device, dtype, input_path, monkeypatch):
    # The persistent ping-pong kernel (34-row maps: 17-row strips) with ~6 tiles per block, so
    # that both consumers take several tiles and overlap (per-consumer stage barriers, the turn
    # handed over before a tile's last chunk), and 34 columns: every third tile is 2 columns
    # inside the grid (an edge band where the producer goes through registers).
    myops.backends.set_options(**input_path)
    torch.manual_seed(0)
    cfg = dict(N=64, C_in=64, C_out_g=128, groups=1, H=32, W=32, kH=5, kW=5, stride=(1, 1), dilation=(1, 1),
               padding=(1, 1), output_padding=(0, 0), bias=True)
    x, w, b = make_conv_inputs(cfg, dtype, device)
    args = conv_args(cfg)
    out = checked_pingpong_conv(x, w, b, args, tolerance(dtype, device))
    assert torch.equal(out, torch.ops.myops.conv_transpose2d(x, w, b, *args))  # deterministic


# Ping-pong layers whose phase grids end 1 or 2 columns into a tile: those tiles run as edge bands
# (the halo stored column by column, one m64n48 per tap; register producer only). Phases of a
# stride-2 layer (68 x 68: four 34 x 34 grids), 33 and 34 columns, taps 7 rows tall (23 halo
# rows: within the band's 24) and 9 rows tall (25 halo rows: no bands), 16-bit
# inputs through the register producer too.
EDGE_BAND_LAYERS = {
    "k5_34cols": dict(H=32, W=32, kH=5, kW=5, stride=(1, 1), padding=(1, 1)),
    "k5_33cols": dict(H=32, W=31, kH=5, kW=5, stride=(1, 1), padding=(1, 1)),
    "k4_s2_phases": dict(H=34, W=34, kH=4, kW=4, stride=(2, 2), padding=(1, 1)),
    "k7x3_34cols": dict(H=28, W=34, kH=7, kW=3, stride=(1, 1), padding=(0, 1)),
    "k9x5_33cols": dict(H=26, W=31, kH=9, kW=5, stride=(1, 1), padding=(0, 1)),
}


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layer", list(EDGE_BAND_LAYERS))
def test_pingpong_edge_bands(device, dtype, layer, monkeypatch):
    set_conv_kernel("wgmma")  # (34-row maps: 17-row strips, whatever the layer's cost)
    myops.backends.set_options(nhwc_staging="never")
    torch.manual_seed(0)
    cfg = dict(N=16, C_in=64, C_out_g=128, groups=1, dilation=(1, 1), output_padding=(0, 0), bias=True,
               **EDGE_BAND_LAYERS[layer])
    x, w, b = make_conv_inputs(cfg, dtype, device)
    args = conv_args(cfg)
    checked_pingpong_conv(x, w, b, args, tolerance(dtype, device))
    # the same taps through the channel-statistics epilogue (the BatchNorm chain's conv)
    check_channel_stats(x, w, b, args, tolerance(dtype, device))


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_channels_last_inputs_default_choice(device, dtype):
    # channels-last inputs through the kernel choice as shipped (on an H100 the wgmma kernel takes
    # them channels-last: a 16-bit one as it is, float32 through a rounding copy); the output keeps
    # the input's memory format
    rng = random.Random(909)
    for _ in range(12):
        cfg = random_wide_conv_config(rng)
        x, w, b = make_conv_inputs(cfg, dtype, device)
        x = x.contiguous(memory_format=torch.channels_last)
        args = conv_args(cfg)
        out = torch.ops.myops.conv_transpose2d(x, w, b, *args)
        assert out.is_contiguous(memory_format=torch.channels_last)
        assert_matches(out, ref_conv_transpose2d(x, w, b, *args), tolerance(dtype, device))


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("kernel", ["default", "generic"])
def test_strict_float32_random_configs(device, kernel, monkeypatch):
    # TF32 off (torch.backends.cudnn.allow_tf32 = False): exact float32 products, so the tight
    # float32 tolerance. Wide layers take the mma kernel's FFMA mode, the rest the generic kernel.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    set_conv_kernel(kernel)
    assert tolerance(torch.float32, device) == 2e-5
    check_random_configs(random.Random(31), 60, random_conv_config, torch.float32, device)
    check_random_configs(random.Random(32), 60, random_wide_conv_config, torch.float32, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_narrow_layers_random_configs(device, dtype):
    # few multiply-adds per output on maps wider and taller than the CUDA direct kernel's tile
    check_random_configs(random.Random(515), 40, random_narrow_conv_config, dtype, device)


FEW_CHANNELS_RUNS = [(torch.float32, True), (torch.float32, False), (torch.float64, True), (torch.bfloat16, True),
                     (torch.float16, True)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,tf32", FEW_CHANNELS_RUNS, ids=["tf32", "strict", "float64", "bfloat16", "float16"])
def test_few_channels_random_configs(device, dtype, tf32, monkeypatch):
    # 1-4 output channels per group (image heads): on CUDA float32 / float64 calls of up to 512
    # multiply-adds per output take the few-channels kernel, whose FFMA is exact whatever the TF32
    # setting; the others (and 16-bit types) the tensor-core kernels
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    check_random_configs(random.Random(717), 40, random_few_channels_conv_config, dtype, device)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
def test_few_channels_heads_match_other_kernels(device, monkeypatch):
    # a DCGAN-style RGB head (64 -> 3, k4 s2 p1) and a 1-channel mask head (k3 s1 p1), contiguous
    # and channels-last, with and without the few-channels kernel
    torch.manual_seed(0)
    for c_in, c_out, k, stride, pad in ((64, 3, 4, 2, 1), (48, 1, 3, 1, 1)):
        x = torch.randn(4, c_in, 32, 32, device=device)
        w = torch.randn(c_in, c_out, k, k, device=device) * 0.1
        b = torch.randn(c_out, device=device)
        args = ([stride, stride], [pad, pad], [0, 0], 1, [1, 1])
        ref = ref_conv_transpose2d(x, w, b, *args)
        for kernel in ("default", "no_few_channels"):
            set_conv_kernel(kernel)
            for inp in (x, x.contiguous(memory_format=torch.channels_last)):
                out = torch.ops.myops.conv_transpose2d(inp, w, b, *args)
                assert_matches(out, ref, tolerance(torch.float32, device))


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
def test_narrow_layers_strict_float32(device, monkeypatch):
    # the direct kernel's FFMA is exact whatever the TF32 setting: the tight float32 tolerance
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    check_random_configs(random.Random(516), 40, random_narrow_conv_config, torch.float32, device)


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("case,kernel", [("narrow", "default"), ("wide", "default"), ("wide", "mma"),
                                         ("few_channels", "default")])
def test_outputs_over_2_31_elements(device, case, kernel, monkeypatch):
    # outputs of more than 2^31 elements: bfloat16 (4.3 GB) through the direct kernel (1x1 taps,
    # stride 2) and the tensor-core kernels (3x3 taps), float32 through the few-channels kernel
    # (131073 images of an RGBA head: 8.6 GB in, 8.6 GB out);
    # the last channels (images), whose offsets pass 2^31, against float64 PyTorch on the same inputs
    set_conv_kernel(kernel)
    torch.manual_seed(0)
    if case == "few_channels":
        x = torch.randn(131073, 16, 32, 32, device=device)
        w = torch.randn(16, 4, 4, 4, device=device) * 0.2
        b = torch.randn(4, device=device)
        args = [[2, 2], [1, 1], [0, 0], 1, [1, 1]]
        out = torch.ops.myops.conv_transpose2d(x, w, b, *args)
        assert out.numel() > 2**31
        for images in (slice(0, 2), slice(-3, None)):
            ref = F.conv_transpose2d(x[images].double(), w.double(), b.double(), *args[:3], 1, args[4])
            assert_matches(out[images], ref, tolerance(torch.float32, device))
        del out, x
        torch.cuda.empty_cache()
        return
    if case == "narrow":
        x = torch.randn(1, 4, 1024, 1040, device=device, dtype=torch.bfloat16)
        w = torch.randn(4, 520, 1, 1, device=device, dtype=torch.bfloat16)
        args = [[2, 2], [0, 0], [0, 0], 1, [1, 1]]
    else:
        x = torch.randn(1, 16, 1024, 1024, device=device, dtype=torch.bfloat16)
        w = torch.randn(16, 2048, 3, 3, device=device, dtype=torch.bfloat16) * 0.3
        args = [[1, 1], [0, 0], [0, 0], 1, [1, 1]]
    b = torch.randn(w.shape[1], device=device, dtype=torch.bfloat16)
    out = torch.ops.myops.conv_transpose2d(x, w, b, *args)
    assert out.numel() > 2**31
    for channels in (slice(0, 2), slice(-4, None)):
        ref = F.conv_transpose2d(x.double(), w[:, channels].double(), b[channels].double(), *args[:3], 1, args[4])
        assert_matches(out[:, channels], ref, tolerance(torch.bfloat16, device))
    del out
    torch.cuda.empty_cache()


@pytest.mark.parametrize("device", [d for d in DEVICES if "cuda" in str(d)])
@pytest.mark.parametrize("dtype,tf32", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, True)],
                         ids=["tf32", "ffma", "bfloat16"])
@pytest.mark.parametrize("kernel_size", [(5, 5), (6, 6), (3, 11)], ids=lambda k: f"{k[0]}x{k[1]}")
def test_mma_kernel_many_taps(device, dtype, tf32, kernel_size, monkeypatch):
    # the mma kernel with 25 to 36 taps per output (the random configurations stop at 5 x 5) in
    # its TF32, FFMA and 16-bit modes: weight fragments of every phase-ordered tap, channel tails
    # in both directions, groups
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    set_conv_kernel("mma")
    kH, kW = kernel_size
    for groups, c_in, c_out in ((1, 40, 36), (2, 20, 70)):
        x = torch.randn(2, c_in, 9, 11, device=device, dtype=dtype)
        w = torch.randn(c_in, c_out // groups, kH, kW, device=device, dtype=dtype) * 0.1
        b = torch.randn(c_out, device=device, dtype=dtype)
        args = ([2, 1], [1, 2], [1, 0], groups, [1, 1])
        out = torch.ops.myops.conv_transpose2d(x, w, b, *args)
        assert_matches(out, ref_conv_transpose2d(x, w, b, *args), tolerance(dtype, device))
