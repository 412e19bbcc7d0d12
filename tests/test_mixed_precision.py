"""Mixed precision. torch.autocast: every op returns the dtype the aten ops it fuses return under
autocast, and values as close to a float64 reference as a lower-precision result can be; the
modules, gradients and the compile pass under autocast (where an autocast op hands a chain a
bfloat16 input and float32 weights). Without autocast: 16-bit models whose norm layers stay
float32, which aten's batch_norm / group_norm accept."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import myops
import myops.compile
from conftest import HAS_CUDA, NO_CUDA
from reference import TOL, assert_matches

cuda_only = pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
AUTOCASTS = [("cpu", torch.bfloat16), pytest.param("cuda", torch.bfloat16, marks=cuda_only),
             pytest.param("cuda", torch.float16, marks=cuda_only)]
OPS = torch.ops.myops


def f64(*ts):
    return [None if t is None else t.detach().double() for t in ts]


def check(out, eager, ref64, dtype):
    """out (myops under autocast) has eager's dtype (aten under autocast) and is as close to the
    float64 reference as a lower-precision result may be (eager's own error is checked too, so
    that the bound means something)."""
    assert out.dtype == eager.dtype
    tol = 2 * TOL[dtype]
    assert_matches(eager.float(), ref64, tol)
    assert_matches(out.float(), ref64, tol)


def conv_inputs(device, input_dtype=torch.float32):
    # input_dtype: what reaches the chain (an autocast op before it returns the lower precision)
    x = torch.randn(2, 8, 6, 7, device=device).to(input_dtype)
    w, b = torch.randn(8, 16, 3, 3, device=device) * 0.2, torch.randn(16, device=device)
    gw, gb = torch.rand(16, device=device) + 0.5, torch.randn(16, device=device)
    return x, w, b, gw, gb


@pytest.mark.parametrize("device,dtype", AUTOCASTS)
@pytest.mark.parametrize("lower_precision_input", [False, True])
def test_gelu_chain_ops(device, dtype, lower_precision_input):
    x, w, b, gw, gb = conv_inputs(device, dtype if lower_precision_input else torch.float32)
    conv = (x, w, b, [2, 2], [1, 1], [1, 1], 1, [1, 1])
    with torch.autocast(device, dtype=dtype):
        eager_conv = F.conv_transpose2d(x, w, b, 2, 1, 1)
        eager = F.group_norm(F.gelu(eager_conv), 4, gw, gb)
        out_conv = OPS.conv_transpose2d(*conv)
        out = OPS.conv_transpose2d_gelu_group_norm(*conv, "none", 4, gw, gb, 1e-5)
        act, mean, rstd = OPS.conv_transpose2d_gelu_group_stats(*conv, "none", 4, 1e-5)
        norm_in = eager_conv.detach()
        eager_norm, out_norm = F.group_norm(norm_in, 4, gw, gb), OPS.group_norm(norm_in, 4, gw, gb, 1e-5)
        out_split = myops.group_norm_with_stats(act, mean, rstd, gw, gb)
    x64, w64, b64, gw64, gb64 = f64(x, w, b, gw, gb)
    conv64 = F.conv_transpose2d(x64, w64, b64, 2, 1, 1)
    ref64 = F.group_norm(F.gelu(conv64), 4, gw64, gb64)
    check(out_conv, eager_conv, conv64, dtype)
    check(out, eager, ref64, dtype)
    check(out_split, eager, ref64, dtype)
    check(out_norm, eager_norm, F.group_norm(norm_in.double(), 4, gw64, gb64), dtype)
    assert act.dtype == eager_conv.dtype and mean.dtype == rstd.dtype == torch.float32


@pytest.mark.parametrize("device,dtype", AUTOCASTS)
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_chain_ops(device, dtype, training):
    x, w, b, gw, gb = conv_inputs(device, dtype)
    bw, bb = torch.rand(16, device=device) + 0.5, torch.randn(16, device=device)
    running = [torch.randn(16, device=device), torch.rand(16, device=device) + 0.5]
    eager_running, myops_running = [t.clone() for t in running], [t.clone() for t in running]
    pool = dict(kernel_size=2)
    with torch.autocast(device, dtype=dtype):
        conv = F.conv_transpose2d(x, w, b, padding=1)
        y = torch.tanh(F.batch_norm(conv, *eager_running, bw, bb, training, 0.1, 1e-5))
        eager = F.group_norm(F.max_pool2d(y, 2), 4, gw, gb)
        out = myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
            x, w, b, padding=1, running_mean=myops_running[0], running_var=myops_running[1], bn_weight=bw,
            bn_bias=bb, training=training, momentum=0.1, num_groups=4, gn_weight=gw, gn_bias=gb, **pool)
    x64, w64, b64, gw64, gb64, bw64, bb64 = f64(x, w, b, gw, gb, bw, bb)
    running64 = f64(*running)
    conv64 = F.conv_transpose2d(x64, w64, b64, padding=1)
    y64 = torch.tanh(F.batch_norm(conv64, *running64, bw64, bb64, training, 0.1, 1e-5))
    check(out, eager, F.group_norm(F.max_pool2d(y64, 2), 4, gw64, gb64), dtype)
    for mine, theirs, ref in zip(myops_running, eager_running, running64):
        assert mine.dtype == theirs.dtype == torch.float32
        assert_matches(mine, ref, 2 * TOL[dtype])


@pytest.mark.parametrize("device,dtype", AUTOCASTS)
def test_modules_and_gradients(device, dtype):
    torch.manual_seed(1)
    gelu_block = myops.nn.ConvTranspose2dGELUGroupNorm(8, 16, 3, num_groups=4, device=device)
    bn_block = myops.nn.ConvTranspose2dBatchNormTanhMaxPool2dGroupNorm(16, 8, 3, num_groups=2, padding=1,
                                                                       device=device)
    eager_blocks = [nn.Sequential(*gelu_block.children()), nn.Sequential(*bn_block.children())]
    x = torch.randn(2, 8, 5, 6, device=device)
    grads = []
    for blocks in ((gelu_block, bn_block), eager_blocks):
        for p in (*gelu_block.parameters(), *bn_block.parameters()):
            p.grad = None
        with torch.autocast(device, dtype=dtype):
            out = blocks[1](blocks[0](x))
        out.float().square().sum().backward()
        grads.append((out, [p.grad.clone() for p in (*gelu_block.parameters(), *bn_block.parameters())]))
    (out, mine), (eager, theirs) = grads
    assert out.dtype == eager.dtype
    assert_matches(out.float(), eager.float(), 4 * TOL[dtype])
    for g, g_eager in zip(mine, theirs):
        assert g.dtype == g_eager.dtype == torch.float32
        assert_matches(g, g_eager, 8 * TOL[dtype], floor=max(t.abs().max().item() for t in theirs))


class Decoder(nn.Module):
    """A latent -> image decoder whose first layer, under autocast, hands the chain bfloat16."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 8 * 4 * 4)
        self.conv, self.act, self.norm = nn.ConvTranspose2d(8, 16, 4, stride=2, padding=1), nn.GELU(), nn.GroupNorm(4, 16)
        self.head = nn.Conv2d(16, 3, 1)

    def forward(self, z):
        x = self.lin(z).view(-1, 8, 4, 4)
        return self.head(self.norm(self.act(self.conv(x))) + 1)


@pytest.mark.parametrize("device,dtype", AUTOCASTS)
@pytest.mark.parametrize("inside", [False, True])
def test_compiled_model_under_autocast(device, dtype, inside):
    model = Decoder().to(device)
    z = torch.randn(2, 16, device=device)

    def step(z):
        with torch.autocast(device, dtype=dtype):
            return model(z)

    eager = step(z)
    torch._dynamo.reset()
    myops.compile.reset_stats()
    with myops.compile.enabled(devices=None):
        if inside:  # autocast entered inside the compiled function
            out = torch.compile(step, fullgraph=True)(z)
        else:
            with torch.autocast(device, dtype=dtype):
                out = torch.compile(model, fullgraph=True)(z)
    assert myops.compile.stats()["conv_transpose2d_gelu_group_norm"] == 1
    assert out.dtype == eager.dtype
    assert_matches(out.float(), eager.float(), 4 * TOL[dtype])


# aten's mixed-precision group_norm is CPU-only (torch 2.11's CUDA F.group_norm refuses a bfloat16
# input with float32 weights: "expected scalar type BFloat16 but found Float"), so eager gives a
# reference on the CPU only; on CUDA the myops path runs where eager raises.
MIXED_NORMS = [("cpu", torch.bfloat16), ("cpu", torch.float16)]


def mixed_model(dtype, device):
    """A 16-bit model whose norm layers stay float32."""
    model = nn.Sequential(nn.ConvTranspose2d(8, 16, 3, padding=1), nn.GELU(), nn.GroupNorm(4, 16),
                          nn.ConvTranspose2d(16, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Tanh(), nn.MaxPool2d(2),
                          nn.GroupNorm(2, 8)).to(device, dtype)
    for i in (2, 4, 7):
        model[i].float()
    return model


@pytest.mark.parametrize("device,dtype", MIXED_NORMS)
@pytest.mark.parametrize("training", [True, False])
def test_float32_norms_in_a_16_bit_model(device, dtype, training):
    model = mixed_model(dtype, device).train(training)
    eager = copy.deepcopy(model)
    x = torch.randn(2, 8, 6, 7, device=device, dtype=dtype)
    swapped = myops.nn.swap_modules(model)
    assert sum(swapped.values()) == 2
    with torch.no_grad():
        out, ref = model(x), eager(x)
    assert out.dtype == ref.dtype == dtype
    assert_matches(out.float(), ref.float(), 4 * TOL[dtype])
    bn, bn_eager = model[3].bn, eager[4]
    assert_matches(bn.running_var, bn_eager.running_var, 2 * TOL[dtype])
    gn = eager[2]  # the Python API's group_norm too
    with torch.no_grad():
        act = torch.randn(2, 16, 5, 5, device=device, dtype=dtype)
        mine, theirs = myops.group_norm(act, 4, gn.weight, gn.bias), gn(act)
    assert mine.dtype == theirs.dtype
    assert_matches(mine.float(), F.group_norm(act.double(), 4, gn.weight.double(), gn.bias.double()), 2 * TOL[dtype])


@pytest.mark.parametrize("device,dtype", MIXED_NORMS)
def test_compiled_16_bit_model_with_float32_group_norm(device, dtype):
    model = mixed_model(dtype, device)[:3]
    x = torch.randn(2, 8, 6, 7, device=device, dtype=dtype)
    torch._dynamo.reset()
    myops.compile.reset_stats()
    with myops.compile.enabled(devices=None):
        out = torch.compile(model, fullgraph=True)(x)
    assert myops.compile.stats()["conv_transpose2d_gelu_group_norm"] == 1
    ref = model(x)
    assert out.dtype == ref.dtype == dtype
    assert_matches(out.float(), ref.float(), 4 * TOL[dtype])
