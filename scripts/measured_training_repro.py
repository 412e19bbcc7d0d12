"""One training step of the DCGAN generator (bfloat16, batch 256, CUDA) compiled with
myops.compile.enable(measure=True): on an H100 (torch 2.11) it failed Inductor's stride check on
the first conv's weight gradient (aten.convolution_backward returned [100, 512, 4, 4] contiguous
where the compiled graph expected channels-last), with some BatchNorm chains rewritten and the
others left to Inductor. Runs the step as measured, then with Inductor's layout optimisation off;
prints Inductor's layout decision per graph and, on a failure, the generated code before it."""
import logging
import sys
import traceback
from pathlib import Path

import torch
import torch._inductor.graph as inductor_graph

import myops
import myops.compile as mc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "compile_demos"))
import architectures  # noqa: E402


def _logged_layout_decision():
    decide = inductor_graph.GraphLowering.decide_layout_opt

    def logged(gm, *, is_inference):
        choice = decide(gm, is_inference=is_inference)
        convs = sum(n.target is torch.ops.aten.convolution.default for n in gm.graph.nodes)
        print(f"layout optimisation: {choice} (inference={is_inference}, {convs} aten convolutions)")
        return choice
    inductor_graph.GraphLowering.decide_layout_opt = staticmethod(logged)


def _generated_code_before(error):
    for frame in traceback.extract_tb(error.__traceback__):
        if "torchinductor" in frame.filename:
            lines = Path(frame.filename).read_text().splitlines()
            for line in lines[max(0, frame.lineno - 45):frame.lineno]:
                print("  |", line[:220])


def step(label, **inductor_options):
    print(f"===== {label} {inductor_options}", flush=True)
    torch._dynamo.reset()
    myops._measure.decisions.clear()
    torch.manual_seed(0)
    model = architectures.DCGANGenerator().cuda().to(torch.bfloat16).train()
    z = torch.randn(256, 100, 1, 1, device="cuda", dtype=torch.bfloat16)
    mc.reset_stats()
    mc.enable(devices=("cuda",), measure=True)
    try:
        with torch._inductor.config.patch(fx_graph_cache=False, **inductor_options), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            torch.compile(lambda z: model(z), fullgraph=True)(z).float().square().mean().backward()
        print("ok", mc.stats())
    except Exception as e:  # noqa: BLE001 - the failure is what this script shows
        print("failed:", type(e).__name__, str(e)[:300], mc.stats())
        _generated_code_before(e)
    finally:
        mc.disable()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("myops.compile").setLevel(logging.INFO)
    _logged_layout_decision()
    step("measured")
    step("measured, no layout optimisation", layout_optimization=False)
