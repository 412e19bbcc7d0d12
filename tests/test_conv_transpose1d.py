"""myops.conv_transpose1d (a one-row conv_transpose2d): against F.conv_transpose1d in float64,
gradients, opcheck, bad input, and the compile pass on a weight-normed vocoder upsampler."""
import random

import pytest
import torch
import torch.nn.functional as F

import myops
import myops.compile as mc
from conftest import DEVICES
from reference import assert_matches, f64, tolerance
from test_compile_family import arch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_matches_torch(device, dtype):
    rng = random.Random(3)
    for _ in range(8):
        groups = rng.choice([1, 2])
        c_in, c_out = groups * rng.choice([1, 3, 8]), groups * rng.choice([1, 4, 16])
        k, s = rng.choice([(1, 1), (3, 1), (4, 2), (16, 8), (5, 3)])
        d = rng.choice([1, 2]) if s == 1 else 1
        p, op = rng.choice([0, 1, k // 2]), rng.choice([0, s - 1])
        x = torch.randn(rng.choice([1, 2]), c_in, rng.choice([1, 7, 33]), device=device, dtype=dtype)
        w = torch.randn(c_in, c_out // groups, k, device=device, dtype=dtype)
        b = torch.randn(c_out, device=device, dtype=dtype) if rng.random() < 0.5 else None
        if (x.shape[2] - 1) * s - 2 * p + d * (k - 1) + op + 1 <= 0:
            continue
        y = myops.conv_transpose1d(x, w, b, s, p, op, groups, d)
        ref = F.conv_transpose1d(f64(x), f64(w), f64(b), s, p, op, groups, d)
        assert y.dtype == dtype
        assert_matches(y, ref, tolerance(dtype, device))
    y = myops.conv_transpose1d(x[0], w, b, s, p, op, groups, d)  # unbatched
    assert y.shape == ref.shape[1:]


def test_gradcheck_and_opcheck():
    x = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: myops.conv_transpose1d(x, w, b, 2, 1, 1, 2), (x, w, b))
    torch.library.opcheck(torch.ops.myops.conv_transpose1d.default, (x, w, b, [2], [1], [1], 2, [1]))


@pytest.mark.parametrize("args,match", [
    ((torch.randn(2, 4, 5, 5), torch.randn(4, 3, 3)), "argument 'input' must be a 3-D tensor"),
    ((torch.randn(2, 4, 5), torch.randn(4, 3, 3, 3)), "argument 'weight' must be a 3-D tensor"),
])
def test_bad_input_names_the_argument(args, match):
    with pytest.raises(RuntimeError, match=f"myops::conv_transpose1d: {match}"):
        torch.ops.myops.conv_transpose1d(*args, None, [1], [0], [0], 1, [1])


def test_bad_scalar_names_the_argument():
    with pytest.raises(TypeError, match="myops.conv_transpose1d: argument 'stride'"):
        myops.conv_transpose1d(torch.randn(2, 4, 5), torch.randn(4, 3, 3), stride=(2, 2))
    with pytest.raises(RuntimeError, match="myops::conv_transpose1d: argument 'padding' must have 1 element"):
        torch.ops.myops.conv_transpose1d(torch.randn(2, 4, 5), torch.randn(4, 3, 3), None, [1], [0, 0], [0], 1, [1])


def test_vocoder_upsampler_compiles_with_weight_norm():
    mc.disable()
    mc.reset_stats()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = arch.VocoderUpsampler(mels=8, channels=32, rates=(4, 2))
    x = torch.randn(2, 8, 6, requires_grad=True)
    try:
        mc.enable(devices=None, conv_transpose2d=True)
        out = torch.compile(model, fullgraph=True)(x)
    finally:
        mc.disable()
    ref = model(x)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    # the first conv with the next block's LeakyReLU in its epilogue, the last one alone
    assert mc.stats()["conv_transpose1d_leaky_relu"] == 1 and mc.stats()["conv_transpose1d"] == 1
    grads = torch.autograd.grad(out.sum(), [x, *model.parameters()])
    ref_grads = torch.autograd.grad(ref.sum(), [x, *model.parameters()])
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)


class _Upsampler1d(torch.nn.Module):
    """1-D decoder blocks as audio / sequence models write them."""

    def __init__(self):
        super().__init__()
        self.up1 = torch.nn.ConvTranspose1d(8, 16, 4, 2, 1, bias=False)
        self.bn = torch.nn.BatchNorm1d(16)
        self.up2 = torch.nn.ConvTranspose1d(16, 12, 5, 3, 2, 1)
        self.gn = torch.nn.GroupNorm(3, 12)
        self.up3 = torch.nn.ConvTranspose1d(12, 6, 3, 1, 1)
        self.inorm = torch.nn.InstanceNorm1d(6, affine=True)

    def forward(self, x):
        x = torch.nn.functional.leaky_relu(self.bn(self.up1(x)), 0.2)
        x = torch.nn.functional.silu(self.gn(self.up2(x)))
        return torch.relu(self.inorm(self.up3(x)))


def test_family_chains_in_1d_compile_with_outputs_gradients_and_buffers():
    mc.disable()
    mc.reset_stats()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, ref_model = _Upsampler1d(), _Upsampler1d()
    ref_model.load_state_dict(model.state_dict())
    x = torch.randn(3, 8, 7, requires_grad=True)
    try:
        mc.enable(devices=None)
        out = torch.compile(model, fullgraph=True)(x)
    finally:
        mc.disable()
    assert {k: v for k, v in mc.stats().items() if v} == {
        "conv_transpose1d_batch_norm_leaky_relu": 1, "conv_transpose1d_group_norm_silu": 1,
        "conv_transpose1d_instance_norm_relu": 1}
    ref = ref_model(x)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(out.square().sum(), [x, *model.parameters()])
    ref_grads = torch.autograd.grad(ref.square().sum(), [x, *ref_model.parameters()])
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)
    for b, r in zip(model.buffers(), ref_model.buffers()):
        torch.testing.assert_close(b, r)


def test_conv_transpose1d_norm_act_matches_torch():
    x, w, b = torch.randn(2, 4, 9, dtype=torch.float64), torch.randn(4, 6, 5, dtype=torch.float64), None
    y = myops.conv_transpose1d_norm_act(x, w, b, 3, 2, 1, norm="batch_norm", activation="leaky_relu",
                                        negative_slope=0.1)
    ref = torch.nn.functional.leaky_relu(
        torch.nn.functional.batch_norm(torch.nn.functional.conv_transpose1d(x, w, b, 3, 2, 1), None, None,
                                       training=True), 0.1)
    torch.testing.assert_close(y, ref)
    with pytest.raises(ValueError, match="myops.conv_transpose1d_norm_act: argument 'input'"):
        myops.conv_transpose1d_norm_act(x.unsqueeze(0), w, norm="group_norm", num_groups=2)
    with pytest.raises(TypeError, match="myops.conv_transpose1d_norm_act: argument 'stride'"):
        myops.conv_transpose1d_norm_act(x, w, stride=(2, 2), norm="group_norm", num_groups=2)
