"""torch.compile integration: rewrites conv_transpose2d -> gelu -> group_norm (and
conv_transpose2d -> batch_norm -> tanh -> max_pool2d -> group_norm) in unmodified models.

    import myops.compile
    myops.compile.enable()            # or: with myops.compile.enabled(): ...
    model = torch.compile(model)      # chains now run as torch.ops.myops.conv_transpose2d_gelu_group_norm
    myops.compile.stats()             # {"conv_transpose2d_gelu_group_norm": 1, "conv_transpose2d": 0}

Where in the pipeline: Inductor's pre-grad custom pass, i.e. on the Dynamo graph *before*
AOTAutograd. There F.gelu / F.group_norm are still whole calls, and AOTAutograd then traces the
fused op with its own autograd formula, so training graphs save the fused op's inputs and get
its gradients (a post-grad rewrite would only see the forward half of a joint graph, with gelu
and group_norm already decomposed). The pass is a CustomGraphPass whose uuid() covers this module's
source and the options, so Inductor's FX graph cache keys compiled graphs by it: a graph compiled
without the pass is never reused with it, and vice versa. While enabled, the pass runs before the
cache lookup (Inductor's "early" pre-grad timing), so stats() counts graphs served from the cache too.

Standalone transposed convolutions (outside the chains): by default (conv_transpose2d="auto") every
one on CUDA becomes myops.conv_transpose2d, which times cuDNN in both layouts against its own kernels
at the first call of each shape and keeps the fastest (myops.explain shows the choice), so that it
never loses to the cuDNN call Inductor makes; on other devices only the image heads after a
rewritten chain (<= 4 output channels per group, input produced by a myops op).

Which devices: by default the pass rewrites chains on CUDA tensors only. On the CPU the ops run
oneDNN's convolution (as Inductor does) and their own passes: about as fast as Inductor's own
chains, not faster, so the default leaves them to it. ``enable(devices=None)`` rewrites on every
device.

Measured selection (``enable(measure=True)``): each matched chain is timed at compile time, on
the graph's shapes and device with random inputs: the fused op in its traced form and the chain
without the rewrite, each compiled by Inductor as a small graph of its own, each with its conv's
input and weight as given and channels-last (Inductor lays out a graph's convolutions
channels-last where that pays, always on the CPU, so the layout the fused op receives depends on
the graph around it), and rewritten only where the fused op in its slower layout beats the chain
in its faster. Where autograd records the chain (a training graph), each is timed
as a training step: its forward and its backward to the tensors that get gradients, traced as
one graph; otherwise as a forward. Each chain kind and shape costs four more Inductor
compilations (two for a 1-D conv; where they fail, eager calls are timed). Graphs with dynamic shapes are
not measured.
"""
import contextlib
import functools
import hashlib
import logging
from typing import Dict, Iterable, Optional, Tuple, Union

import torch
import torch._inductor.config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

from . import _autocast, _chains, _distributed, _fx_match, _measure, backends, norm_act, ops

log = logging.getLogger("myops.compile")

# myops.backends options read while a replacement is traced (part of the pass's uuid)
_TRACED_OPTIONS = ("recompute_conv",)
_SEED_KINDS = ("conv_transpose2d_gelu_group_norm", "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm",
               "conv_transpose2d")
_stats: Dict[str, int] = dict.fromkeys(_SEED_KINDS, 0)  # chains rewritten, by kind
_found: Dict[str, int] = dict.fromkeys(_SEED_KINDS, 0)  # chains found, by kind


def _rewrite(graph: torch.fx.Graph, **options) -> Dict[str, int]:
    """The seed chains' matchers, the conv + norm + activation family's templates, then the
    standalone convs; counts found and rewritten chains per kind (stats()); returns this graph's
    rewrites."""
    accept, devices = options.get("accept"), options.get("devices")
    standalone = options.pop("standalone_conv", False)
    counts = _fx_match.rewrite_graph(graph, **options)
    found: Dict[str, int] = dict(counts)
    _chains.rewrite_chains(graph, devices, found, counts, accept, standalone)
    _fx_match.route_standalone_convs(graph, standalone, devices, accept, counts, found)
    for name, n in found.items():
        _found[name] = _found.get(name, 0) + n
        _stats.setdefault(name, 0)  # (a kind found is listed, rewritten or not)
    for name, n in counts.items():
        _stats[name] = _stats.get(name, 0) + n
    return counts


@functools.lru_cache(maxsize=None)
def _source_hash() -> str:
    """Hash of the rewrite's source (read once: uuid() is called on every compilation)."""
    h = hashlib.sha256()
    # ops, norm_act: the replacements; _measure: the measured selection's decisions; _autocast:
    # what the replacements trace to under autocast
    for path in (_fx_match.__file__, _chains.__file__, _measure.__file__, ops.__file__, norm_act.__file__,
                 _autocast.__file__, __file__):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


Devices = Optional[Union[str, Iterable[str]]]
DEFAULT_DEVICES = ("cuda",)


def _device_types(devices: Devices, op: str) -> Optional[Tuple[str, ...]]:
    """devices as a sorted tuple of device types (None: every device)."""
    if devices is None:
        return None
    try:
        entries = (devices,) if isinstance(devices, (str, torch.device)) else tuple(devices)
        if not entries or not all(isinstance(d, (str, torch.device)) for d in entries):
            raise TypeError
        return tuple(sorted({torch.device(d).type for d in entries}))
    except (TypeError, RuntimeError) as e:
        raise ValueError(f"{op}: argument 'devices' must be None or device types such as ('cuda',), "
                         f"got {devices!r}") from e


class MyopsFusionPass(CustomGraphPass):
    """The rewrite as an Inductor pre-grad pass (optionally chained after a pass that was set)."""

    def __init__(self, conv_transpose2d: _fx_match.StandaloneConv = "auto",
                 devices: Optional[Tuple[str, ...]] = DEFAULT_DEVICES,
                 chained: Optional[object] = None, measure: bool = False, chained_timing: Optional[str] = None):
        self.conv_transpose2d = conv_transpose2d
        self.devices = devices
        self.measure = measure
        self.chained = chained
        self.chained_timing = chained_timing  # Inductor's pre-grad timing before enable(), restored by disable()

    def options(self):
        return dict(conv_transpose2d=self.conv_transpose2d, devices=self.devices, measure=self.measure)

    def __call__(self, graph: torch.fx.Graph) -> None:
        if self.chained is not None:
            self.chained(graph)
        self.rewrite(graph)

    def rewrite(self, graph: torch.fx.Graph) -> None:
        """The rewrite alone (without a chained pass): also run on a DDP model's whole graph
        before Dynamo splits it at bucket boundaries (_distributed)."""
        counts = _rewrite(graph, standalone_conv=self.conv_transpose2d, split_normalize=True, devices=self.devices,
                          accept=_measure.faster_than_inductor if self.measure else None)
        if any(counts.values()):
            log.info("myops.compile: replaced %s", {k: v for k, v in counts.items() if v})

    def uuid(self):
        chained = getattr(self.chained, "uuid", lambda: None)() if self.chained is not None else None
        devices = "all" if self.devices is None else "+".join(self.devices)
        # the myops.backends options the replacements read when traced change the compiled graph too
        traced = "-".join(f"{name}{backends.get_option(name)}" for name in _TRACED_OPTIONS)
        return (f"myops-{_source_hash()}-conv{self.conv_transpose2d}-{devices}-measure{int(self.measure)}-{traced}"
                f"-{chained}")


# Inductor's setting for when pre-grad passes run: "late" (torch's default for a pass with a uuid)
# skips them on a cache hit. Torch versions without it run them before the lookup.
_TIMING = "pre_grad_pass_timing"


def enable(*, conv_transpose2d: _fx_match.StandaloneConv = "auto", devices: Devices = DEFAULT_DEVICES,
           measure: bool = False) -> None:
    """Installs the rewrite into torch.compile's default (Inductor) pipeline. Idempotent; calling
    it again with other options replaces them. Like any Inductor setting it applies to
    compilations that happen afterwards: a function torch.compile already compiled keeps its
    graph until it recompiles (torch._dynamo.reset() forces that).

    Args:
        conv_transpose2d: which standalone transposed convolutions (outside the chains) go to
            myops.conv_transpose2d (or conv_transpose1d): True all, False none, "auto" (default)
            every one on CUDA (the op's timed choice keeps cuDNN where cuDNN is faster), elsewhere
            the image heads after a rewritten chain (see the module docstring).
        devices: device types whose chains are rewritten (default: CUDA only, where the fused
            kernels are faster; see the module docstring); None: every device.
        measure: rewrite a chain only where the fused op, timed at compile time on the graph's
            shapes, beats the chain as Inductor compiles it (see the module docstring).
    """
    if not isinstance(measure, bool):
        raise ValueError(f"myops.compile.enable: argument 'measure' must be a bool, got {measure!r}")
    if not (isinstance(conv_transpose2d, bool) or conv_transpose2d == "auto"):
        raise ValueError("myops.compile.enable: argument 'conv_transpose2d' must be True, False or \"auto\", "
                         f"got {conv_transpose2d!r}")
    types = _device_types(devices, "myops.compile.enable")
    current = inductor_config.pre_grad_custom_pass
    if isinstance(current, MyopsFusionPass):
        if current.options() == dict(conv_transpose2d=conv_transpose2d, devices=types, measure=measure):
            return
        previous, timing = current.chained, current.chained_timing
    else:
        previous, timing = current, getattr(inductor_config, _TIMING, None)
    inductor_config.pre_grad_custom_pass = MyopsFusionPass(conv_transpose2d, types, chained=previous, measure=measure,
                                                           chained_timing=timing)
    _distributed.install(_rewrite_with_enabled_pass)
    if timing is not None:
        # the pass must see every graph, including those the AOTAutograd cache serves, for stats()
        setattr(inductor_config, _TIMING, "early")


def _rewrite_with_enabled_pass(graph: torch.fx.Graph) -> None:
    current = inductor_config.pre_grad_custom_pass
    if isinstance(current, MyopsFusionPass):
        current.rewrite(graph)


def disable() -> None:
    """Removes the rewrite (restoring a pre-grad pass that was set before enable(), and Inductor's
    pre-grad timing)."""
    _distributed.uninstall()
    current = inductor_config.pre_grad_custom_pass
    if isinstance(current, MyopsFusionPass):
        inductor_config.pre_grad_custom_pass = current.chained
        if current.chained_timing is not None:
            setattr(inductor_config, _TIMING, current.chained_timing)


def is_enabled() -> bool:
    return isinstance(inductor_config.pre_grad_custom_pass, MyopsFusionPass)


@contextlib.contextmanager
def enabled(**options):
    """``with myops.compile.enabled(): ...``: enable() inside the block, the previous state after."""
    was = inductor_config.pre_grad_custom_pass
    enable(**options)
    try:
        yield
    finally:
        if not isinstance(was, MyopsFusionPass):
            disable()
        else:
            enable(**was.options())


def stats(found: bool = False) -> Dict[str, int]:
    """{chain kind: chains rewritten} since reset_stats(), in this process: by each compilation,
    including those whose compiled graph Inductor's caches served. found=True: the chains found,
    rewritten or not (each one left alone is logged with its reason on the "myops.compile"
    logger, at INFO). Kinds name the chain's steps, e.g. conv_transpose2d_batch_norm_relu."""
    return dict(_found if found else _stats)


def reset_stats() -> None:
    for counts in (_stats, _found):
        counts.clear()
        counts.update(dict.fromkeys(_SEED_KINDS, 0))


def fuse(graph_module: torch.fx.GraphModule, *, conv_transpose2d: _fx_match.StandaloneConv = False,
         devices: Devices = None) -> int:
    """Applies the rewrite to an FX GraphModule (e.g. ``torch.export.export(...).module()`` or its
    ``graph_module``) in place and returns the number of replacements. An explicit request, so by
    default on every device (``devices`` as in enable())."""
    counts = _rewrite(graph_module.graph, standalone_conv=conv_transpose2d,
                      devices=_device_types(devices, "myops.compile.fuse"))
    graph_module.graph.lint()
    graph_module.recompile()
    return sum(counts.values())
