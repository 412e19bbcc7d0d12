"""torch.compile integration (myops.compile): replacements in unmodified models, numerics and
gradients against eager, negative cases, caching, dynamic shapes, export / AOTInductor."""
import logging
import unittest

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

import myops
import myops.compile as mc

from conftest import DEVICES, HAS_CUDA, NO_CUDA

try:  # the graph-text tests' base (the GPU image lacks it: they skip there, the rest of the file runs)
    from expecttest import TestCase as ExpectTestCase
except ImportError:
    ExpectTestCase = None
needs_expecttest = pytest.mark.skipif(ExpectTestCase is None, reason="expecttest is not installed")

FUSED = "conv_transpose2d_gelu_group_norm"
BN_CHAIN = "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm"


@pytest.fixture(autouse=True)
def _fresh_state():
    mc.disable()
    mc.reset_stats()
    myops._measure.decisions.clear()  # measured selection's per-process memory
    torch._dynamo.reset()
    yield
    mc.disable()


def no_cache():
    # stats() counts rewrites done by compilations: make every test compile for real
    return torch._inductor.config.patch(fx_graph_cache=False)


class Block(nn.Module):
    def __init__(self, c_in=4, c_out=6, k=3, groups_norm=3, approximate="none", affine=True, bias=True, **kw):
        super().__init__()
        self.conv = nn.ConvTranspose2d(c_in, c_out, k, bias=bias, **kw)
        self.act = nn.GELU(approximate=approximate)
        self.norm = nn.GroupNorm(groups_norm, c_out, affine=affine)

    def forward(self, x):
        return self.norm(self.act(self.conv(x)))


def _close(a, b, tol):
    torch.testing.assert_close(a, b, atol=tol * max(1.0, b.abs().max().item()), rtol=tol)


def _eager_tol(device):
    # float32 convolutions run TF32 on CUDA (PyTorch's default), eager's too
    return 5e-3 if torch.device(device).type == "cuda" else 1e-4


def compiled_matches_eager(model, x, tol=None, **compile_kw):
    compiled = torch.compile(model, fullgraph=True, **compile_kw)
    _close(compiled(x), model(x), _eager_tol(x.device) if tol is None else tol)
    return compiled


@pytest.mark.parametrize("device", DEVICES)
def test_sequential_block_is_replaced(device):
    model = nn.Sequential(nn.ConvTranspose2d(4, 8, 3), nn.GELU(), nn.GroupNorm(4, 8)).to(device)
    x = torch.randn(2, 4, 9, 7, device=device)
    mc.enable(devices=None)
    with no_cache(), torch.no_grad():
        compiled_matches_eager(model, x)
    assert mc.stats() == {FUSED: 1, BN_CHAIN: 0, "conv_transpose2d": 0}


FUNCTIONAL_CASES = [
    dict(stride=2, padding=1, output_padding=1, groups=2, dilation=1, approximate="tanh", affine=True, bias=False),
    dict(stride=(1, 3), padding=(0, 2), output_padding=(0, 1), groups=1, dilation=(2, 1), approximate="none", affine=False, bias=True),
]


@pytest.mark.parametrize("case", FUNCTIONAL_CASES)
def test_functional_calls_with_every_argument(case):
    w = torch.randn(4, 3, 3, 2)
    b = torch.randn(3 * case["groups"]) if case["bias"] else None
    c_out = 3 * case["groups"]
    gw, gb = (torch.randn(c_out), torch.randn(c_out)) if case["affine"] else (None, None)

    def f(x):
        y = F.conv_transpose2d(x, w, b, case["stride"], case["padding"], case["output_padding"], case["groups"], case["dilation"])
        return F.group_norm(F.gelu(y, approximate=case["approximate"]), 3 if c_out % 3 == 0 else 1, gw, gb, eps=1e-3)

    mc.enable(devices=None)
    with no_cache():
        compiled_matches_eager(f, torch.randn(2, 4, 5, 6))
    assert mc.stats()[FUSED] == 1


class TwoChainsResidual(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = Block(8, 8, 4, 4, approximate="tanh", stride=2, padding=1)
        self.refine = nn.Sequential(nn.ConvTranspose2d(8, 8, 3, padding=1), nn.GELU(), nn.GroupNorm(2, 8))

    def forward(self, x):
        h = self.up(x)
        return h + self.refine(h)


def test_several_chains_in_sequential_and_residual_blocks():
    mc.enable(devices=None)
    with no_cache(), torch.no_grad():
        compiled_matches_eager(TwoChainsResidual(), torch.randn(2, 8, 6, 5))
    assert mc.stats()[FUSED] == 2


@pytest.mark.parametrize("device", DEVICES)
def test_normalise_fused_into_pointwise_consumer(device):
    # The refine chain only feeds the residual add: it becomes the op that stops at GroupNorm's
    # statistics, and Inductor generates the normalisation inside the add's kernel. The up chain
    # also feeds a convolution: the fused op, normalising in place.
    model, x = TwoChainsResidual().to(device), torch.randn(2, 8, 6, 5, device=device)
    mc.enable(devices=None)
    with no_cache(), torch.no_grad():
        out, code = run_and_get_code(torch.compile(model, fullgraph=True), x)
    code = "\n".join(code)
    calls = [line for line in code.splitlines() if "= torch.ops.myops." in line]
    assert [c.split("torch.ops.myops.")[1].split("(")[0] for c in calls] == [
        "conv_transpose2d_gelu_group_norm.default", "conv_transpose2d_gelu_group_stats.default"], calls
    _close(out, model(x), _eager_tol(device))
    assert mc.stats()[FUSED] == 2


class ConvUsedTwice(Block):
    def forward(self, x):
        y = self.conv(x)
        return self.norm(self.act(y)) + y


class GeluUsedTwice(Block):
    def forward(self, x):
        a = self.act(self.conv(x))
        return self.norm(a) * a


class ReluBetween(Block):
    def forward(self, x):
        return self.norm(torch.relu(self.act(self.conv(x))))


class NormOverOtherTensor(Block):
    def forward(self, x):
        a = self.act(self.conv(x))
        return self.norm(torch.ones_like(a)) + a


@pytest.mark.parametrize("model_cls", [ConvUsedTwice, GeluUsedTwice, ReluBetween, NormOverOtherTensor])
def test_no_replacement_when_semantics_differ(model_cls):
    mc.enable(devices=None)
    with no_cache(), torch.no_grad():
        compiled_matches_eager(model_cls(), torch.randn(2, 4, 5, 5))
    assert mc.stats()[FUSED] == 0


@pytest.mark.parametrize("device", DEVICES)
def test_training_gradients_equal_eager(device):
    torch.manual_seed(0)
    model = TwoChainsResidual().to(device)
    x = torch.randn(2, 8, 6, 5, device=device, requires_grad=True)
    mc.enable(devices=None)
    with no_cache():
        compiled = torch.compile(model, fullgraph=True)
        out = compiled(x)
    assert mc.stats()[FUSED] == 2
    grad = torch.randn_like(out)
    params = [x] + list(model.parameters())
    got = torch.autograd.grad(out, params, grad)
    ref = torch.autograd.grad(model(x), params, grad)
    tol = 2e-3 if device == "cuda" else 1e-4  # TF32 on CUDA
    for g, r in zip(got, ref):
        _close(g, r, tol)


def test_inference_mode_and_dynamic_batch():
    model = Block(4, 6, 3, 3)
    mc.enable(devices=None)
    with no_cache(), torch.inference_mode():
        compiled = torch.compile(model, fullgraph=True, dynamic=True)
        for n in (2, 5):
            x = torch.randn(n, 4, 7, 5)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    assert mc.stats()[FUSED] >= 1


def test_bfloat16_channels_last():
    model = Block(4, 6, 3, 3).to(torch.bfloat16)
    x = torch.randn(2, 4, 8, 8, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    mc.enable(devices=None)
    with no_cache(), torch.no_grad():
        compiled_matches_eager(model, x, tol=5e-2)
    assert mc.stats()[FUSED] == 1


def test_standalone_conv_option():
    # every conv to myops; one followed by an activation takes it into its epilogue
    model = nn.Sequential(nn.ConvTranspose2d(4, 6, 3, stride=2), nn.ReLU(), nn.ConvTranspose2d(6, 2, 3))
    x = torch.randn(2, 4, 5, 5)
    mc.enable(conv_transpose2d=True, devices=None)
    with no_cache(), torch.no_grad():
        compiled_matches_eager(model, x)
    assert {k: v for k, v in mc.stats().items() if v} == {"conv_transpose2d_relu": 1, "conv_transpose2d": 1}


def test_auto_routes_heads_after_chains():
    # the default (conv_transpose2d="auto"): a <= 4-channel head whose input a rewritten chain
    # produces goes to myops.conv_transpose2d; a wider conv there, a head after other ops, and
    # the head with the option off stay with Inductor
    def model(head_channels, after_chain=True):
        torch.manual_seed(0)
        first = [nn.ConvTranspose2d(4, 6, 3), nn.GELU(), nn.GroupNorm(2, 6)] if after_chain else \
            [nn.ConvTranspose2d(4, 6, 3), nn.ReLU()]
        return nn.Sequential(*first, nn.ConvTranspose2d(6, head_channels, 4, stride=2, padding=1), nn.Tanh())

    x = torch.randn(2, 4, 5, 5)
    cases = [(dict(), model(3), 1, 1), (dict(), model(1), 1, 1), (dict(), model(5), 1, 0),
             (dict(), model(3, after_chain=False), 0, 0), (dict(conv_transpose2d=False), model(3), 1, 0)]
    for options, m, chains, heads in cases:
        torch._dynamo.reset()  # a model of other sizes would otherwise recompile with dynamic shapes
        mc.reset_stats()
        mc.enable(devices=None, **options)
        with no_cache(), torch.no_grad():
            compiled_matches_eager(m, x)
        # (a routed head and its Tanh: one conv_transpose2d_tanh call, the activation in its epilogue)
        assert {k: v for k, v in mc.stats().items() if v} == {k: v for k, v in (
            (FUSED, chains), ("conv_transpose2d_tanh", heads)) if v}, (options, m)
    with pytest.raises(ValueError, match="conv_transpose2d"):
        mc.enable(conv_transpose2d="all")


def test_cache_never_mixes_graphs_with_and_without_the_pass(tmp_path, monkeypatch):
    # FX graph cache on (a fresh directory): the same graph compiled with and without the pass
    # must give code with and without the myops op respectively.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    model = Block(4, 6, 3, 3)
    x = torch.randn(2, 4, 5, 5)
    with torch._inductor.config.patch(fx_graph_cache=True), torch.no_grad():
        for round_ in range(2):
            for on in (True, False):
                mc.enable(devices=None) if on else mc.disable()
                torch._dynamo.reset()
                out, code = run_and_get_code(torch.compile(model, fullgraph=True), x)
                assert ("myops" in "\n".join(code)) == on, (round_, on)
                torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
    assert mc.MyopsFusionPass(False).uuid() != mc.MyopsFusionPass(True).uuid()
    assert mc.MyopsFusionPass(devices=("cuda",)).uuid() != mc.MyopsFusionPass(devices=None).uuid()


_CACHED_COMPILE = """
import json, sys, torch
from torch._dynamo.utils import counters
sys.path.insert(0, {tests!r})
import myops.compile as mc
from test_compile import Block
mc.enable(devices=None)
model = Block(4, 6, 3, 3)
x = torch.randn(2, 4, 5, 5)
with torch.no_grad():
    out = torch.compile(model, fullgraph=True)(x)
    torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
hits = counters["aot_autograd"]["autograd_cache_hit"] + counters["inductor"]["fxgraph_cache_hit"]
print(json.dumps(dict(stats=mc.stats(), hits=hits)))
"""


def test_stats_count_graphs_served_from_the_cache(tmp_path):
    # two processes, one cache directory: the second gets the compiled graph from Inductor's
    # caches and must still count the chain it runs fused
    import json
    import os
    import subprocess
    import sys
    script = _CACHED_COMPILE.format(tests=os.path.dirname(__file__))
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path))
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True,
                                      text=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert runs[0]["hits"] == 0 and runs[1]["hits"] > 0, runs
    assert runs[0]["stats"][FUSED] == runs[1]["stats"][FUSED] == 1, runs


def test_disable_restores_inductors_pre_grad_timing():
    config = torch._inductor.config
    if not hasattr(config, "pre_grad_pass_timing"):
        pytest.skip("this torch has no pre-grad pass timing setting")
    before = config.pre_grad_pass_timing
    mc.enable(devices=None)
    assert config.pre_grad_pass_timing == "early"
    mc.enable(devices=None, conv_transpose2d=True)
    mc.disable()
    assert config.pre_grad_pass_timing == before


def test_enable_is_idempotent_context_manager_and_logs(caplog):
    mc.enable(devices=None)
    first = torch._inductor.config.pre_grad_custom_pass
    mc.enable(devices=None)
    assert torch._inductor.config.pre_grad_custom_pass is first
    mc.disable()
    assert not mc.is_enabled()
    with mc.enabled(devices=None):
        assert mc.is_enabled()
        with caplog.at_level(logging.INFO, logger="myops.compile"), no_cache(), torch.no_grad():
            torch.compile(Block())(torch.randn(1, 4, 3, 3))
    assert not mc.is_enabled()
    assert any("replaced" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("device", DEVICES)
def test_default_rewrites_cuda_chains_only(device):
    # CPU chains stay with Inductor by default (our CPU kernels are slower than its oneDNN conv)
    model = Block(4, 6, 3, 3).to(device)
    x = torch.randn(2, 4, 5, 5, device=device)
    mc.enable()
    with no_cache(), torch.no_grad():
        out, code = run_and_get_code(torch.compile(model, fullgraph=True), x)
        _close(out, model(x), _eager_tol(device))
    replaced = device == "cuda"
    assert mc.stats() == {FUSED: int(replaced), BN_CHAIN: 0, "conv_transpose2d": 0}
    assert ("myops" in "\n".join(code)) == replaced


def test_devices_option_is_checked_and_restored():
    for bad in (3, [], ["gpu"], object()):
        with pytest.raises(ValueError, match=r"myops.compile.enable: argument 'devices'"):
            mc.enable(devices=bad)
    assert not mc.is_enabled()
    mc.enable(devices="cpu")
    assert torch._inductor.config.pre_grad_custom_pass.devices == ("cpu",)
    with mc.enabled(devices=[torch.device("cuda", 0), "cpu"]):
        assert torch._inductor.config.pre_grad_custom_pass.devices == ("cpu", "cuda")
    assert torch._inductor.config.pre_grad_custom_pass.devices == ("cpu",)
    first = torch._inductor.config.pre_grad_custom_pass
    mc.enable(devices=["cpu"])  # the same options: idempotent
    assert torch._inductor.config.pre_grad_custom_pass is first
    mc.enable(devices="cpu", measure=True)  # other options: a new pass
    assert torch._inductor.config.pre_grad_custom_pass.options() == dict(conv_transpose2d="auto", devices=("cpu",),
                                                                         measure=True)
    mc.disable()
    with mc.enabled():
        assert torch._inductor.config.pre_grad_custom_pass.devices == ("cuda",)
    assert not mc.is_enabled()


@needs_expecttest
class TestRewrittenGraph(ExpectTestCase or unittest.TestCase):
    def test_export_then_fuse(self):
        model = TwoChainsResidual().eval()
        ep = torch.export.export(model, (torch.randn(2, 8, 6, 5),))
        gm = ep.module()
        self.assertEqual(mc.fuse(gm, devices="cuda"), 0)  # a CPU graph: nothing for CUDA only
        self.assertEqual(mc.fuse(gm), 2)  # fuse(): every device by default
        ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        self.assertExpectedInline("\n".join(ops), """\
myops.conv_transpose2d_gelu_group_norm.default
myops.conv_transpose2d_gelu_group_norm.default
aten.add.Tensor""")
        x = torch.randn(2, 8, 6, 5)
        torch.testing.assert_close(gm(x), model(x), atol=1e-4, rtol=1e-4)




@pytest.mark.parametrize("device", DEVICES)
def test_export_and_aot_inductor_package(tmp_path, device):
    # The package is built in one child process and loaded in another (a fresh process, as a
    # deployment loads it); a native crash there fails this test, not the run. The plain control
    # (no myops op) runs first: where AOTInductor cannot load even that model (the torch 2.11 GPU
    # image: its generated CPU wrapper crashes in std::regex), the test skips with the control's
    # status instead of blaming myops.
    import os
    import subprocess
    import sys
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    scripts = os.path.join(root, "scripts")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))

    def child(*args):
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, env=env)
    control = child(os.path.join(scripts, "aoti_control.py"), device)
    if control.returncode != 0 or "plain AOTI OK" not in control.stderr:
        pytest.skip(f"AOTInductor fails here without myops too (plain control exit {control.returncode})")
    package = str(tmp_path / "model.pt2")
    for phase in ("package", "load"):
        proc = child(os.path.join(scripts, "aoti_myops_case.py"), phase, package, device)
        assert proc.returncode == 0 and f"AOTI {phase} OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_reduce_overhead_mode_on_cuda():
    model = Block(8, 8, 3, 4).cuda()
    x = torch.randn(2, 8, 16, 16, device="cuda")
    mc.enable(devices=None)
    with no_cache(), torch.no_grad():
        compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            out = compiled(x)
        torch.testing.assert_close(out, model(x), atol=2e-3, rtol=2e-3)
    assert mc.stats()[FUSED] == 1


@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_reduce_overhead_mode_training_on_cuda():
    # CUDA graphs in training: forward and backward replayed, gradients and buffers as eager's
    import copy
    torch.manual_seed(0)
    model = nn.Sequential(nn.ConvTranspose2d(16, 8, 4, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.ConvTranspose2d(8, 8, 3, 1, 1), nn.GELU(), nn.GroupNorm(4, 8)).cuda()
    eager = copy.deepcopy(model)
    x = torch.randn(4, 16, 8, 8, device="cuda")
    mc.enable(devices=None)
    with no_cache():
        compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            for m in (model, eager):
                m.zero_grad(set_to_none=True)
            compiled(x).square().mean().backward()
            eager(x).square().mean().backward()
    for p, r in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, r.grad, atol=2e-3, rtol=2e-3)
    for b, r in zip(model.buffers(), eager.buffers()):
        torch.testing.assert_close(b.float(), r.float(), atol=2e-3, rtol=2e-3)
    assert mc.stats()[FUSED] == 1 and mc.stats()["conv_transpose2d_batch_norm_relu"] == 1


# --- the second chain: conv_transpose2d -> batch_norm -> tanh -> max_pool2d -> group_norm ---------
class BnBlock(nn.Module):
    """L2_11's block as a user writes it (scaled down)."""

    def __init__(self, act=None, ceil_mode=False, affine=True, track=True):
        super().__init__()
        self.conv = nn.ConvTranspose2d(8, 16, 5, padding=1)
        self.bn = nn.BatchNorm2d(16, affine=affine, track_running_stats=track)
        self.act = act or nn.Tanh()
        self.pool = nn.MaxPool2d(2, 2, ceil_mode=ceil_mode)
        self.gn = nn.GroupNorm(4, 16)

    def forward(self, x):
        return self.gn(self.pool(self.act(self.bn(self.conv(x)))))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine,track", [(True, True), (False, True), (True, False)])
def test_bn_chain_training_steps_match_eager_with_buffers(device, affine, track):
    import copy
    torch.manual_seed(0)
    model = BnBlock(affine=affine, track=track).to(device)
    ref = copy.deepcopy(model)
    mc.enable(devices=None)
    tol = _eager_tol(device)
    with no_cache():
        compiled = torch.compile(model, fullgraph=True)
        for _ in range(3):
            x = torch.randn(2, 8, 7, 6, device=device)
            out, expected = compiled(x), ref(x)
            _close(out, expected, tol)
            out.square().sum().backward()
            expected.square().sum().backward()
            for (name, p), q in zip(ref.named_parameters(), model.parameters()):
                _close(q.grad, p.grad, tol * 10)
        for (name, b), c in zip(ref.named_buffers(), model.buffers()):
            _close(c.to(b.dtype), b, tol)  # running_mean / running_var / num_batches_tracked
    assert mc.stats()[BN_CHAIN] == 1


@pytest.mark.parametrize("device", DEVICES)
def test_bn_chain_eval_inference_and_functional_form(device):
    torch.manual_seed(0)
    model = BnBlock().to(device).eval()
    model.bn.running_mean.normal_()
    model.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 8, 7, 6, device=device)
    mc.enable(devices=None)
    tol = _eager_tol(device)
    with no_cache(), torch.inference_mode():
        _close(torch.compile(model, fullgraph=True)(x), model(x), tol)
    w = torch.randn(8, 6, 3, 3, device=device)
    rm, rv = torch.zeros(6, device=device), torch.ones(6, device=device)

    def f(x):
        y = F.batch_norm(F.conv_transpose2d(x, w, stride=2, padding=1), rm, rv, training=True, momentum=0.2, eps=1e-3)
        return F.group_norm(F.max_pool2d(torch.tanh(y), (3, 2), stride=(2, 1), padding=1, dilation=(1, 2)), 3, eps=1e-4)

    rm_ref, rv_ref = rm.clone(), rv.clone()
    expected = F.group_norm(F.max_pool2d(torch.tanh(F.batch_norm(F.conv_transpose2d(x, w, stride=2, padding=1), rm_ref, rv_ref,
                                                                 training=True, momentum=0.2, eps=1e-3)),
                                         (3, 2), stride=(2, 1), padding=1, dilation=(1, 2)), 3, eps=1e-4)
    with no_cache(), torch.no_grad():
        _close(torch.compile(f, fullgraph=True)(x), expected, tol)
    _close(rm, rm_ref, tol)
    _close(rv, rv_ref, tol)
    assert mc.stats()[BN_CHAIN] == 2


@pytest.mark.parametrize("variant", ["relu instead of tanh", "ceil_mode", "conv output reused"])
def test_bn_chain_negative_cases(variant):
    model = BnBlock(act=nn.ReLU() if variant == "relu instead of tanh" else None, ceil_mode=variant == "ceil_mode").eval()
    if variant == "conv output reused":
        class Reuse(BnBlock):
            def forward(self, x):
                y = self.conv(x)
                return self.gn(self.pool(torch.tanh(self.bn(y)))).sum() + y.sum()
        model = Reuse().eval()
    x = torch.randn(2, 8, 7, 6)
    mc.enable(devices=None)
    with no_cache(), torch.no_grad():
        _close(torch.compile(model, fullgraph=True)(x), model(x), 1e-4)
    assert mc.stats()[BN_CHAIN] == 0


@needs_expecttest
class TestRewrittenBatchNormChain(ExpectTestCase or unittest.TestCase):
    def test_training_graph_after_rewrite(self):
        """The Dynamo graph the pre-grad pass leaves for a training BnBlock: BatchNorm's own
        num_batches_tracked bookkeeping stays, the chain becomes one call of the Python API."""
        from torch._inductor.custom_graph_pass import CustomGraphPass

        class Recorder(CustomGraphPass):
            def __init__(self):
                self.inner, self.ops = mc.MyopsFusionPass(devices=None), []

            def __call__(self, graph):
                self.inner(graph)
                self.ops = [getattr(n.target, "__name__", str(n.target)) for n in graph.nodes
                            if n.op in ("call_function", "call_method")]

            def uuid(self):
                return self.inner.uuid()

        recorder = Recorder()
        model = BnBlock()
        with no_cache(), torch._inductor.config.patch(pre_grad_custom_pass=recorder):
            out = torch.compile(model, fullgraph=True)(torch.randn(2, 8, 7, 6))
        self.assertExpectedInline("\n".join(recorder.ops), """\
add_
conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm""")
        self.assertEqual(out.shape, (2, 16, 4, 4))


MEASURED_MODELS = {  # model, the pattern measured, enable()'s options, the input's shape
    "gelu chain": (lambda: Block(4, 6, 3, 3, stride=2, padding=1), FUSED, {}, (2, 4, 7, 6)),
    "bn chain, train": (lambda: BnBlock(), BN_CHAIN, {}, (2, 8, 7, 6)),
    "bn chain, eval": (lambda: BnBlock().eval(), BN_CHAIN, {}, (2, 8, 7, 6)),
    "standalone conv": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2), "conv_transpose2d", dict(conv_transpose2d=True),
                        (2, 4, 7, 6)),
    "standalone 1-d conv": (lambda: nn.ConvTranspose1d(4, 6, 5, stride=3), "conv_transpose1d",
                            dict(conv_transpose2d=True), (2, 4, 9)),
    "family chain": (lambda: nn.Sequential(nn.ConvTranspose2d(4, 6, 3, stride=2), nn.BatchNorm2d(6), nn.ReLU()),
                     "conv_transpose2d_batch_norm_relu", {}, (2, 4, 7, 6)),
}


@pytest.mark.parametrize("fused_faster", [True, False])
@pytest.mark.parametrize("case", list(MEASURED_MODELS))
def test_measured_selection_follows_the_timings(case, fused_faster, monkeypatch):
    # The timings are given (the real ones would make the test depend on the machine), but both
    # callables of each candidate run on the random inputs the pass made from the graph's example
    # values, and must agree: the replacement and the chain as eager PyTorch runs it.
    make, pattern, options, shape = MEASURED_MODELS[case]
    model = make()
    x = torch.randn(shape)
    seen = []

    def fake_times(candidate, tensors, device, trained):
        assert device == "cpu" and candidate.pattern == pattern and trained == ()  # no gradient recorded
        assert all(t is None or (isinstance(t, torch.Tensor) and not isinstance(t, torch._subclasses.FakeTensor))
                   for t in tensors)
        _close(candidate.fused(*tensors), candidate.reference(*tensors), 1e-4)
        seen.append(candidate.pattern)
        return (1.0, 2.0) if fused_faster else (2.0, 1.0)

    monkeypatch.setattr(myops._measure, "chain_times", fake_times)
    mc.enable(devices=None, measure=True, **options)
    with no_cache(), torch.no_grad():
        compiled_matches_eager(model, x)
    assert seen == [pattern]
    assert mc.stats()[pattern] == int(fused_faster)


def test_measured_fused_op_takes_its_slower_layout_and_the_chain_its_faster(monkeypatch):
    # both as Inductor compiles them, their conv's input and weight as given and channels-last (a
    # 4-D conv; a 1-D one as given): the fused op must win in whichever layout the graph hands it,
    # the chain runs in the layout Inductor picks for it; eager calls where Inductor fails
    layouts = []

    def recording(kind):
        def fn(x, w, b):
            layouts.append((kind, x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
                            and w.is_contiguous(memory_format=torch.channels_last)))
            return x.sum() if b is None else b
        return fn

    candidate = myops._fx_match.Candidate("chain", [], recording("fused"), recording("chain"))
    times = {("fused", "as_given"): 2.5, ("fused", "channels_last"): 3.0, ("chain", "as_given"): 2.0,
             ("chain", "channels_last"): 1.0}
    monkeypatch.setattr(myops._measure, "median_ms_each", lambda fns, *a, **k: {
        label: (fn(), times[label])[1] for label, fn in fns.items()})
    x, w = torch.randn(2, 4, 5, 5), torch.randn(4, 6, 3, 3)
    compiled = []
    monkeypatch.setattr(myops._measure, "_inductor_compiled", lambda fn, ts: compiled.append(ts) or fn)
    assert myops._measure.chain_times(candidate, [x, w, None], "cpu") == (3.0, 1.0)
    assert sorted(layouts) == [("chain", False), ("chain", True), ("fused", False), ("fused", True)]
    assert len(compiled) == 4
    layouts.clear()
    assert myops._measure.chain_times(candidate, [x[:, :, 0], w[:, :, 0], None], "cpu") == (2.5, 2.0)
    assert sorted(layouts) == [("chain", False), ("fused", False)] and len(compiled) == 6

    def fails(fn, ts):
        raise RuntimeError("no")
    monkeypatch.setattr(myops._measure, "_inductor_compiled", fails)
    layouts.clear()
    assert myops._measure.chain_times(candidate, [x, w, None], "cpu") == (3.0, 1.0)
    assert len(layouts) == 4


@pytest.mark.parametrize("case", ["gelu chain", "bn chain, train", "family chain", "standalone conv"])
def test_measured_training_graph_is_decided_on_a_training_step(case, monkeypatch):
    # where autograd records the chain, the tensors that get gradients are timed as a training
    # step; the same model under no_grad, as a forward
    make, pattern, options, shape = MEASURED_MODELS[case]
    seen = []

    def fake_times(candidate, tensors, device, trained):
        seen.append(trained)
        return 1.0, 2.0
    monkeypatch.setattr(myops._measure, "chain_times", fake_times)
    mc.enable(devices=None, measure=True, **options)
    model = make()
    with no_cache():
        torch.compile(model, fullgraph=True)(torch.randn(shape)).sum().backward()
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(model, fullgraph=True)(torch.randn(shape))
    parameters = {"gelu chain": (1, 2, 3, 4), "bn chain, train": (1, 2, 5, 6, 7, 8), "family chain": (1, 2, 3, 4),
                  "standalone conv": (1, 2)}[case]  # the input has no gradient; running statistics neither
    assert seen == [parameters, ()]


def test_measured_training_step_is_forward_and_backward_as_one_graph():
    # the step timed for a training graph: the gradients autograd gives, from one compiled graph
    # (the chain's and the fused op's: no backward compiled lazily inside the running compilation)
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 4, 7, 6), torch.randn(4, 6, 3, 3), None
    nw, nb = torch.rand(6) + 0.5, torch.randn(6)
    chain = lambda x, w, b, nw, nb: torch.relu(F.batch_norm(F.conv_transpose2d(x, w, b, 2), None, None, nw, nb,
                                                             training=True))
    fused = lambda x, w, b, nw, nb: myops.conv_transpose2d_norm_act(x, w, b, 2, norm="batch_norm", norm_weight=nw,
                                                                    norm_bias=nb, activation="relu")
    tensors, trained = [x, w, b, nw, nb], (0, 1, 3, 4)
    leaves = [t.detach().requires_grad_() for t in (x, w, nw, nb)]
    out = chain(leaves[0], leaves[1], None, *leaves[2:])
    grad_out = torch.randn_like(out)
    expected = torch.autograd.grad(out, leaves, grad_out)
    mc.enable(devices=None)
    for fn in (chain, fused):
        step, args = myops._measure._timed_call(fn, tensors, trained)
        assert len(args) == 6 and args[5].shape == out.shape
        args[5] = grad_out
        with torch.no_grad():
            for grads in (step(*args), myops._measure._inductor_compiled(step, args)(*args)):
                for g, e in zip(grads, expected, strict=True):
                    _close(g, e, 1e-4)


def test_measured_chain_is_inductors_own_compilation():
    # the reference timed is Inductor's compiled chain: same values as eager, and compiled without
    # the myops pass although it runs inside a compilation with the pass installed
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 4, 7, 6), torch.randn(4, 6, 3, 3), None
    reference = lambda x, w, b: torch.relu(F.batch_norm(F.conv_transpose2d(x, w, b, 2), None, None, training=True))
    mc.enable(devices=None)
    mc.reset_stats()
    compiled = myops._measure._inductor_compiled(reference, [x, w, b])
    torch.testing.assert_close(compiled(x, w, b), reference(x, w, b), atol=1e-5, rtol=1e-5)
    assert not any(mc.stats().values())


def test_measured_selection_times_for_real_logs_and_remembers(caplog):
    model = Block(4, 6, 3, 3)
    mc.enable(devices=None, measure=True)
    with caplog.at_level(logging.INFO, logger="myops.compile"), no_cache(), torch.no_grad():
        compiled_matches_eager(model, torch.randn(2, 4, 9, 9))
        decisions = [r.getMessage() for r in caplog.records if "myops.compile: conv" in r.getMessage()]
        assert len(decisions) == 1 and "the chain" in decisions[0], decisions
        assert mc.stats()[FUSED] == int("rewritten" in decisions[0])
        torch._dynamo.reset()  # the same chain compiled again: the decision is not timed again
        compiled_matches_eager(model, torch.randn(2, 4, 9, 9))
    again = [r.getMessage() for r in caplog.records if "myops.compile: conv" in r.getMessage()][1:]
    assert len(again) == 1 and "measured earlier in this process" in again[0], again
    assert mc.stats()[FUSED] == 2 * int("rewritten" in decisions[0])


@pytest.mark.parametrize("make", [lambda: nn.Sequential(nn.ConvTranspose2d(4, 6, 4, 2, 1), nn.BatchNorm2d(6), nn.ReLU()),
                                  lambda: Block(4, 6, 3, 3)], ids=["family chain", "gelu chain"])
def test_measured_training_graph_times_for_real(make, caplog):
    # a training graph measured for real on the CPU: both candidates' training steps compiled by
    # Inductor (no eager fallback), decided on them, and the step's results as eager PyTorch's
    import copy
    torch.manual_seed(0)
    model = make()
    eager = copy.deepcopy(model)
    x = torch.randn(2, 4, 7, 6)
    mc.enable(devices=None, measure=True)
    with caplog.at_level(logging.INFO, logger="myops.compile"), no_cache():
        out = torch.compile(model, fullgraph=True)(x)
        out.square().sum().backward()
    decisions = [r.getMessage() for r in caplog.records if "(training step: fused" in r.getMessage()]
    assert len(decisions) == 1, [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "myops.compile"]
    ref = eager(x)
    ref.square().sum().backward()
    _close(out, ref, 1e-4)
    for p, r in zip(model.parameters(), eager.parameters(), strict=True):
        # (a conv bias before GroupNorm: its gradient is a sum that nearly cancels, float32 rounding)
        torch.testing.assert_close(p.grad, r.grad, atol=1e-3, rtol=1e-4)
    for b, r in zip(model.buffers(), eager.buffers(), strict=True):
        torch.testing.assert_close(b, r, atol=1e-5, rtol=1e-5)


def test_measured_selection_skips_dynamic_shapes(caplog, monkeypatch):
    monkeypatch.setattr(myops._measure, "chain_times", lambda *a: pytest.fail("dynamic shapes must not be measured"))
    mc.enable(devices=None, measure=True)
    with caplog.at_level(logging.INFO, logger="myops.compile"), no_cache(), torch.no_grad():
        compiled_matches_eager(Block(4, 6, 3, 3), torch.randn(2, 4, 9, 9), dynamic=True)
    assert any("not measured (dynamic shapes)" in r.getMessage() for r in caplog.records)
    assert mc.stats()[FUSED] == 1
    with pytest.raises(ValueError, match=r"myops.compile.enable: argument 'measure' must be a bool"):
        mc.enable(measure="yes")
