"""torch.compile on published architectures, unmodified (compile_demos/architectures.py): the
conv + norm + activation chains each one writes are found and rewritten as counted, and outputs,
gradients and BatchNorm buffers equal eager's in training and eval; chains the family cannot serve
are left alone with a logged reason."""
import copy
import logging
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import myops
import myops.compile as mc
import myops._fx_match as fm
import myops.backends
from conftest import DEVICES, HAS_CUDA, NO_CUDA

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compile_demos"))
import architectures as arch  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_state():
    mc.disable()
    mc.reset_stats()
    torch._dynamo.reset()
    yield
    mc.disable()


# name -> (model, input, {kind: rewritten} in training, in eval)
def _cases():
    return {
        # (the image head after the last chain: ConvT -> Tanh routed with the Tanh in its epilogue)
        "dcgan": (lambda: arch.DCGANGenerator(nz=16, ngf=8), (4, 16, 1, 1),
                  {"conv_transpose2d_batch_norm_relu": 4, "conv_transpose2d_tanh": 1}, {}),
        "pix2pix_unet": (lambda: arch.UnetGenerator(3, 3, num_downs=5, ngf=4), (2, 3, 32, 32),
                         {"conv_transpose2d_batch_norm": 4}, {}),
        "cyclegan_resnet": (lambda: arch.ResnetGenerator(3, 3, ngf=8, n_blocks=2), (2, 3, 16, 16),
                            {"conv_transpose2d_instance_norm_relu": 2}, {"conv_transpose2d_instance_norm_relu": 2}),
        "decoder_upsampler": (lambda: arch.UpDecoder((32, 16, 16), groups=4), (2, 32, 4, 4),
                              {"conv_transpose2d_group_norm_silu": 2}, {"conv_transpose2d_group_norm_silu": 2}),
        "sagan_block": (lambda: arch.SAGANBlock(8, 8), (2, 8, 5, 5), {"conv_transpose2d_batch_norm_relu": 1}, {}),
        "functional_gan_block": (lambda: arch.FunctionalGANBlock(8, 6), (3, 8, 4, 4),
                                 {"conv_transpose2d_batch_norm_leaky_relu": 1}, {}),
    }


# name -> the standalone convs (outside the chains rewritten above) that the default routes on a
# device of ROUTED_DEVICES, in training and in eval: the image heads with their Tanh (where no
# rewritten chain comes before them), and in eval the convs before a BatchNorm with running
# statistics (left to Inductor)
ROUTED = {
    "dcgan": ({}, {"conv_transpose2d": 4, "conv_transpose2d_tanh": 1}),
    "pix2pix_unet": ({"conv_transpose2d_tanh": 1}, {"conv_transpose2d": 4, "conv_transpose2d_tanh": 1}),
    "sagan_block": ({}, {"conv_transpose2d": 1}),
    "functional_gan_block": ({}, {"conv_transpose2d": 1}),
}


def _expected(name, training, device):
    counts = dict(_cases()[name][2 if training else 3])
    if device in fm.ROUTED_DEVICES:
        counts.update(ROUTED.get(name, ({}, {}))[0 if training else 1])
    return counts


def _rewritten():
    return {k: v for k, v in mc.stats().items() if v}


def _close(a, b, tol=2e-4):
    torch.testing.assert_close(a, b, atol=tol * max(1.0, b.abs().max().item()), rtol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", list(_cases()))
def test_architecture_rewrites_and_matches_eager(name, training, device):
    check_architecture(name, training, device)


def test_options_read_when_traced_key_the_compiled_graphs():
    # a graph compiled under one value must not be served from Inductor's cache under another
    keys = set()
    for recompute in (False, True):
        with myops.backends.options(recompute_conv=recompute):
            keys.add(mc.MyopsFusionPass().uuid())
    assert len(keys) == 2


def check_architecture(name, training, device):
    make, shape, train_counts, _ = _cases()[name]
    torch.manual_seed(0)
    model = make().train(training).to(device)
    eager = copy.deepcopy(model)
    x = torch.randn(shape, device=device)
    mc.enable(devices=None)
    compiled = torch.compile(model, fullgraph=True)
    tol = 2e-4 if device == "cpu" else 1e-2  # (CUDA: TF32 convolutions, eager's too)
    for step in range(2):  # the second step sees the buffers the first updated
        out, ref = compiled(x), eager(x)
        _close(out, ref, tol)
        if training:
            out.square().mean().backward()
            ref.square().mean().backward()
    assert _rewritten() == _expected(name, training, device), name
    found = mc.stats(found=True)
    assert all(found[k] >= v for k, v in train_counts.items())
    params, ref_params = dict(model.named_parameters()), dict(eager.named_parameters())
    for key, p in params.items():
        if training:
            _close(p.grad, ref_params[key].grad, 10 * tol)
    ref_buffers = dict(eager.named_buffers())
    for key, b in model.named_buffers():
        if b.is_floating_point():
            _close(b, ref_buffers[key], tol)
        else:
            assert torch.equal(b, ref_buffers[key]), key


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["autocast", "bfloat16_model"])
@pytest.mark.parametrize("name", ["dcgan", "pix2pix_unet", "decoder_upsampler"])
def test_16_bit_training_rewrites_and_matches_eager(name, precision, device):
    # a training step in bfloat16, under autocast or with the model cast: the same chains
    # rewritten as in float32, outputs and gradients as eager PyTorch's in the same precision
    make, shape, _, _ = _cases()[name]
    torch.manual_seed(0)
    model = make().to(device)
    x = torch.randn(shape, device=device)
    if precision == "bfloat16_model":
        model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
    eager = copy.deepcopy(model)
    mc.enable(devices=None)
    compiled = torch.compile(model, fullgraph=True)
    for step in range(2):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "autocast"):
            out, ref = compiled(x), eager(x)
        _close(out.float(), ref.float(), 5e-2)
        out.float().square().mean().backward()
        ref.float().square().mean().backward()
    assert _rewritten() == _expected(name, True, device), name
    ref_params = dict(eager.named_parameters())
    for key, p in model.named_parameters():
        _close(p.grad.float(), ref_params[key].grad.float(), 1e-1)


@pytest.mark.parametrize("name", ["dcgan", "pix2pix_unet", "sagan_block"])
def test_auto_routes_every_standalone_conv_on_a_routed_device(name, monkeypatch):
    # the CPU taken as a routed device: the default sends each standalone conv to
    # myops.conv_transpose2d (an activation after it into its epilogue), the output as eager's
    monkeypatch.setattr(fm, "ROUTED_DEVICES", ("cpu",))
    make, shape, _, _ = _cases()[name]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(shape)
    mc.enable(devices=None)
    with torch.no_grad():
        _close(torch.compile(model, fullgraph=True)(x), model(x))
    assert _rewritten() == _expected(name, False, "cpu"), name


def test_chains_left_alone_are_logged_with_their_reason(caplog):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.norm = nn.ConvTranspose2d(4, 8, 3), nn.GroupNorm(2, 8)

        def forward(self, x):
            y = self.conv(x)
            a = torch.relu(y)
            return self.norm(a) + a  # the activation's output has a second user

    mc.enable(devices=None)
    with caplog.at_level(logging.INFO, logger="myops.compile"):
        torch.compile(Block(), fullgraph=True)(torch.randn(2, 4, 5, 5))
    assert mc.stats(found=True).get("conv_transpose2d_relu_group_norm") == 1
    assert "conv_transpose2d_relu_group_norm" not in _rewritten()
    assert any("conv_transpose2d_relu_group_norm chain left to Inductor" in r.getMessage() for r in caplog.records)


def test_an_op_in_between_breaks_the_chain():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.ConvTranspose2d(4, 8, 3), nn.BatchNorm2d(8)

        def forward(self, x):
            return F.relu(self.bn(self.conv(x) * 2))

    mc.enable(devices=None)
    model = Block()
    x = torch.randn(2, 4, 5, 5)
    _close(torch.compile(copy.deepcopy(model), fullgraph=True)(x), model(x))
    assert _rewritten() == {} and mc.stats(found=True).get("conv_transpose2d_batch_norm_relu") is None


def test_residual_reads_the_conv_output_from_the_rewritten_call():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.norm = nn.ConvTranspose2d(8, 8, 4, 2, 1), nn.GroupNorm(4, 8)

        def forward(self, x):
            h = self.up(x)
            return h + F.silu(self.norm(h))

    torch.manual_seed(0)
    model = Block()
    x = torch.randn(2, 8, 3, 3, requires_grad=True)
    mc.enable(devices=None)
    out = torch.compile(model, fullgraph=True)(x)
    _close(out, model(x))
    assert _rewritten() == {"conv_transpose2d_group_norm_silu": 1}
    (g,) = torch.autograd.grad(out.sum(), x)
    (g_ref,) = torch.autograd.grad(model(x).sum(), x)
    _close(g, g_ref, 1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_chains_inside_activation_checkpoints(device):
    # torch.utils.checkpoint around a chain (the low-memory form of training): still rewritten,
    # gradients and BatchNorm buffers as eager's without the checkpoint
    # (eager's recomputation updates the running buffers a second time; compiled graphs, plain
    # torch.compile's too, update them once)
    from torch.utils.checkpoint import checkpoint

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.ConvTranspose2d(8, 8, 4, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            self.head = nn.ConvTranspose2d(8, 3, 4, 2, 1)
            self.checkpointed = True

        def forward(self, x):
            h = checkpoint(self.block, x, use_reentrant=False) if self.checkpointed else self.block(x)
            return torch.tanh(self.head(h))

    torch.manual_seed(0)
    model = Generator().to(device)
    eager = copy.deepcopy(model)
    eager.checkpointed = False
    x = torch.randn(2, 8, 8, 8, device=device)
    mc.enable(devices=None)
    compiled = torch.compile(model, fullgraph=True)
    tol = 2e-4 if device == "cpu" else 1e-2
    for _ in range(2):
        out, ref = compiled(x), eager(x)
        _close(out, ref, tol)
        out.square().mean().backward()
        ref.square().mean().backward()
    assert _rewritten().get("conv_transpose2d_batch_norm_relu") == 1
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        _close(p.grad, q.grad, 10 * tol)
    for b, r in zip(model.buffers(), eager.buffers()):
        _close(b.float(), r.float(), tol)


def test_dynamic_batch_compiles_as_often_as_plain_compile():
    # dynamic=True in training: a new batch size must not recompile the rewritten graph where plain
    # torch.compile's graph serves it (BatchNorm's unbiased-variance factor N*H*W / (N*H*W - 1) as a
    # Python float specialised the graph to each size); outputs and running buffers as eager's
    from torch._dynamo.utils import counters

    graphs = {}
    for rewrite in (False, True):
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        model = arch.DCGANGenerator(nz=16, ngf=8)
        eager = copy.deepcopy(model)
        if rewrite:
            mc.enable(devices=None)
        compiled = torch.compile(model, dynamic=True)
        for batch in (4, 6, 7, 9):
            x = torch.randn(batch, 16, 1, 1)
            _close(compiled(x), eager(x))
        for b, r in zip(model.buffers(), eager.buffers()):
            _close(b.float(), r.float())
        graphs[rewrite] = counters["stats"]["unique_graphs"]
    assert graphs[True] == graphs[False], graphs
    assert _rewritten()["conv_transpose2d_batch_norm_relu"] == 4 * graphs[True]


def test_default_devices_leave_cpu_chains_alone():
    model = arch.DCGANGenerator(nz=8, ngf=4)
    myops._fx_match._DEVICES_WARNED.clear()  # (warned once per process and device)
    mc.enable()
    with pytest.warns(UserWarning, match="left alone"):
        torch.compile(model, fullgraph=True)(torch.randn(2, 8, 1, 1))
    assert _rewritten() == {}


@pytest.mark.parametrize("norm,channels_last_inference", [(nn.BatchNorm2d(8), True), (nn.InstanceNorm2d(8), True),
                                                        (nn.GroupNorm(2, 8), False)], ids=["bn", "in", "gn"])
def test_cpu_graph_layout_follows_the_rule(norm, channels_last_inference):
    # a chain traced for the CPU runs channels-last in an inference graph (oneDNN's faster conv,
    # Inductor reading it in place) unless its GroupNorm has several channels per group; a
    # training graph stays NCHW. The compiled output keeps the traced layout.
    model = nn.Sequential(nn.ConvTranspose2d(4, 8, 4, 2, 1), norm, nn.ReLU())
    x = torch.randn(2, 4, 6, 6)
    mc.enable(devices=None)
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        inference = compiled(x)
    training = compiled(x.requires_grad_())
    assert sum(_rewritten().values()) == 2
    assert inference.is_contiguous(memory_format=torch.channels_last) == channels_last_inference
    assert training.is_contiguous() and not training.is_contiguous(memory_format=torch.channels_last)
    _close(training, model(x), 2e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_activation_before_the_norm_is_rewritten(device):
    class Block(nn.Module):  # activation first, as a pre-activation model writes it
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.ConvTranspose2d(4, 8, 4, 2, 1), nn.BatchNorm2d(8)

        def forward(self, x):
            return self.bn(F.leaky_relu(self.conv(x), 0.2))

    torch.manual_seed(0)
    model = Block().to(device)
    eager = copy.deepcopy(model)
    x = torch.randn(2, 4, 5, 5, device=device)
    mc.enable(devices=None)
    tol = 2e-4 if device == "cpu" else 1e-2
    _close(torch.compile(model, fullgraph=True)(x), eager(x), tol)
    assert _rewritten() == {"conv_transpose2d_leaky_relu_batch_norm": 1}
    _close(model.bn.running_var, eager.bn.running_var, tol)


@pytest.mark.parametrize("name", ["dcgan", "cyclegan_resnet", "decoder_upsampler"])
def test_fuse_on_torch_export_graphs(name):
    # the aten forms (aten.batch_norm, aten.instance_norm, aten.group_norm, aten.relu_, ...) of an
    # exported graph: myops.compile.fuse rewrites the same chains as torch.compile's pass
    make, shape, train_counts, _ = _cases()[name]
    torch.manual_seed(0)
    model = make().train()
    eager = copy.deepcopy(model)
    x = torch.randn(shape)
    gm = torch.export.export(model, (x,)).module()
    chains = {k: v for k, v in train_counts.items() if k != "conv_transpose2d_tanh"}  # (fuse routes no head)
    assert mc.fuse(gm) == sum(chains.values())
    assert _rewritten() == chains
    _close(gm(x), eager(x))
    for (key, b), b_ref in zip(gm.named_buffers(), eager.buffers()):
        _close(b, b_ref, 1e-4) if b.is_floating_point() else None


@pytest.mark.parametrize("training", [True, False])
def test_fuse_takes_the_batch_norm_chain_of_an_exported_graph(training):
    # the seed BatchNorm chain in aten form (aten.batch_norm, aten.tanh, aten.max_pool2d, aten.group_norm)
    from myops.workloads import ConvTransposeBnTanhPoolGroupNorm
    torch.manual_seed(0)
    model = ConvTransposeBnTanhPoolGroupNorm(8, 16, 3, 4, padding=1).train(training)
    with torch.no_grad():
        model.bn.running_var.uniform_(0.5, 2.0)
    eager = copy.deepcopy(model)
    x = torch.randn(2, 8, 6, 6)
    gm = torch.export.export(model, (x,)).module()
    assert mc.fuse(gm) == 1
    assert _rewritten() == {"conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm": 1}
    _close(gm(x), eager(x))
    for b, b_ref in zip(gm.buffers(), eager.buffers()):
        _close(b, b_ref, 1e-5) if b.is_floating_point() else None
