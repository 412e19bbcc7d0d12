"""The conv + normalisation + activation family (myops.conv_transpose2d_norm_act over the op
conv_transpose2d_act_stats): every (norm, activation, order) against PyTorch's own functional ops
in float64, the running buffers as F.batch_norm / F.instance_norm update them, gradients, bad input."""
import itertools
import random
import zlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import myops
from conftest import DEVICES, HAS_CUDA, NO_CUDA
from reference import assert_matches, f64, tolerance

NORMS = ("none", "batch_norm", "instance_norm", "group_norm")
ACTIVATIONS = ("none", "gelu", "gelu_tanh", "silu", "relu", "leaky_relu", "tanh", "sigmoid")
ORDERS = ("norm_act", "act_norm")
COMBOS = list(itertools.product(NORMS, ACTIVATIONS, ORDERS))


def _activation_kwargs(name):
    if name == "leaky_relu_negative":  # (a slope < 0: its backward needs the conv output, recomputed)
        return dict(activation="leaky_relu", negative_slope=-0.3)
    if name == "gelu_tanh":
        return dict(activation="gelu", approximate="tanh")
    if name == "leaky_relu":
        return dict(activation="leaky_relu", negative_slope=0.2)
    return dict(activation=name)


def _torch_activation(kw):
    return myops.norm_act.activation_fn(kw["activation"], kw.get("negative_slope", 0.01), kw.get("approximate", "none"))


def _reference(x, w, b, conv, norm, kw, order, p, buffers, stored=torch.float64):
    """The chain in float64 with torch.nn.functional (buffers: float64 copies, updated in place);
    the normalisation's input rounded to `stored` first, as a 16-bit chain stores it in eager
    PyTorch and in the op (a normalisation divides that rounding by the standard deviation)."""
    act = _torch_activation(kw)
    y = F.conv_transpose2d(x, w, b, *conv)
    if order == "act_norm":
        y = act(y)
    y = y.to(stored).double()
    if norm == "batch_norm":
        y = F.batch_norm(y, buffers["running_mean"], buffers["running_var"], p["norm_weight"], p["norm_bias"],
                         p["training"], p["momentum"], p["eps"])
    elif norm == "instance_norm":
        y = F.instance_norm(y, buffers["running_mean"], buffers["running_var"], p["norm_weight"], p["norm_bias"],
                            p["training"], p["momentum"], p["eps"])
    elif norm == "group_norm":
        y = F.group_norm(y, p["num_groups"], p["norm_weight"], p["norm_bias"], p["eps"])
    return y if order == "act_norm" else act(y)


def _random_case(rng, norm, device, dtype):
    groups = rng.choice([1, 2])
    c_in, c_out = groups * rng.choice([1, 2, 3]), groups * rng.choice([2, 4])
    k, s = rng.choice([(3, 1), (4, 2), (3, 2), (2, 2)])
    padding = rng.choice([0, 1]) if k > 2 else 0
    output_padding = 1 if s == 2 and k == 3 and rng.random() < 0.5 else 0
    x = torch.randn(rng.choice([1, 2, 3]), c_in, rng.choice([2, 3, 5]), rng.choice([3, 4]), device=device)
    w = torch.randn(c_in, c_out // groups, k, k, device=device) / k
    b = torch.randn(c_out, device=device) if rng.random() < 0.7 else None
    training = rng.random() < 0.7
    p = dict(norm_weight=None, norm_bias=None, running_mean=None, running_var=None, training=training,
             momentum=rng.choice([0.1, 0.3]), eps=rng.choice([1e-5, 1e-3]), num_groups=None)
    if norm != "none" and rng.random() < 0.7:
        p["norm_weight"] = torch.rand(c_out, device=device) + 0.5
        p["norm_bias"] = torch.randn(c_out, device=device)
    if norm == "batch_norm" or (norm == "instance_norm" and (not training or rng.random() < 0.5)):
        p["running_mean"] = torch.randn(c_out, device=device) * 0.1
        p["running_var"] = torch.rand(c_out, device=device) + 0.5
    if norm == "instance_norm" and p["running_mean"] is None:
        p["training"] = True  # use_input_stats: without running statistics the batch's normalise
    if norm == "group_norm":
        p["num_groups"] = rng.choice([g for g in (1, 2, c_out) if c_out % g == 0])
    conv = ([s, s], [padding, padding], [output_padding, output_padding], groups, [1, 1])
    cast = lambda t: None if t is None else t.to(dtype)
    return cast(x), cast(w), cast(b), conv, p


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("norm,activation,order", COMBOS)
def test_matches_torch_functional(device, dtype, norm, activation, order):
    check_combo(device, dtype, norm, activation, order)


def check_combo(device, dtype, norm, activation, order):
    """Two random calls of the chain (the second channels-last) against float64 torch ops."""
    rng = random.Random(zlib.crc32(f"{norm}-{activation}-{order}-{dtype}".encode()))
    kw = _activation_kwargs(activation)
    for trial in range(2):
        x, w, b, conv, p = _random_case(rng, norm, device, dtype)
        if trial == 1:
            x = x.contiguous(memory_format=torch.channels_last)
        buffers = {k: p[k].clone() for k in ("running_mean", "running_var") if p[k] is not None}
        y = myops.conv_transpose2d_norm_act(x, w, b, *conv, norm=norm, order=order, **kw, **p)
        ref_buffers = {k: f64(v) for k, v in buffers.items()}
        ref_buffers.setdefault("running_mean", None)
        ref_buffers.setdefault("running_var", None)
        ref_p = {k: f64(v) if isinstance(v, torch.Tensor) else v for k, v in p.items()}
        ref = _reference(f64(x), f64(w), f64(b), conv, norm, kw, order, ref_p, ref_buffers,
                         dtype if dtype in (torch.float16, torch.bfloat16) else torch.float64)
        assert y.dtype == dtype and y.shape == ref.shape
        if trial == 1 and x.dim() == 4:
            assert y.is_contiguous(memory_format=torch.channels_last) or y.is_contiguous()
        # 16-bit: the conv output is rounded before the statistics in both; a normalised value
        # moves by the rounding of its input over the standard deviation
        tol = {torch.bfloat16: 6e-2, torch.float16: 1e-2}.get(dtype, tolerance(dtype, device) * 10)
        assert_matches(y, ref, tol)
        for k in ("running_mean", "running_var"):
            if p[k] is not None:
                assert_matches(p[k], ref_buffers[k], 1e-5 if dtype in (torch.float32, torch.float64) else 2e-2)


def test_batch_norm_module_semantics_num_batches_and_cumulative_momentum():
    torch.manual_seed(1)
    conv, bn = nn.ConvTranspose2d(3, 4, 4, 2, 1, bias=False).double(), nn.BatchNorm2d(4, momentum=None).double()
    mine = nn.BatchNorm2d(4, momentum=None).double()
    for step in range(3):
        x = torch.randn(2, 3, 3, 3, dtype=torch.float64)
        ref = F.relu(bn(conv(x)))
        y = myops.conv_transpose2d_norm_act(
            x, conv.weight, None, 2, 1, norm="batch_norm", activation="relu", norm_weight=mine.weight,
            norm_bias=mine.bias, running_mean=mine.running_mean, running_var=mine.running_var, training=True,
            momentum=None, eps=mine.eps, num_batches_tracked=mine.num_batches_tracked)
        torch.testing.assert_close(y, ref)
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            torch.testing.assert_close(getattr(mine, name), getattr(bn, name))


def test_return_conv_gives_the_conv_output():
    x, w, b = torch.randn(2, 4, 5, 5), torch.randn(4, 6, 4, 4), torch.randn(6)
    y, conv = myops.conv_transpose2d_norm_act(x, w, b, 2, 1, norm="group_norm", num_groups=3, activation="silu",
                                              return_conv=True)
    torch.testing.assert_close(conv, F.conv_transpose2d(x, w, b, 2, 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, F.silu(F.group_norm(conv, 3)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("norm,activation,order", [c for c in COMBOS if c[1] != "gelu_tanh" or c[2] == "act_norm"] +
                         [("group_norm", "leaky_relu_negative", "act_norm")])
def test_gradcheck_and_gradgradcheck(norm, activation, order, device):
    rng = random.Random(7)
    x, w, b, conv, p = _random_case(rng, norm, device, torch.float64)
    b = torch.randn(w.shape[1] * conv[3], dtype=torch.float64, device=device)
    p = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in p.items()}
    if norm == "group_norm":
        p["num_groups"] = 1
    p["running_mean"] = None if p["training"] or norm == "group_norm" else p["running_mean"]
    p["running_var"] = None if p["training"] or norm == "group_norm" else p["running_var"]
    if p["running_mean"] is None and norm in ("batch_norm", "instance_norm"):
        p["training"] = True
    weight, bias = p.pop("norm_weight"), p.pop("norm_bias")
    kw = _activation_kwargs(activation)
    tensors = [t.requires_grad_() for t in (x, w, b) + ((weight, bias) if weight is not None else ())]

    def fn(x, w, b, *affine):
        nw, nb = affine if affine else (None, None)
        return myops.conv_transpose2d_norm_act(x, w, b, *conv, norm=norm, order=order, norm_weight=nw, norm_bias=nb,
                                               **kw, **p)
    # relu / leaky_relu kinks: the random values keep clear of 0 at this scale
    assert torch.autograd.gradcheck(fn, tensors, eps=1e-6, atol=1e-5)
    # gradient penalties (WGAN-GP, R1) differentiate the backward itself
    assert torch.autograd.gradgradcheck(fn, tensors, eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("norm", ["group_norm", "instance_norm"])
def test_double_backward_with_a_norm_bias_but_no_weight(device, norm):
    # aten's group-norm backward fails on a bias without a weight; a gradient penalty must not
    torch.manual_seed(0)
    d = torch.float64
    x = torch.randn(2, 3, 4, 4, dtype=d, device=device, requires_grad=True)
    w = torch.randn(3, 4, 3, 3, dtype=d, device=device, requires_grad=True)
    bias = torch.randn(4, dtype=d, device=device, requires_grad=True)

    def fn(x, w, bias):
        return myops.conv_transpose2d_norm_act(x, w, None, 2, 1, norm=norm, num_groups=2, norm_bias=bias,
                                               activation="silu")
    assert torch.autograd.gradgradcheck(fn, (x, w, bias), fast_mode=True)


@pytest.mark.parametrize("device", DEVICES)
def test_act_stats_op_statistics(device):
    x, w, b = torch.randn(3, 4, 5, 6, device=device), torch.randn(4, 6, 3, 3, device=device), torch.randn(6, device=device)
    out, mean, var = myops.conv_transpose2d_act_stats(x, w, b, 2, 1, activation="silu", stats="group", num_groups=3)
    ref = F.silu(F.conv_transpose2d(f64(x), f64(w), f64(b), 2, 1))
    assert_matches(out, ref, tolerance(torch.float32, device))
    grouped = f64(out).reshape(3, 3, -1)
    torch.testing.assert_close(mean, grouped.mean(-1).float().to(device), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(var, grouped.var(-1, unbiased=False).float().to(device), atol=1e-5, rtol=1e-5)
    out, mean, var = myops.conv_transpose2d_act_stats(x, w, None, 2, 1, activation="relu", stats="channel")
    assert mean.shape == var.shape == (6,)
    torch.testing.assert_close(mean.cpu(), f64(out).mean((0, 2, 3)).float(), atol=1e-5, rtol=1e-5)
    _, mean, var = myops.conv_transpose2d_act_stats(x, w, None, 2, 1)
    assert mean.numel() == var.numel() == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_act_stats_op_statistics_channels_last(device, dtype):
    # a channels-last output of several row blocks per sample (23 x 23 pixels), statistics per
    # (sample, group of 2 channels), per (sample, channel) and per channel, of the output as stored
    x = torch.randn(2, 4, 12, 12, device=device).to(dtype).contiguous(memory_format=torch.channels_last)
    w = torch.randn(4, 6, 3, 3, device=device).to(dtype)
    for stats, groups in (("group", 3), ("group", 6), ("channel", 1)):
        out, mean, var = myops.conv_transpose2d_act_stats(x, w, None, 2, 1, activation="gelu", stats=stats,
                                                          num_groups=groups)
        assert out.is_contiguous(memory_format=torch.channels_last)
        if stats == "group":
            ref_var, ref_mean = torch.var_mean(f64(out).reshape(2, groups, -1), dim=-1, correction=0)
        else:
            ref_var, ref_mean = torch.var_mean(f64(out), dim=(0, 2, 3), correction=0)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(f64(mean), ref_mean, atol=tol, rtol=tol)
        torch.testing.assert_close(f64(var), ref_var, atol=tol, rtol=tol)


@pytest.mark.parametrize("kwargs,match", [
    (dict(norm="layer_norm"), "argument 'norm'"),
    (dict(activation="swish"), "argument 'activation'"),
    (dict(order="act_then_norm"), "argument 'order'"),
    (dict(activation="leaky_relu", negative_slope=float("nan")), "argument 'negative_slope'"),
    (dict(activation="leaky_relu", negative_slope=float("inf")), "argument 'negative_slope'"),
    (dict(norm="group_norm"), "argument 'num_groups'"),
    (dict(norm="batch_norm", training=False), "argument 'running_mean'"),
    (dict(activation="relu", order="act_norm", return_conv=True), "argument 'return_conv'"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    x, w = torch.randn(2, 4, 3, 3), torch.randn(4, 6, 3, 3)
    with pytest.raises(ValueError, match=match):
        myops.conv_transpose2d_norm_act(x, w, **kwargs)


@pytest.mark.parametrize("kwargs,match", [
    (dict(activation="swish"), "argument 'activation'"),
    (dict(stats="batch"), "argument 'stats'"),
    (dict(stats="group", num_groups=4), "argument 'num_groups'"),
    (dict(stats="group", num_groups=0), "argument 'num_groups'"),
    (dict(approximate="fast"), "argument 'approximate'"),
    (dict(activation="leaky_relu", negative_slope=float("nan")), "argument 'negative_slope'"),
])
@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_act_stats_bad_arguments(device, kwargs, match):
    x, w = torch.randn(2, 4, 3, 3, device=device), torch.randn(4, 6, 3, 3, device=device)
    with pytest.raises(RuntimeError, match=f"myops::conv_transpose2d_act_stats: {match}"):
        myops.conv_transpose2d_act_stats(x, w, **kwargs)


@pytest.mark.parametrize("kwargs,match", [
    (dict(norm="batch_norm", running_mean=torch.zeros(5), running_var=torch.ones(5), training=False),
     "argument 'running_mean'"),
    (dict(norm="batch_norm", running_mean=torch.zeros(6), running_var=torch.ones(6, dtype=torch.int64),
          training=False), "argument 'running_var'"),
    (dict(norm="instance_norm", norm_weight=torch.ones(4)), "argument 'norm_weight'"),
    (dict(norm="group_norm", num_groups=3, norm_bias=torch.ones(6, 1)), "argument 'norm_bias'"),
])
def test_bad_statistics_and_affine_tensors(kwargs, match):
    x, w = torch.randn(2, 4, 3, 3), torch.randn(4, 6, 3, 3)
    with pytest.raises(ValueError, match=match):
        myops.conv_transpose2d_norm_act(x, w, **kwargs)


def test_refuses_what_torch_refuses_in_training():
    w = torch.randn(4, 6, 1, 1)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        myops.conv_transpose2d_norm_act(torch.randn(1, 4, 1, 1), w, norm="batch_norm", training=True)
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        myops.conv_transpose2d_norm_act(torch.randn(3, 4, 1, 1), w, norm="instance_norm", training=True)


@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation,stats", [("none", "channel"), ("none", "group"), ("gelu", "group"),
                                              ("relu", "channel"), ("silu", "group"), ("none", "none")])
def test_cuda_matches_cpu(dtype, activation, stats):
    x, w, b = torch.randn(4, 32, 9, 9), torch.randn(32, 64, 4, 4) / 8, torch.randn(64)
    cpu = myops.conv_transpose2d_act_stats(*(t.to(dtype) for t in (x, w, b)), 2, 1, activation=activation,
                                           stats=stats, num_groups=8)
    gpu = myops.conv_transpose2d_act_stats(*(t.to(dtype).cuda() for t in (x, w, b)), 2, 1, activation=activation,
                                           stats=stats, num_groups=8)
    tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
    for c, g in zip(cpu, gpu):
        if c.numel():
            assert_matches(g, c, tol)


@pytest.mark.parametrize("norm,kw", [("group_norm", dict(num_groups=4)), ("batch_norm", {}), ("instance_norm", {})])
def test_autocast_follows_eager(norm, kw):
    # under CPU autocast (bfloat16): the conv in bfloat16, each norm's result dtype as eager's
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 8, 5, 5), torch.randn(8, 8, 4, 4) / 8, torch.randn(8)
    g, beta = torch.rand(8) + 0.5, torch.randn(8)
    with torch.autocast("cpu", torch.bfloat16):
        y = myops.conv_transpose2d_norm_act(x, w, b, 2, 1, norm=norm, activation="silu", norm_weight=g,
                                            norm_bias=beta, **kw)
        c = F.conv_transpose2d(x, w, b, 2, 1)
        ref = {"group_norm": lambda: F.group_norm(c, 4, g, beta),
               "batch_norm": lambda: F.batch_norm(c, None, None, g, beta, True),
               "instance_norm": lambda: F.instance_norm(c, weight=g, bias=beta)}[norm]()
        ref = F.silu(ref)
    assert y.dtype == ref.dtype
    torch.testing.assert_close(y.float(), ref.float(), atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_normalize_act_op_matches_torch_ops(device, dtype):
    # the eager one-pass normalise + activation: every activation, NCHW / channels-last / 3-D,
    # planes and channel rows that are and are not whole 16-byte vectors, an unaligned view
    torch.manual_seed(3)
    ct = torch.float64 if dtype == torch.float64 else torch.float32
    shapes = [((2, 8, 4, 4), False), ((3, 5, 3, 7), False), ((2, 8, 3, 5), True), ((2, 6, 5, 3), True),
              ((3, 4, 9), False), ((2, 16, 1, 1), False)]
    for activation in ("none", "gelu", "gelu_tanh", "silu", "relu", "leaky_relu", "tanh", "sigmoid"):
        kw = _activation_kwargs(activation)
        for shape, channels_last in shapes:
            x = torch.randn(*shape, device=device).to(dtype)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            n, c = shape[0], shape[1]
            mean, shift = torch.randn(n, c, device=device, dtype=ct), torch.randn(n, c, device=device, dtype=ct)
            scale = torch.rand(n, c, device=device, dtype=ct) + 0.5
            y = torch.ops.myops.normalize_act(x, mean, scale, shift, kw["activation"], kw.get("negative_slope", 0.01),
                                              kw.get("approximate", "none"))
            spatial = [1] * (x.dim() - 2)
            z = (f64(x) - f64(mean).reshape(n, c, *spatial)) * f64(scale).reshape(n, c, *spatial)
            ref = _torch_activation(kw)(z + f64(shift).reshape(n, c, *spatial))
            assert y.dtype == dtype and y.is_contiguous(memory_format=torch.channels_last if channels_last
                                                        else torch.contiguous_format)
            assert_matches(y, ref, {torch.bfloat16: 1e-2, torch.float16: 2e-3}.get(dtype, 2e-6 if dtype == torch.float32
                                                                                     else 1e-12))
    # a view one element past an aligned start (no 16-byte vectors) and NaN, propagated as torch does
    base = torch.randn(2 * 4 * 8 + 1, device=device).to(dtype)
    x = base[1:].view(2, 4, 8)
    x[0, 1, 3] = float("nan")
    ones = torch.ones(2, 4, device=device, dtype=ct)
    y = torch.ops.myops.normalize_act(x, ones * 0, ones, ones * 0, "relu", 0.01, "none")
    assert torch.isnan(y[0, 1, 3]) and torch.equal(y.isnan(), x.isnan())
    torch.testing.assert_close(y[~y.isnan()], torch.relu(x)[~y.isnan()])


def test_normalize_act_bad_arguments():
    x, p = torch.randn(2, 4, 3, 3), torch.ones(2, 4)
    op = torch.ops.myops.normalize_act
    with pytest.raises(RuntimeError, match="myops::normalize_act: argument 'scale' must have shape"):
        op(x, p, torch.ones(4), p, "relu", 0.01, "none")
    with pytest.raises(RuntimeError, match="myops::normalize_act: argument 'mean' must have dtype"):
        op(x, p.double(), p, p, "relu", 0.01, "none")
    with pytest.raises(RuntimeError, match="myops::normalize_act: argument 'activation'"):
        op(x, p, p, p, "swish", 0.01, "none")
    with pytest.raises(RuntimeError, match="myops::normalize_act: argument 'negative_slope'"):
        op(x, p, p, p, "leaky_relu", float("inf"), "none")
    with pytest.raises(RuntimeError, match="myops::normalize_act: argument 'input'"):
        op(torch.randn(4), p, p, p, "relu", 0.01, "none")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("route", ["auto", "never"])
@pytest.mark.parametrize("norm,kw", [("batch_norm", {}), ("group_norm", dict(num_groups=3)), ("instance_norm", {})])
def test_eager_training_backward_takes_the_fused_norm_backward(norm, kw, route, device, monkeypatch):
    # eager float32 training (option aten_training): the normalisation's backward is aten's fused
    # one with the statistics' part included, or with 'never' normalize_act's formula plus the
    # statistics folded into the conv's gradient; gradients as PyTorch's layers' either way
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # (the reference's conv: exact float32)
    torch.manual_seed(0)
    x = torch.randn(2, 4, 5, 5, device=device, requires_grad=True)
    conv = nn.ConvTranspose2d(4, 6, 4, 2, 1)
    layer = {"batch_norm": nn.BatchNorm2d(6), "group_norm": nn.GroupNorm(3, 6),
             "instance_norm": nn.InstanceNorm2d(6, affine=True)}[norm]
    conv, layer = conv.to(device), layer.to(device)
    w = torch.rand(6) + 0.5
    with torch.no_grad():
        layer.weight.copy_(w)
    fused = myops.nn.ConvTranspose2dNormAct.from_modules(conv, layer, nn.SiLU())
    x_ref = x.detach().clone().requires_grad_()
    ref_layers = [p.detach().clone().requires_grad_() for p in (conv.weight, conv.bias, layer.weight, layer.bias)]
    from torch.profiler import profile
    with profile() as prof, myops.backends.options(aten_training=route):
        fused(x).square().sum().backward()
    names = {e.name for e in prof.events()}
    fused_backward = f"aten::native_{'batch' if norm == 'batch_norm' else 'group'}_norm_backward" in names
    assert fused_backward == (route == "auto"), names
    assert any("normalize_act_default" in n for n in names) == (route == "never")
    cw, cb, nw, nb = ref_layers
    y = F.conv_transpose2d(x_ref, cw, cb, 2, 1)
    y = (F.batch_norm(y, None, None, nw, nb, True) if norm == "batch_norm" else
         F.group_norm(y, kw.get("num_groups", 6), nw, nb))
    F.silu(y).square().sum().backward()
    for got, want in zip((x.grad, conv.weight.grad, conv.bias.grad, layer.weight.grad, layer.bias.grad),
                         (x_ref.grad, cw.grad, cb.grad, nw.grad, nb.grad)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("activation,order,recompute,one_node", [
    ("relu", "norm_act", False, True), ("tanh", "act_norm", False, True), ("silu", "act_norm", False, True),
    ("gelu", "act_norm", True, False)])
def test_eager_training_chain_is_one_autograd_node(activation, order, recompute, one_node):
    # eager training with aten's fused norm backward: the conv and what follows it are one node
    # (the conv op's own formula a node of its own costs host time on small layers), except in the
    # low-memory form of a chain whose activation before the norm needs its input (the op's formula
    # recomputes the conv there)
    x, w = torch.randn(2, 4, 5, 5, requires_grad=True), torch.randn(4, 6, 4, 4, requires_grad=True)
    with myops.backends.options(recompute_conv=recompute):
        y = myops.conv_transpose2d_norm_act(x, w, None, 2, 1, norm="batch_norm", activation=activation, order=order)
    assert (type(y.grad_fn).__name__ == "ConvNormActOfBatchStatsBackward") == one_node, y.grad_fn
    if one_node:
        assert {type(f).__name__ for f, _ in y.grad_fn.next_functions if f is not None} == {"AccumulateGrad"}


@pytest.mark.parametrize("activation,order", [("relu", "norm_act"), ("gelu", "act_norm"), ("silu", "norm_act")])
def test_one_node_backward_releases_its_intermediates_and_a_retained_graph_recomputes_them(activation, order):
    # the conv output (and the activation's before the norm) leave the node during its backward,
    # as eager PyTorch's nodes free theirs; backward through the retained graph again gives the same
    torch.manual_seed(0)
    x, w = torch.randn(2, 4, 5, 5, requires_grad=True), torch.randn(4, 6, 4, 4, requires_grad=True)
    b, nw = torch.randn(6, requires_grad=True), (torch.rand(6) + 0.5).requires_grad_()
    y = myops.conv_transpose2d_norm_act(x, w, b, 2, 1, norm="group_norm", num_groups=3, norm_weight=nw,
                                        activation=activation, order=order)
    assert type(y.grad_fn).__name__ == "ConvNormActOfBatchStatsBackward" and y.grad_fn.intermediates is not None
    g = torch.randn_like(y)
    first = torch.autograd.grad(y, (x, w, b, nw), g, retain_graph=True)
    assert y.grad_fn.intermediates is None
    second = torch.autograd.grad(y, (x, w, b, nw), g)
    act = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[activation]
    xr, wr, br, nwr = (t.detach().double().requires_grad_() for t in (x, w, b, nw))
    ref = F.conv_transpose2d(xr, wr, br, 2, 1)
    ref = F.group_norm(act(ref), 3, nwr) if order == "act_norm" else act(F.group_norm(ref, 3, nwr))
    want = torch.autograd.grad(ref, (xr, wr, br, nwr), g.double())
    for got in (first, second):
        for a, e in zip(got, want, strict=True):
            torch.testing.assert_close(a, e.float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_bad_approximate_is_the_conv_ops_error_with_or_without_a_gradient(requires_grad):
    # the eager training path (one autograd node) checks the call's arguments where inference does
    x = torch.randn(2, 4, 5, 5, requires_grad=requires_grad)
    with pytest.raises(RuntimeError, match="myops::conv_transpose2d_act_stats: argument 'approximate'"):
        myops.conv_transpose2d_norm_act(x, torch.randn(4, 6, 3, 3), None, 2, 1, norm="batch_norm", activation="gelu",
                                        approximate="fast")


@pytest.mark.parametrize("norm,kw", [("batch_norm", {}), ("group_norm", dict(num_groups=3)), ("instance_norm", {})])
def test_eager_training_bias_without_weight(norm, kw):
    # a norm bias without a weight (F.group_norm's own backward cannot take that one): its gradient
    # and the input's as with a weight of ones
    torch.manual_seed(0)
    x, w = torch.randn(2, 4, 5, 5, requires_grad=True), torch.randn(4, 6, 4, 4)
    b = torch.randn(6, requires_grad=True)
    y = myops.conv_transpose2d_norm_act(x, w, None, 2, 1, norm=norm, activation="relu", norm_bias=b, **kw)
    got = torch.autograd.grad(y.square().sum(), (x, b))
    ref = F.conv_transpose2d(x, w, None, 2, 1)
    ones = torch.ones(6)
    ref = {"batch_norm": lambda: F.batch_norm(ref, None, None, ones, b, True),
           "group_norm": lambda: F.group_norm(ref, 3, ones, b),
           "instance_norm": lambda: F.instance_norm(ref, None, None, ones, b)}[norm]()
    for g, r in zip(got, torch.autograd.grad(F.relu(ref).square().sum(), (x, b))):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)


def test_eager_calls_take_one_pass_and_compiled_ones_torch_ops():
    # eager: one normalize_act call after the conv; traced by torch.compile: the torch ops that
    # Inductor fuses with the consumers (no normalize_act in the graph)
    x, w = torch.randn(2, 4, 5, 5), torch.randn(4, 6, 4, 4)
    gn_w, gn_b = torch.rand(6) + 0.5, torch.randn(6)

    def chain(x):
        return myops.conv_transpose2d_norm_act(x, w, None, 2, 1, norm="group_norm", num_groups=3, activation="silu",
                                               norm_weight=gn_w, norm_bias=gn_b)

    from torch.profiler import profile
    with profile() as prof:
        eager = chain(x)
    names = [e.name for e in prof.events()]
    assert "myops::normalize_act" in names
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(chain, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(eager, F.silu(F.group_norm(F.conv_transpose2d(x, w, None, 2, 1), 3, gn_w, gn_b)),
                               atol=1e-5, rtol=1e-5)
    assert graphs and all("normalize_act" not in str(g.graph) for g in graphs)


def test_traced_tensors_are_not_eager():
    # the compile pass's call runs under AOTAutograd's fake / functional tensors: torch ops there
    from torch._subclasses.fake_tensor import FakeTensorMode
    assert myops.norm_act._eager(torch.randn(2))
    with FakeTensorMode():
        assert not myops.norm_act._eager(torch.randn(2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("activation", ["gelu", "silu", "gelu_seed_api"])
def test_training_saves_the_conv_unless_recompute_is_asked(device, recompute, activation):
    # an act-first chain in training: by default the conv output is saved and backward runs no
    # conv forward; recompute_conv keeps only the activation output and recomputes the conv. The
    # gradients are the same either way, as torch's. gelu_seed_api: the seed chain's Python API
    # (myops.conv_transpose2d_gelu_group_norm, what its drop-in module calls), the same rule.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    x = torch.randn(2, 4, 5, 5, device=device, requires_grad=True)
    w = (torch.randn(4, 6, 3, 3, device=device) / 6).requires_grad_()
    b = torch.randn(6, device=device, requires_grad=True)
    seed_api = activation == "gelu_seed_api"
    activation = "gelu" if seed_api else activation
    with myops.backends.options(recompute_conv=recompute):
        if seed_api:
            y = myops.conv_transpose2d_gelu_group_norm(x, w, b, 2, 1, num_groups=3)
        else:
            y = myops.conv_transpose2d_norm_act(x, w, b, 2, 1, norm="group_norm", num_groups=3,
                                                activation=activation, order="act_norm")
    g = torch.randn_like(y)
    with Ops() as ops:
        gx, gw, gb = torch.autograd.grad(y, (x, w, b), g)
    conv_forwards = ("myops.conv_transpose2d.default", "myops.conv_transpose2d_gelu_group_norm.default")
    assert any(op in conv_forwards for op in ops.seen) == recompute, ops.seen
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = F.group_norm(_torch_activation(_activation_kwargs(activation))(F.conv_transpose2d(x64, w64, b64, 2, 1)), 3)
    for got, want in zip((gx, gw, gb), torch.autograd.grad(ref, (x64, w64, b64), g.double())):
        assert_matches(got, want, tolerance(torch.float32, device) * 10)


def test_sync_batch_norm_outside_a_process_group_is_batch_norm():
    # as nn.SyncBatchNorm: without an initialised process group (or in eval) it normalises as
    # batch_norm does, running buffers included (the cross-rank case: test_distributed.py)
    torch.manual_seed(0)
    x, w = torch.randn(3, 4, 5, 5), torch.randn(4, 6, 3, 3) / 6
    buffers = [(torch.zeros(6), torch.ones(6)) for _ in range(2)]
    ys = [myops.conv_transpose2d_norm_act(x, w, None, 2, 1, norm=norm, activation="relu", running_mean=rm,
                                          running_var=rv, training=True)
          for norm, (rm, rv) in zip(("sync_batch_norm", "batch_norm"), buffers)]
    assert torch.equal(ys[0], ys[1])
    assert all(torch.equal(a, b) for a, b in zip(*buffers))
