"""PyTorch references (float64) and tolerances shared by the tests."""
import random

import torch
import torch.nn.functional as F

import myops.backends

# Relative tolerance of an op's output against a float64 reference computed from the same
# (already rounded) inputs. float16 / bfloat16 outputs are rounded once; TF32 rounds the operands.
TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}
TF32_TOL = 5e-3


def tolerance(dtype, device):
    if dtype == torch.float32 and device == "cuda" and torch.backends.cudnn.allow_tf32:
        return TF32_TOL
    return TOL[dtype]


def assert_matches(out, ref, tol, floor=1e-3):
    """Elementwise |out - ref| <= tol * (|ref| + max|ref|): relative, with an absolute floor scaled
    to the tensor's magnitude (outputs of a convolution cancel, so pure rtol is too strict)."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    out64 = out.detach().double().cpu()
    ref64 = ref.detach().double().cpu()
    assert not torch.isnan(out64).any(), "NaN in output"
    scale = ref64.abs().max().item() if ref64.numel() else 0.0
    err = (out64 - ref64).abs()
    bound = tol * (ref64.abs() + max(scale, floor))
    bad = err > bound
    assert not bad.any(), (
        f"{int(bad.sum())} of {out.numel()} elements off; max err {err.max().item():.3g}, "
        f"tol {tol}, max|ref| {scale:.3g}")


def f64(t):
    return None if t is None else t.detach().double().cpu()


def ref_conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation):
    return F.conv_transpose2d(f64(x), f64(w), f64(b), stride, padding, output_padding, groups, dilation)


def ref_fused(x, w, b, stride, padding, output_padding, groups, dilation, approximate, num_groups,
              gn_w, gn_b, eps):
    y = ref_conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
    return F.group_norm(F.gelu(y, approximate=approximate), num_groups, f64(gn_w), f64(gn_b), eps)


def with_output_padding(rng: random.Random, cfg):
    """Draws cfg's output_padding (each below max(stride, dilation), as PyTorch requires) and
    tells whether the output is non-empty."""
    cfg["output_padding"] = tuple(rng.randint(0, max(s, d) - 1) for s, d in zip(cfg["stride"], cfg["dilation"]))
    oh = (cfg["H"] - 1) * cfg["stride"][0] - 2 * cfg["padding"][0] + cfg["dilation"][0] * (cfg["kH"] - 1) + cfg["output_padding"][0] + 1
    ow = (cfg["W"] - 1) * cfg["stride"][1] - 2 * cfg["padding"][1] + cfg["dilation"][1] * (cfg["kW"] - 1) + cfg["output_padding"][1] + 1
    return oh > 0 and ow > 0


def random_conv_config(rng: random.Random, max_batch=3):
    """A random valid conv_transpose2d configuration covering every argument."""
    while True:
        groups = rng.choice([1, 1, 2, 4])
        cfg = dict(
            N=rng.choice([0, 1, 1, 2, max_batch]),
            C_in=groups * rng.randint(1, 4), C_out_g=rng.randint(1, 4), groups=groups,
            H=rng.randint(1, 9), W=rng.randint(1, 9), kH=rng.randint(1, 4), kW=rng.randint(1, 4),
            stride=(rng.randint(1, 3), rng.randint(1, 3)), dilation=(rng.randint(1, 3), rng.randint(1, 3)),
            padding=(rng.randint(0, 3), rng.randint(0, 3)), bias=rng.random() < 0.6,
        )
        if with_output_padding(rng, cfg):
            return cfg


def random_wide_conv_config(rng: random.Random):
    """A random configuration with more than 32 output channels per group and maps of 12-40
    pixels: the shapes the Hopper (wgmma) kernel takes, channel tails and partial tiles included."""
    while True:
        groups = rng.choice([1, 1, 2])
        cfg = dict(
            N=rng.choice([1, 2]), C_in=groups * rng.choice([3, 8, 13, 24, 40]),
            C_out_g=rng.choice([33, 48, 64, 72, 128]), groups=groups,
            H=rng.randint(12, 40), W=rng.randint(12, 40), kH=rng.randint(1, 5), kW=rng.randint(1, 5),
            stride=(rng.randint(1, 2), rng.randint(1, 2)), dilation=(rng.randint(1, 2), rng.randint(1, 2)),
            padding=(rng.randint(0, 2), rng.randint(0, 2)), bias=rng.random() < 0.7,
        )
        if with_output_padding(rng, cfg):
            return cfg


def random_tma_conv_config(rng: random.Random):
    """A wide configuration whose input rows are a multiple of 16 bytes in every dtype (W a
    multiple of 8): the Hopper kernel then loads its input through TMA, boxes reaching past the
    input's edges and channel tails included."""
    cfg = random_wide_conv_config(rng)
    cfg["W"] = 8 * rng.randint(2, 5)
    return cfg


def random_stride2_conv_config(rng: random.Random):
    """A random stride-2 x 2 configuration with more than 8 output channels per group, on maps of
    1-24 pixels: the mma.sync kernel's joint tiles (all four phases from one halo), with phase
    grids that are not powers of two (partial tiles), tiles of several images, kernels whose
    phases get unequal taps (odd sizes, dilation) and channel tails."""
    while True:
        groups = rng.choice([1, 1, 2])
        cfg = dict(
            N=rng.choice([1, 2, 5, 9]), C_in=groups * rng.choice([3, 8, 13, 24, 40]),
            C_out_g=rng.choice([9, 24, 33, 64, 72, 128]), groups=groups,
            H=rng.randint(1, 24), W=rng.randint(1, 24), kH=rng.randint(1, 6), kW=rng.randint(1, 6),
            stride=(2, 2), dilation=(rng.randint(1, 3), rng.randint(1, 3)),
            padding=(rng.randint(0, 3), rng.randint(0, 3)), bias=rng.random() < 0.7,
        )
        if with_output_padding(rng, cfg):
            return cfg


def random_unit_input_conv_config(rng: random.Random):
    """A random configuration whose input has one row and / or one column (a latent vector's
    first up-sampling layer). Half are 1 x 1 inputs through unpadded, undilated kernels of 2-16
    taps, which the CUDA mma.sync kernel runs as one GEMM (the pointwise view: kH * kW output
    channels per channel, folded into the statistics); batches of up to 300 images."""
    while True:
        groups = rng.choice([1, 1, 2])
        cfg = dict(
            N=rng.choice([1, 3, 37, 300]), C_in=groups * rng.choice([1, 5, 8, 20, 40]),
            C_out_g=rng.choice([3, 8, 24, 64, 72]), groups=groups,
            H=1, W=1, kH=rng.randint(1, 5), kW=rng.randint(1, 5),
            stride=(rng.randint(1, 3), rng.randint(1, 3)), dilation=(rng.randint(1, 3), rng.randint(1, 3)),
            padding=(rng.randint(0, 2), rng.randint(0, 2)), bias=rng.random() < 0.6,
        )
        if rng.random() < 0.5:  # the pointwise view
            cfg.update(kH=rng.choice([1, 2, 4]), kW=rng.choice([2, 4, 8]), dilation=(1, 1), padding=(0, 0))
            if cfg["kH"] * cfg["kW"] > 16:
                continue
            cfg["output_padding"] = (0, 0)
            return cfg
        if rng.random() < 0.5:  # one row, or one column, only
            cfg["H" if rng.random() < 0.5 else "W"] = rng.randint(2, 9)
        if with_output_padding(rng, cfg):
            return cfg


def random_narrow_conv_config(rng: random.Random):
    """A random configuration with few multiply-adds per output value (C_in / groups x kH x kW /
    (sH x sW) <= 32) on maps of up to ~200 output columns and rows: the shapes the CUDA direct
    kernel takes, across several of its 96-column x row tiles, channel blocks and tails."""
    while True:
        groups = rng.choice([1, 2, 4])
        cfg = dict(
            N=rng.choice([1, 2]), C_in=groups * rng.randint(1, 8), C_out_g=rng.choice([1, 3, 8, 9, 16, 20, 33]),
            groups=groups, H=rng.randint(1, 40), W=rng.randint(1, 70), kH=rng.randint(1, 5), kW=rng.randint(1, 5),
            stride=(rng.randint(1, 4), rng.randint(1, 4)), dilation=(rng.randint(1, 3), rng.randint(1, 3)),
            padding=(rng.randint(0, 3), rng.randint(0, 3)), bias=rng.random() < 0.6,
        )
        macs = cfg["C_in"] // groups * cfg["kH"] * cfg["kW"] / (cfg["stride"][0] * cfg["stride"][1])
        if macs <= 32 and with_output_padding(rng, cfg):
            return cfg


def random_few_channels_conv_config(rng: random.Random):
    """A random configuration with 1-4 output channels per group and more than 32 multiply-adds
    per output value (RGB, mask and flow heads): in float32 / float64 mostly the shapes the CUDA
    few-channels kernel takes for a plain conv_transpose2d call (up to 512 per output), with
    strides up to 5 (phases without taps among them), phase grids narrower than a warp and wider
    than a block, several row blocks and groups."""
    while True:
        groups = rng.choice([1, 1, 2, 3])
        cfg = dict(
            N=rng.choice([1, 2, 3]), C_in=groups * rng.choice([5, 16, 33, 64, 97]), C_out_g=rng.randint(1, 4),
            groups=groups, H=rng.randint(1, 40), W=rng.randint(1, 80), kH=rng.randint(1, 6), kW=rng.randint(1, 6),
            stride=(rng.randint(1, 5), rng.randint(1, 5)), dilation=(rng.randint(1, 3), rng.randint(1, 3)),
            padding=(rng.randint(0, 3), rng.randint(0, 3)), bias=rng.random() < 0.6,
        )
        macs = cfg["C_in"] // groups * cfg["kH"] * cfg["kW"] / (cfg["stride"][0] * cfg["stride"][1])
        if macs > 32 and with_output_padding(rng, cfg):
            return cfg


# The CUDA conv kernel a test runs through (the switches are read per call; plans are cached per
# setting): "default" is the choice as shipped, "mma" the mma.sync kernel alone, "wgmma" the Hopper
# kernel on every call it can run (elsewhere, and off sm_90, the choice as shipped; its input
# through TMA where the layout allows), "wgmma_no_tma" the same with the input loaded through
# registers, "wgmma_nhwc" the same with the input staged channels-last wherever the kernel can
# (TMA then loads each chunk's halo straight into the MMA's operand layout), "generic" the generic
# implicit-GEMM kernel alone, "no_few_channels" the choice as shipped without the few-channels
# kernel (plain calls with <= 4 output channels per group then take the others). "wgmma_wide*":
# as "wgmma*", with 16-bit calls on 8 x 32-pixel tiles wherever they fit (shipped for plain convs
# with few taps), "wgmma_standard" with 16 x 16 tiles only.
CONV_KERNEL_OPTIONS = {
    "default": {},
    "mma": {"wgmma": False, "direct": False, "few_channels": False},
    "wgmma": {"force_wgmma": True},
    "wgmma_no_tma": {"force_wgmma": True, "tma": False},
    "wgmma_nhwc": {"force_wgmma": True, "nhwc_staging": "always"},
    "wgmma_wide": {"force_wgmma": True, "wide_tiles": "always"},
    "wgmma_wide_no_tma": {"force_wgmma": True, "wide_tiles": "always", "tma": False},
    "wgmma_wide_nhwc": {"force_wgmma": True, "wide_tiles": "always", "nhwc_staging": "always"},
    "wgmma_standard": {"force_wgmma": True, "wide_tiles": "never"},
    "generic": {"mma": False, "direct": False, "few_channels": False},
    "no_few_channels": {"few_channels": False},
}


def hopper_engine_runs() -> bool:
    """Whether the Hopper (wgmma) engine can run here: an sm_90 GPU and the option hopper on (under
    --myops-option hopper=0 the tests that name its kernels expect the sm_80 engines instead)."""
    return (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
            and bool(myops.backends.get_option("hopper")))


def set_conv_kernel(kernel):
    """Options of CONV_KERNEL_OPTIONS[kernel] through myops.backends (conftest undoes them)."""
    myops.backends.set_options(**CONV_KERNEL_OPTIONS[kernel])


def make_conv_inputs(cfg, dtype, device, requires_grad=False):
    g = cfg["groups"]
    x = torch.randn(cfg["N"], cfg["C_in"], cfg["H"], cfg["W"], dtype=dtype, device=device)
    w = torch.randn(cfg["C_in"], cfg["C_out_g"], cfg["kH"], cfg["kW"], dtype=dtype, device=device) * 0.5
    b = torch.randn(cfg["C_out_g"] * g, dtype=dtype, device=device) if cfg["bias"] else None
    tensors = [t for t in (x, w, b) if t is not None]
    for t in tensors:
        t.requires_grad_(requires_grad)
    return x, w, b


def conv_args(cfg):
    return [list(cfg["stride"]), list(cfg["padding"]), list(cfg["output_padding"]), cfg["groups"], list(cfg["dilation"])]
