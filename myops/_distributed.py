"""The rewrite under DistributedDataParallel. Dynamo's DDPOptimizer splits a compiled DDP model's
graph at gradient-bucket boundaries and hands Inductor one piece at a time, so the pre-grad pass
would see a chain cut in two wherever a boundary falls between its conv and its normalisation.
While the rewrite is enabled, the split's entry point (DDPOptimizer.compile_fn, not public API:
a torch without it keeps the plain behaviour) first runs the rewrite over the whole graph; each
chain is then one node, which no boundary cuts."""
import functools
from typing import Callable, Optional

import torch

_original: Optional[Callable] = None


def _ddp_optimizer_class():
    try:
        from torch._dynamo.backends.distributed import DDPOptimizer
    except ImportError:  # a torch built without distributed
        return None
    return DDPOptimizer if callable(getattr(DDPOptimizer, "compile_fn", None)) else None


def install(rewrite: Callable[[torch.fx.Graph], None]) -> None:
    """DDPOptimizer.compile_fn runs rewrite(graph) on the whole graph before splitting it."""
    global _original
    cls = _ddp_optimizer_class()
    if cls is None:
        return
    split = _original if _original is not None else cls.compile_fn

    @functools.wraps(split)
    def compile_fn(self, gm, example_inputs, **kwargs):
        rewrite(gm.graph)
        gm.recompile()
        return split(self, gm, example_inputs, **kwargs)

    _original = split
    cls.compile_fn = compile_fn


def uninstall() -> None:
    global _original
    cls = _ddp_optimizer_class()
    if cls is not None and _original is not None:
        cls.compile_fn = _original
    _original = None
