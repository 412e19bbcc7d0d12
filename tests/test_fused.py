import random

import pytest
import torch
import torch.nn.functional as F

import myops
from conftest import DEVICES
from reference import (assert_matches, conv_args, make_conv_inputs, random_conv_config, ref_fused,
                       tolerance)

RANDOM_RUNS = [(torch.float32, 100), (torch.float64, 30), (torch.bfloat16, 30), (torch.float16, 30)]


def random_fused_case(rng, dtype, device):
    cfg = random_conv_config(rng)
    c_out = cfg["C_out_g"] * cfg["groups"]
    num_groups = rng.choice([d for d in range(1, c_out + 1) if c_out % d == 0])
    x, w, b = make_conv_inputs(cfg, dtype, device)
    affine = rng.random() < 0.7
    gn_w = torch.randn(c_out, dtype=dtype, device=device) if affine else None
    gn_b = torch.randn(c_out, dtype=dtype, device=device) if affine and rng.random() < 0.8 else None
    args = [x, w, b, *conv_args(cfg), rng.choice(["none", "tanh"]), num_groups, gn_w, gn_b,
            rng.choice([1e-5, 1e-3])]
    return cfg, args


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,count", RANDOM_RUNS, ids=lambda v: str(v))
def test_random_configs_match_pytorch_chain(device, dtype, count):
    rng = random.Random(99 + count)
    for i in range(count):
        cfg, args = random_fused_case(rng, dtype, device)
        out = torch.ops.myops.conv_transpose2d_gelu_group_norm(*args)
        assert out.dtype == dtype
        try:
            # the normalised output is O(1) whatever the conv's magnitude; the bound must also cover
            # groups of a single element (output = beta), so it is taken against the tensor's scale
            assert_matches(out, ref_fused(*args), tolerance(dtype, device) * 4, floor=1.0)
        except AssertionError as e:
            raise AssertionError(f"config {i}: {cfg}, gelu={args[8]}, groups={args[9]}: {e}") from None


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
