"""gradcheck in float64 for every op, and gradients against PyTorch's own modules."""
import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

import myops
from conftest import DEVICES
from reference import tolerance


def _p(*shape, device="cpu", dtype=torch.float64):
    return torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)


CONV_CASES = [  # (input shape, weight shape, bias?, stride, padding, output_padding, groups, dilation)
    ((2, 4, 3, 4), (4, 2, 3, 3), True, 1, 0, 0, 1, 1),
    ((1, 4, 3, 3), (4, 1, 2, 3), True, (2, 3), (1, 0), (1, 2), 2, (1, 1)),
    ((2, 3, 3, 2), (3, 2, 2, 2), False, 2, 1, 1, 3, (2, 1)),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_gradcheck_conv_transpose2d(case):
    xs, ws, has_bias, *args = case
    x, w = _p(*xs), _p(*ws)
    b = _p(ws[1] * args[3]) if has_bias else None
    assert gradcheck(lambda x, w, b: myops.conv_transpose2d(x, w, b, *args), (x, w, b))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gradcheck_gelu(approximate):
    assert gradcheck(lambda x: myops.gelu(x, approximate), (_p(2, 3, 4, 5) * 2,))


@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)])
def test_gradcheck_group_norm(affine):
    x = _p(2, 6, 3, 4)
    w = _p(6) if affine[0] else None
    b = _p(6) if affine[1] else None
    assert gradcheck(lambda x, w, b: myops.group_norm(x, 3, w, b, 1e-5), (x, w, b))


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gradcheck_fused(case, approximate):
    xs, ws, has_bias, *args = case
    c_out = ws[1] * args[3]
    x, w, gw, gb = _p(*xs), _p(*ws), _p(c_out), _p(c_out)
    b = _p(c_out) if has_bias else None
    groups = 2 if c_out % 2 == 0 else 1

    def fn(x, w, b, gw, gb):
        return myops.conv_transpose2d_gelu_group_norm(
            x, w, b, *args, approximate=approximate, num_groups=groups, gn_weight=gw, gn_bias=gb)

    assert gradcheck(fn, (x, w, b, gw, gb))


@pytest.mark.parametrize("case", CONV_CASES)
def test_gradcheck_fused_group_stats(case):
    # all three outputs (the activation, mean and rstd per group) carry gradients; then the
    # normalisation written in torch ops on top reproduces the fused op's gradients
    xs, ws, has_bias, *args = case
    c_out = ws[1] * args[3]
    x, w, gw, gb = _p(*xs), _p(*ws), _p(c_out), _p(c_out)
    b = _p(c_out) if has_bias else None
    groups = 2 if c_out % 2 == 0 else 1

    def stats(x, w, b):
        return myops.conv_transpose2d_gelu_group_stats(x, w, b, *args, approximate="tanh", num_groups=groups, eps=1e-3)

    assert gradcheck(stats, (x, w, b))
    assert gradcheck(lambda x, w, b, gw, gb: myops.group_norm_with_stats(*stats(x, w, b), gw, gb), (x, w, b, gw, gb))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("form", ["fused", "group_stats"])
def test_fused_gradients_equal_pytorch_modules(device, dtype, form):
    # form "group_stats": the op that stops at GroupNorm's statistics + group_norm_with_stats (what
    # the compile pass emits before a pointwise consumer)
    conv = torch.nn.ConvTranspose2d(8, 6, (3, 2), stride=2, padding=1, output_padding=1, groups=2).to(device, dtype)
    gn = torch.nn.GroupNorm(3, 6).to(device, dtype)
    x = torch.randn(2, 8, 5, 6, device=device, dtype=dtype, requires_grad=True)
    grad_out = torch.randn(2, 6, 10, 11, device=device, dtype=dtype)

    def grads(fn):
        for t in (x, conv.weight, conv.bias, gn.weight, gn.bias):
            t.grad = None
        fn().backward(grad_out)
        return [t.grad.clone() for t in (x, conv.weight, conv.bias, gn.weight, gn.bias)]

    ref = grads(lambda: gn(F.gelu(conv(x), approximate="tanh")))
    if form == "fused":
        ours = grads(lambda: myops.conv_transpose2d_gelu_group_norm(
            x, conv.weight, conv.bias, 2, 1, 1, 2, 1, approximate="tanh", num_groups=3,
            gn_weight=gn.weight, gn_bias=gn.bias, eps=gn.eps))
    else:
        ours = grads(lambda: myops.group_norm_with_stats(*myops.conv_transpose2d_gelu_group_stats(
            x, conv.weight, conv.bias, 2, 1, 1, 2, 1, approximate="tanh", num_groups=3, eps=gn.eps),
            gn.weight, gn.bias))
    tol = 5e-2 if dtype == torch.bfloat16 else max(tolerance(dtype, device) * 10, 1e-4)
    for name, a, b in zip(["input", "weight", "bias", "gn_weight", "gn_bias"], ours, ref):
        scale = b.abs().max().item()
        torch.testing.assert_close(a.float(), b.float(), atol=tol * scale, rtol=tol, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("device", DEVICES)
def test_python_api_records_autograd_only_where_needed(device):
    # Calls that need no gradient run below the ops' autograd kernel (host time); the others must
    # still be recorded: one parameter requiring grad is enough.
    x = torch.randn(2, 4, 5, 5, device=device, dtype=torch.float64)
    w = torch.randn(4, 8, 3, 3, device=device, dtype=torch.float64)
    calls = {
        "conv_transpose2d": lambda x, w: myops.conv_transpose2d(x, w, None, 2, 1),
        "gelu": lambda x, w: myops.gelu(x * w.sum(), "tanh"),
        "group_norm": lambda x, w: myops.group_norm(x, 2, w[:, 0, 0, 0]),
        "fused": lambda x, w: myops.conv_transpose2d_gelu_group_norm(x, w, None, num_groups=4),
    }
    for name, call in calls.items():
        plain = call(x, w)
        assert not plain.requires_grad, name
        w_grad = w.clone().requires_grad_()
        tracked = call(x, w_grad)
        assert tracked.requires_grad and tracked.grad_fn is not None, name
        # (in training the fused chain keeps its conv output, and CPU group_norm runs aten's kernel,
        # which keeps its statistics: other routes, not the same bits)
        exact = {} if name in ("fused", "group_norm") else dict(rtol=0, atol=0)
        torch.testing.assert_close(tracked.detach(), plain, **exact, msg=name)
        with torch.no_grad():
            assert not call(x, w_grad).requires_grad, name
        (g,) = torch.autograd.grad(tracked.sum(), w_grad)
        assert torch.isfinite(g).all() and g.abs().sum() > 0, name


def test_every_op_has_the_cpp_autograd_kernel():
    # csrc/autograd_entry.cpp lists the ops it registers for; an op missing from that list would
    # still be correct (register_autograd's Python kernel), but pay the host time it removes.
    # (myops::_explain computes nothing: no autograd kernel; composite ops such as
    # conv_transpose1d decompose into ops that have one)
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("myops::") and n != "myops::_explain"
             and not torch._C._dispatch_has_kernel_for_dispatch_key(n, "CompositeImplicitAutograd")]
    assert len(names) >= 8
    for name in names:
        for key in ("AutogradCPU", "AutogradCUDA"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(name, key), (name, key)


@pytest.mark.parametrize("device", DEVICES)
def test_direct_op_calls_record_autograd_only_where_needed(device):
    # The C++ Autograd kernel: no grad needed -> below autograd; else the Python formula, keyword-only
    # arguments (gelu's approximate) and several returns (group_stats) included.
    x = torch.randn(2, 4, 5, 5, device=device, dtype=torch.float64)
    w = torch.randn(4, 4, 3, 3, device=device, dtype=torch.float64)
    gelu = torch.ops.myops.gelu
    stats = torch.ops.myops.conv_transpose2d_gelu_group_stats
    conv_args = ([1, 1], [0, 0], [0, 0], 1, [1, 1])
    assert gelu(x, approximate="tanh").grad_fn is None
    assert all(t.grad_fn is None for t in stats(x, w, None, *conv_args, "none", 2, 1e-5))
    xg = x.clone().requires_grad_()
    y = gelu(xg, approximate="tanh")
    (g,) = torch.autograd.grad(y.sum(), xg)
    xr = x.clone().requires_grad_()
    (gr,) = torch.autograd.grad(torch.nn.functional.gelu(xr, approximate="tanh").sum(), xr)
    torch.testing.assert_close(g, gr)
    outs = stats(x, w.clone().requires_grad_(), None, *conv_args, "none", 2, 1e-5)
    assert len(outs) == 3 and all(t.grad_fn is not None for t in outs)
    with torch.no_grad():
        assert gelu(xg).grad_fn is None
    with pytest.raises(RuntimeError, match="myops::gelu: argument 'approximate'"):
        gelu(xg, approximate="bad")


def _double_backward_cases(device):
    """(name, fn, tensor inputs) covering every op with an autograd formula; small float64 shapes."""
    ops = torch.ops.myops
    p = lambda *shape: _p(*shape, device=device)  # noqa: E731
    conv = ([2, 1], [0, 1], [1, 0], 1, [1, 1])
    x, w, b = p(2, 3, 3, 3), p(3, 4, 2, 3), p(4)
    gw, gb, bw, bb = p(4), p(4), p(4), p(4)
    mean, var = p(4), (torch.rand(4, device=device, dtype=torch.float64) + 0.5).requires_grad_()
    y = p(2, 4, 5, 6)
    pool = ([2, 2], [2, 1], [1, 0], [1, 2])
    return [
        ("conv_transpose2d", lambda x, w, b: ops.conv_transpose2d(x, w, b, *conv), (x, w, b)),
        ("conv_transpose1d", lambda x, w, b: myops.conv_transpose1d(x, w, b, 2, 1, 1), (p(2, 3, 5), p(3, 4, 3), b)),
        ("gelu", lambda y: ops.gelu(y, approximate="tanh"), (y,)),
        ("group_norm", lambda y, gw, gb: ops.group_norm(y, 2, gw, gb, 1e-5), (y, gw, gb)),
        ("conv_transpose2d_gelu_group_norm", lambda x, w, b, gw, gb: ops.conv_transpose2d_gelu_group_norm(
            x, w, b, *conv, "none", 2, gw, gb, 1e-5), (x, w, b, gw, gb)),
        ("conv_transpose2d_gelu_group_stats", lambda x, w, b: ops.conv_transpose2d_gelu_group_stats(
            x, w, b, *conv, "tanh", 2, 1e-3), (x, w, b)),
        ("conv_transpose2d_channel_stats", lambda x, w, b: ops.conv_transpose2d_channel_stats(x, w, b, *conv),
         (x, w, b)),
        ("batch_norm_tanh_max_pool2d_group_norm", lambda y, mean, var, bw, bb, gw, gb:
            ops.batch_norm_tanh_max_pool2d_group_norm(y, mean, var, bw, bb, 1e-5, *pool, 2, gw, gb, 1e-5),
         (y, mean, var, bw, bb, gw, gb)),
        ("conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm (training)", lambda x, w, b, bw, bb, gw, gb:
            ops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
                x, w, b, *conv, None, None, bw, bb, True, 1e-5, *pool, 2, gw, gb, 1e-5), (x, w, b, bw, bb, gw, gb)),
        ("conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm (eval)", lambda x, w, mean, var:
            ops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
                x, w, None, *conv, mean, var, None, None, False, 1e-5, *pool, 2, None, None, 1e-5), (x, w, mean, var)),
    ] + [(f"conv_transpose2d_act_stats ({act}, {stats})", lambda x, w, b, act=act, stats=stats:
          ops.conv_transpose2d_act_stats(x, w, b, *conv, act, 0.2, "none", stats, 2), (x, w, b))
         for act, stats in (("gelu", "group"), ("silu", "channel"), ("leaky_relu", "group"), ("relu", "none"),
                            ("tanh", "channel"), ("sigmoid", "group"))]


@pytest.mark.parametrize("device", DEVICES)
def test_gradgradcheck_every_op(device):
    # double backward (gradient penalties: WGAN-GP, R1) through every op's autograd formula
    torch.manual_seed(0)
    for name, fn, inputs in _double_backward_cases(device):
        assert torch.autograd.gradgradcheck(fn, inputs, fast_mode=True), name


def test_conv_weight_gradient_layout_ignores_size_one_strides():
    """A [N, C, 1, 1] latent has two valid stride sets; torch.compile may hand the kernel one and
    its layout prediction the other. The formula's conv backward predicts the same gradient
    layout from both (the predicted and the real layout then agree)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from myops._autograd import _conv_grads
    conv_args = ((1, 1), (0, 0), (0, 0), 1, (1, 1))
    with FakeTensorMode():
        weight = torch.empty(16, 32, 4, 4)
        grad = torch.empty(8, 32, 4, 4).contiguous(memory_format=torch.channels_last)
        latents = [torch.empty(8, 16, 1, 1), torch.empty_strided((8, 16, 1, 1), (16, 1, 16, 16))]
        layouts = {_conv_grads(grad, z, weight, None, conv_args, [True, True, False])[1].stride() for z in latents}
    assert len(layouts) == 1, layouts
