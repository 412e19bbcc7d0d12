"""myops.nn: the drop-in modules against the layers they replace (float64 references, gradients,
BatchNorm's buffers) and the module swapper (what it replaces, what it must leave alone)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import myops
from conftest import DEVICES
from reference import assert_matches, tolerance

GeluChain = myops.nn.ConvTranspose2dGELUGroupNorm
BnChain = myops.nn.ConvTranspose2dBatchNormTanhMaxPool2dGroupNorm
GELU_NAME, BN_NAME = "conv_transpose2d_gelu_group_norm", "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm"


def randomise(module: nn.Module) -> nn.Module:
    """Non-trivial affine parameters and running statistics (defaults are ones / zeros)."""
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if t.is_floating_point():
                t.copy_(torch.rand_like(t) + 0.5 if "var" in name or name.endswith("norm.weight")
                        else torch.randn_like(t) * 0.5)
    return module


def unfused(fused: nn.Module) -> nn.Sequential:
    """The same layers run one by one (what the fused module replaces)."""
    return nn.Sequential(*fused.children())


def float64_twin(module: nn.Module) -> nn.Module:
    return copy.deepcopy(module).double().cpu()


GELU_CASES = [
    dict(in_channels=8, out_channels=16, kernel_size=3, num_groups=4),
    dict(in_channels=6, out_channels=8, kernel_size=(2, 3), num_groups=2, stride=2, padding=1, output_padding=1,
         approximate="tanh", bias=False),
    dict(in_channels=8, out_channels=12, kernel_size=3, num_groups=3, groups=2, dilation=2, affine=False),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kwargs", GELU_CASES)
def test_gelu_chain_module_matches_its_layers(device, kwargs):
    fused = randomise(GeluChain(**kwargs, device=device))
    x = torch.randn(2, kwargs["in_channels"], 7, 9, device=device)
    assert_matches(fused(x), unfused(float64_twin(fused))(x.double().cpu()), tolerance(torch.float32, device))


class _Scaled(nn.Module):
    def forward(self, w):
        return 2 * w


@pytest.mark.parametrize("device", DEVICES)
def test_fused_modules_read_parametrized_weights(device):
    # the modules read parameters from the layers' own dicts (fast path); a parametrization moves
    # the weight behind a property, which they must then read as the layers do
    from torch.nn.utils import parametrize
    fused = randomise(GeluChain(**GELU_CASES[0], device=device))
    parametrize.register_parametrization(fused.conv, "weight", _Scaled())
    parametrize.register_parametrization(fused.norm, "weight", _Scaled())
    x = torch.randn(2, GELU_CASES[0]["in_channels"], 7, 9, device=device)
    with torch.no_grad():
        assert_matches(fused(x), unfused(fused)(x), tolerance(torch.float32, device))
    fused_bn, eager_bn = bn_chain_pair(device)
    for conv, bn in ((fused_bn.conv, fused_bn.bn), (eager_bn[0], eager_bn[1])):
        parametrize.register_parametrization(conv, "weight", _Scaled())
        parametrize.register_parametrization(bn, "weight", _Scaled())
    x = torch.randn(3, 8, 6, 7, device=device)
    with torch.no_grad():
        assert_matches(fused_bn(x), eager_bn(x), tolerance(torch.float32, device))
    assert_same_buffers(fused_bn, eager_bn, device)


@pytest.mark.parametrize("device", DEVICES)
def test_gelu_chain_module_gradients_match_its_layers(device):
    fused = randomise(GeluChain(**GELU_CASES[1], device=device))
    twin = float64_twin(fused)
    x = torch.randn(3, 6, 5, 6, device=device, requires_grad=True)
    x64 = x.detach().double().cpu().requires_grad_()
    g = torch.randn_like(fused(x))
    fused(x).backward(g)
    unfused(twin)(x64).backward(g.double().cpu())
    tol = tolerance(torch.float32, device)
    assert_matches(x.grad, x64.grad, tol)
    for p, p64 in zip(fused.parameters(), twin.parameters()):
        assert_matches(p.grad, p64.grad, tol)


def test_output_size_as_conv_transpose2d():
    fused = randomise(GeluChain(4, 8, 3, num_groups=2, stride=2, padding=1))
    x = torch.randn(2, 4, 5, 5)
    for size in ([9, 9], [10, 10], (2, 8, 10, 9)):
        out = fused(x, output_size=size)
        ref = fused.norm(fused.act(fused.conv(x, output_size=size)))
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="requested an output size"):  # nn.ConvTranspose2d's own error
        fused(x, output_size=[12, 12])


def test_dtype_device_and_state_dict_keys():
    fused = GeluChain(4, 8, 3, num_groups=2, dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in fused.parameters())
    assert list(fused.state_dict()) == ["conv.weight", "conv.bias", "norm.weight", "norm.bias"]
    assert fused(torch.randn(1, 4, 3, 3, dtype=torch.float64)).dtype == torch.float64


def bn_chain_pair(device, **kwargs):
    """A fused BatchNorm-chain module and an independent copy of its layers run one by one."""
    fused = randomise(BnChain(8, 16, 3, num_groups=4, padding=1, device=device, **kwargs))
    return fused, unfused(copy.deepcopy(fused))


def assert_same_buffers(fused, eager, device):
    for (name, b), b_eager in zip(fused.named_buffers(), eager.buffers()):
        if b.is_floating_point():
            assert_matches(b, b_eager, tolerance(torch.float32, device))
        else:
            assert torch.equal(b, b_eager), name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kwargs", [{}, dict(bn_momentum=None), dict(track_running_stats=False),
                                    dict(bn_affine=False, gn_affine=False, pool_kernel_size=3, pool_stride=2,
                                         pool_padding=1)])
def test_bn_chain_module_trains_and_evaluates_as_its_layers(device, kwargs):
    fused, eager = bn_chain_pair(device, **kwargs)
    tol = tolerance(torch.float32, device)
    for step in range(3):  # training steps: batch statistics, running buffers, num_batches_tracked
        x = torch.randn(3, 8, 6, 7, device=device)
        assert_matches(fused(x), eager(x), tol)
        assert_same_buffers(fused, eager, device)
    fused.eval(), eager.eval()
    x = torch.randn(2, 8, 6, 7, device=device)
    assert_matches(fused(x), eager(x), tol)
    assert_same_buffers(fused, eager, device)


@pytest.mark.parametrize("device", DEVICES)
def test_bn_chain_module_gradients_match_its_layers(device):
    fused, eager = bn_chain_pair(device)
    x = torch.randn(3, 8, 5, 6, device=device, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    out = fused(x)
    g = torch.randn_like(out)
    out.backward(g)
    eager(x_eager).backward(g)
    tol = tolerance(torch.float32, device)
    assert_matches(x.grad, x_eager.grad, tol)
    # the conv bias's gradient is zero up to rounding (BatchNorm removes a per-channel shift): an
    # absolute floor at the gradients' scale
    floor = max(p.grad.abs().max().item() for p in eager.parameters())
    for p, p_eager in zip(fused.parameters(), eager.parameters()):
        assert_matches(p.grad, p_eager.grad, tol, floor=floor)


def test_from_modules_shares_the_layers():
    conv, act, norm = nn.ConvTranspose2d(4, 8, 3), nn.GELU(), nn.GroupNorm(2, 8)
    fused = GeluChain.from_modules(conv, act, norm)
    assert fused.conv is conv and fused.norm is norm and fused.conv.weight is conv.weight
    bn = BnChain.from_modules(conv, nn.BatchNorm2d(8), nn.Tanh(), nn.MaxPool2d(2), norm)
    assert bn.bn.running_mean is bn.bn.running_mean and bn.norm is norm


@pytest.mark.parametrize("build,error,message", [
    (lambda: GeluChain.from_modules(nn.Conv2d(4, 8, 3), nn.GELU(), nn.GroupNorm(2, 8)), TypeError,
     "argument 'conv' must be nn.ConvTranspose2d, got Conv2d"),
    (lambda: GeluChain.from_modules(nn.ConvTranspose2d(4, 8, 3), nn.ReLU(), nn.GroupNorm(2, 8)), TypeError,
     "argument 'act' must be nn.GELU"),
    (lambda: GeluChain.from_modules(nn.ConvTranspose2d(4, 8, 3), nn.GELU(), nn.GroupNorm(2, 6)), ValueError,
     "argument 'norm' has 6 channels, but 'conv' has 8 output channels"),
    (lambda: BnChain.from_modules(nn.ConvTranspose2d(4, 8, 3), nn.BatchNorm2d(6), nn.Tanh(), nn.MaxPool2d(2),
                                  nn.GroupNorm(2, 8)), ValueError, "argument 'bn' has 6 channels"),
    (lambda: BnChain.from_modules(nn.ConvTranspose2d(4, 8, 3), nn.BatchNorm1d(8), nn.Tanh(), nn.MaxPool2d(2),
                                  nn.GroupNorm(2, 8)), TypeError, "argument 'bn' must be nn.BatchNorm2d"),
    (lambda: BnChain.from_modules(nn.ConvTranspose2d(4, 8, 3), nn.BatchNorm2d(8), nn.Tanh(),
                                  nn.MaxPool2d(2, return_indices=True), nn.GroupNorm(2, 8)), ValueError,
     "argument 'pool' must not return indices"),
])
def test_from_modules_refuses_other_layers(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_ceil_mode_is_refused_by_name():
    fused = BnChain.from_modules(nn.ConvTranspose2d(4, 8, 3), nn.BatchNorm2d(8), nn.Tanh(),
                                 nn.MaxPool2d(2, ceil_mode=True), nn.GroupNorm(2, 8))
    with pytest.raises(ValueError, match="argument 'ceil_mode' must be False"):
        fused(torch.randn(2, 4, 5, 5))


class Residual(nn.Module):
    """A chain written in forward (the swapper leaves it: that is the compile pass's job)."""

    def __init__(self):
        super().__init__()
        self.conv, self.act, self.norm = nn.ConvTranspose2d(8, 8, 3, padding=1), nn.GELU(), nn.GroupNorm(4, 8)

    def forward(self, x):
        return x + self.norm(self.act(self.conv(x)))


def decoder():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ConvTranspose2d(8, 16, 4, stride=2, padding=1), nn.GELU(approximate="tanh"), nn.GroupNorm(4, 16),
        nn.Sequential(nn.ConvTranspose2d(16, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Tanh(), nn.MaxPool2d(2),
                      nn.GroupNorm(2, 8)),
        Residual(),
        nn.ConvTranspose2d(8, 8, 3, padding=1), nn.Dropout(0.0), nn.GroupNorm(2, 8),  # not a chain
        nn.Conv2d(8, 3, 1))


def test_swap_modules_replaces_the_chains_of_sequentials():
    model = randomise(decoder()).eval()
    eager = copy.deepcopy(model)
    params = {id(p) for p in model.parameters()}
    keys_after_chains = [k for k in model.state_dict() if k.split(".")[0] in {"5", "6", "7", "8", "9"}]
    assert myops.nn.swap_modules(model) == {GELU_NAME: 1, BN_NAME: 1}
    assert isinstance(model[1], GeluChain) and isinstance(model[4][0], BnChain)
    assert isinstance(model[5], Residual) and isinstance(model[6], nn.ConvTranspose2d)
    assert {id(p) for p in model.parameters()} == params  # the same layers, now inside the fused modules
    assert set(keys_after_chains) <= set(model.state_dict())  # later layers keep their indices
    x = torch.randn(2, 3, 6, 6)
    torch.testing.assert_close(model(x), eager(x), atol=1e-4, rtol=1e-4)
    assert myops.nn.swap_modules(model) == {GELU_NAME: 0, BN_NAME: 0}  # idempotent


def test_unswap_modules_restores_the_model():
    model = randomise(decoder())
    original = [(name, type(m), m) for name, m in model.named_modules()]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    myops.nn.swap_modules(model)
    assert myops.nn.unswap_modules(model) == 2
    assert [(name, type(m), m) for name, m in model.named_modules()] == original
    assert list(model.state_dict()) == list(state)
    model.load_state_dict(state)


@pytest.mark.parametrize("layers", [
    lambda: [nn.ConvTranspose2d(4, 8, 3), nn.GELU(), nn.ReLU(), nn.GroupNorm(2, 8)],  # another op between
    lambda: [type("MyConv", (nn.ConvTranspose2d,), {})(4, 8, 3), nn.GELU(), nn.GroupNorm(2, 8)],  # a subclass
    lambda: [nn.ConvTranspose2d(4, 8, 3), nn.GELU(), nn.GroupNorm(2, 8)][::-1],  # another order
    lambda: [nn.ConvTranspose2d(4, 8, 3), nn.BatchNorm2d(8), nn.Tanh(), nn.MaxPool2d(2, return_indices=True),
             nn.GroupNorm(2, 8)],
    lambda: [nn.ConvTranspose2d(4, 8, 3), nn.BatchNorm2d(8), nn.Tanh(), nn.AvgPool2d(2), nn.GroupNorm(2, 8)],
])
def test_swap_modules_leaves_other_runs(layers):
    # no seed chain forms (the family's module may take a conv with the layer after it)
    model = nn.Sequential(*layers())
    counts = myops.nn.swap_modules(model)
    assert counts[GELU_NAME] == counts[BN_NAME] == 0
    assert not any(isinstance(m, (GeluChain, BnChain)) for m in model)


def test_swap_modules_leaves_layers_with_hooks():
    model = nn.Sequential(nn.ConvTranspose2d(4, 8, 3), nn.GELU(), nn.GroupNorm(2, 8))
    seen = []
    model[1].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    assert myops.nn.swap_modules(model)[GELU_NAME] == 0
    model(torch.randn(1, 4, 4, 4))
    assert seen == [torch.Size([1, 8, 6, 6])]


def test_compiled_fused_modules_match_eager():
    model = randomise(decoder())
    eager = copy.deepcopy(model)
    myops.nn.swap_modules(model)
    compiled = torch.compile(model, fullgraph=True)
    for _ in range(2):  # training steps: the BatchNorm buffers follow eager's
        x = torch.randn(2, 3, 6, 6)
        torch.testing.assert_close(compiled(x), eager(x), atol=1e-4, rtol=1e-4)
    bn, bn_eager = model[4][0].bn, eager[4][1]
    torch.testing.assert_close(bn.running_var, bn_eager.running_var)
    assert int(bn.num_batches_tracked) == int(bn_eager.num_batches_tracked) == 2


@pytest.mark.parametrize("device", DEVICES)
def test_family_module_swapped_into_published_generators(device):
    # ConvTranspose2dNormAct over the generators' own layers: the same outputs, BatchNorm buffers
    # and num_batches_tracked as the layers in train and eval mode; unswap gives the layers back
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compile_demos"))
    import architectures as arch
    cases = [(arch.DCGANGenerator(nz=16, ngf=8), (4, 16, 1, 1),
              {"conv_transpose2d_batch_norm_relu": 4, "conv_transpose2d_tanh": 1}),
             (arch.ResnetGenerator(3, 3, ngf=8, n_blocks=1), (2, 3, 16, 16), {"conv_transpose2d_instance_norm_relu": 2})]
    tol = 1e-4 if device == "cpu" else 1e-2
    for model, shape, expected in cases:
        model = model.to(device)
        eager = copy.deepcopy(model)
        counts = myops.nn.swap_modules(model)
        assert {k: v for k, v in counts.items() if v} == expected
        x = torch.randn(shape, device=device)
        for training in (True, False, True):
            model.train(training)
            eager.train(training)
            torch.testing.assert_close(model(x), eager(x), atol=tol, rtol=tol)
        for (name, b), b_ref in zip(model.named_buffers(), eager.buffers()):
            torch.testing.assert_close(b, b_ref, atol=tol, rtol=tol, msg=name)
        assert myops.nn.unswap_modules(model) == sum(expected.values())
        assert not any(isinstance(m, myops.nn.ConvTranspose2dNormAct) for m in model.modules())


def test_family_module_from_modules_refuses_other_layers():
    conv = nn.ConvTranspose2d(4, 8, 3)
    with pytest.raises(TypeError, match="ConvTranspose2dNormAct.from_modules"):
        myops.nn.ConvTranspose2dNormAct.from_modules(conv, nn.Dropout())
    with pytest.raises(ValueError, match="argument 'norm' has 6 channels"):
        myops.nn.ConvTranspose2dNormAct.from_modules(conv, nn.BatchNorm2d(6), nn.ReLU())
    block = myops.nn.ConvTranspose2dNormAct.from_modules(conv, nn.SiLU(), nn.GroupNorm(2, 8))
    x = torch.randn(2, 4, 5, 5)
    torch.testing.assert_close(block(x), F.group_norm(F.silu(conv(x)), 2), atol=1e-5, rtol=1e-5)


# 1-D runs (ConvTranspose1d, then a 1-D norm and / or an activation, in either order), as audio and
# sequence decoders write them: kind -> the layers after the conv
ONE_D_RUNS = {
    "conv_transpose1d_batch_norm_leaky_relu": lambda: (nn.BatchNorm1d(8), nn.LeakyReLU(0.1)),
    "conv_transpose1d_instance_norm_relu": lambda: (nn.InstanceNorm1d(8, affine=True, track_running_stats=True),
                                                    nn.ReLU(inplace=True)),
    "conv_transpose1d_silu_group_norm": lambda: (nn.SiLU(), nn.GroupNorm(2, 8)),
    "conv_transpose1d_tanh": lambda: (nn.Tanh(),),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", list(ONE_D_RUNS))
def test_one_dimensional_family_module_matches_the_layers(kind, device):
    # swapped into a Sequential: outputs, input and parameter gradients, running buffers and
    # num_batches_tracked as the layers' in train and eval mode; output_size as the conv's
    torch.manual_seed(0)
    model = nn.Sequential(nn.ConvTranspose1d(4, 8, 16, 8, 4), *ONE_D_RUNS[kind](), nn.Conv1d(8, 2, 3))
    model = randomise(model).to(device)
    eager = copy.deepcopy(model)
    assert {k: v for k, v in myops.nn.swap_modules(model).items() if v} == {kind: 1}
    assert isinstance(model[0], myops.nn.ConvTranspose1dNormAct)
    tol = 1e-4 if device == "cpu" else 1e-2
    for training in (True, False, True):
        model.train(training)
        eager.train(training)
        x = torch.randn(3, 4, 10, device=device, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        out, ref = model(x), eager(x_ref)
        torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
        out.square().sum().backward()
        ref.square().sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad, atol=tol, rtol=tol)
    for (name, p), p_ref in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, atol=10 * tol, rtol=10 * tol, msg=name)
    for (name, b), b_ref in zip(model.named_buffers(), eager.buffers()):
        torch.testing.assert_close(b, b_ref, atol=tol, rtol=tol, msg=name)
    x = torch.randn(2, 4, 10, device=device)
    h = eager[0](x, output_size=[81])  # (80 without output_padding)
    for layer in list(eager)[1:1 + len(ONE_D_RUNS[kind]())]:
        h = layer(h)
    torch.testing.assert_close(model[0](x, output_size=[81]), h, atol=tol, rtol=tol)
    assert myops.nn.unswap_modules(model) == 1 and type(model[0]) is nn.ConvTranspose1d


def test_one_dimensional_family_module_refuses_two_dimensional_norms():
    conv = nn.ConvTranspose1d(4, 8, 3)
    with pytest.raises(TypeError, match=r"ConvTranspose1dNormAct.from_modules: after 'conv', expected a "
                                        r"normalisation \(nn.BatchNorm1d"):
        myops.nn.ConvTranspose1dNormAct.from_modules(conv, nn.BatchNorm2d(8), nn.ReLU())
    with pytest.raises(TypeError, match="argument 'conv' must be nn.ConvTranspose1d"):
        myops.nn.ConvTranspose1dNormAct.from_modules(nn.ConvTranspose2d(4, 8, 3), nn.ReLU())
    # a BatchNorm2d after a ConvTranspose1d (an error in eager too) is not swapped
    model = nn.Sequential(conv, nn.BatchNorm2d(8), nn.ReLU())
    assert not any(myops.nn.swap_modules(model).values())


@pytest.mark.parametrize("device", DEVICES)
def test_convs_with_parametrized_weights_are_swapped(device):
    # SAGAN's spectral-normed ConvTranspose2d and a vocoder's weight-normed ConvTranspose1d (their
    # weights computed in the forward): swapped, with outputs, gradients of the parametrization's
    # own parameters, and buffers (spectral_norm's power-iteration vectors too) as the layers'
    from torch.nn.utils import parametrizations
    torch.manual_seed(0)
    cases = [
        (nn.Sequential(parametrizations.spectral_norm(nn.ConvTranspose2d(8, 6, 4, 2, 1)), nn.BatchNorm2d(6), nn.ReLU()),
         (2, 8, 5, 5), "conv_transpose2d_batch_norm_relu", myops.nn.ConvTranspose2dNormAct),
        (nn.Sequential(parametrizations.weight_norm(nn.ConvTranspose1d(8, 6, 16, 8, 4)), nn.BatchNorm1d(6),
                       nn.LeakyReLU(0.1)),
         (2, 8, 7), "conv_transpose1d_batch_norm_leaky_relu", myops.nn.ConvTranspose1dNormAct),
    ]
    tol = 1e-4 if device == "cpu" else 1e-2
    for model, shape, kind, cls in cases:
        model = model.to(device)
        eager = copy.deepcopy(model)
        assert {k: v for k, v in myops.nn.swap_modules(model).items() if v} == {kind: 1}
        assert isinstance(model[0], cls)
        for training in (True, False):
            model.train(training)
            eager.train(training)
            x = torch.randn(shape, device=device)
            out, ref = model(x), eager(x)
            torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
            out.square().sum().backward()
            ref.square().sum().backward()
        for (name, p), p_ref in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, p_ref.grad, atol=10 * tol, rtol=10 * tol, msg=name)
        for (name, b), b_ref in zip(model.named_buffers(), eager.buffers()):
            torch.testing.assert_close(b, b_ref, atol=tol, rtol=tol, msg=name)
