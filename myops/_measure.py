"""The compile pass's measured selection (myops.compile.enable(measure=True)): a matched chain is
rewritten only where the fused op, timed at compile time on random tensors with the graph's sizes,
strides, dtype and device, beats the chain as Inductor compiles it without the rewrite."""
import functools
import logging
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch._inductor
import torch._inductor.config as inductor_config
from torch.fx.experimental.proxy_tensor import make_fx

from ._fx_match import Candidate, tensor_meta
from ._timing import median_ms_each

log = logging.getLogger("myops.compile")


def _random_like(meta: torch.Tensor) -> torch.Tensor:
    """A real tensor with the example value's sizes, strides, dtype and device; values in [0.5, 1.5)
    (valid for every argument, running variances included)."""
    return torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device=meta.device).uniform_(0.5, 1.5)


def chain_times(candidate: Candidate, tensors, device: str, trained: Tuple[int, ...] = ()) -> Tuple[float, float]:
    """Median ms of the fused op and of the chain, each as a compiled graph runs it: the fused op
    in its traced form and the chain as the rewrite would otherwise leave it, compiled by Inductor
    (their own graphs, without the pass), on the same tensors. Each is timed with its conv's input
    and weight as given and, for a 2-D conv, channels-last: the fused op's time is its slower one
    (the layout its input arrives in depends on the graph around it: Inductor lays a graph's
    convolutions out channels-last where that pays, always on the CPU), the chain's its faster one
    (Inductor picks the layout of its own conv), so that a rewrite does not lose in either. With
    trained (the indices of the tensors that get gradients), each times a training step: the
    forward and the backward to those tensors. Where Inductor cannot compile them, both run
    eagerly."""
    forms = {"as_given": list(tensors)}
    if tensors[0].dim() == 4:
        forms["channels_last"] = [t.contiguous(memory_format=torch.channels_last) for t in tensors[:2]] + list(
            tensors[2:])
    calls = {(kind, name): _timed_call(fn, ts, trained) for name, ts in forms.items()
             for kind, fn in (("fused", candidate.fused), ("chain", candidate.reference))}
    try:
        fns = {key: functools.partial(_inductor_compiled(fn, args), *args) for key, (fn, args) in calls.items()}
    except Exception as e:  # noqa: BLE001 - eager calls stand in
        log.warning("myops.compile: %s: Inductor could not compile the candidates to time them (%s: %s); timed "
                    "in eager mode instead", candidate.pattern, type(e).__name__, e)
        fns = {key: functools.partial(fn, *args) for key, (fn, args) in calls.items()}
    times = median_ms_each(fns, device, warmup=2, reps=5)
    return (max(ms for (kind, _), ms in times.items() if kind == "fused"),
            min(ms for (kind, _), ms in times.items() if kind == "chain"))


def _timed_call(fn, tensors, trained: Tuple[int, ...]):
    """(function, arguments) to time for fn on tensors: fn itself, or with trained its training
    step, whose further arguments are random gradients of its outputs."""
    if not trained:
        return fn, list(tensors)
    with torch.enable_grad():
        grads = [torch.randn_like(out) for out in _recorded(fn(*_with_leaves(tensors, trained)[0]))]
    return _training_step(fn, len(tensors), trained), [*tensors, *grads]


def _with_leaves(tensors, trained: Tuple[int, ...]):
    """(tensors with those at trained replaced by leaves that require grad, those leaves)."""
    tensors = list(tensors)
    leaves = [tensors[i].detach().requires_grad_() for i in trained]
    for i, leaf in zip(trained, leaves):
        tensors[i] = leaf
    return tensors, leaves


def _recorded(out) -> List[torch.Tensor]:
    """The tensors of an output (a tensor or a tuple of them) that autograd records."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [t for t in outs if isinstance(t, torch.Tensor) and t.grad_fn is not None]


def _training_step(fn, n: int, trained: Tuple[int, ...]) -> Callable[..., Tuple[torch.Tensor, ...]]:
    """fn's training step as one function of its n tensors and its outputs' gradients: the forward,
    then the backward to the tensors at trained; it returns their gradients (traced by make_fx,
    both directions are one graph: nothing is compiled lazily at the first backward)."""
    def step(*args):
        with torch.enable_grad():
            tensors, leaves = _with_leaves(args[:n], trained)
            grads = torch.autograd.grad(_recorded(fn(*tensors)), leaves, args[n:], allow_unused=True)
        return tuple(g for g in grads if g is not None)
    return step


def _inductor_compiled(fn, tensors) -> Callable[..., object]:
    """fn (a function of tensors, None where absent; no gradient recorded) as Inductor compiles it
    for these tensors' sizes, strides and dtypes: traced to aten ops with fake tensors (so that
    myops' API takes its traced form) and compiled now, outside the running compilation (its
    pre-grad pass off: no rewrite, no recursion; no tracing context of its own)."""
    present = [i for i, t in enumerate(tensors) if t is not None]

    def on_present(*given):
        full = list(tensors)
        for i, t in zip(present, given):
            full[i] = t
        return fn(*full)
    args = [tensors[i] for i in present]
    # (the running compilation's tracing context left out: its fake mode and shape guards are its
    # own; not under CUDA graphs either, which a reduce-overhead compilation around it may have set)
    with torch._guards.tracing(None), inductor_config.patch({"pre_grad_custom_pass": None,
                                                             "triton.cudagraphs": False}):
        compiled = torch._inductor.compile(make_fx(on_present, tracing_mode="fake")(*args), args)
    return lambda *given: compiled(*[given[i] for i in present])


# measured decisions of this process, by chain: pattern, scalars, each tensor's sizes / strides /
# dtype / device (a recompilation, e.g. after torch._dynamo.reset(), does not time them again)
decisions: Dict[tuple, bool] = {}


def _has_graph_values(v) -> bool:
    """Whether a (nested) scalar argument holds a graph value (a dynamic int)."""
    if isinstance(v, torch.fx.Node):
        return True
    return isinstance(v, (tuple, list)) and any(_has_graph_values(e) for e in v)


def faster_than_inductor(candidate: Candidate) -> bool:
    """Whether the fused op beats the chain as Inductor compiles it, on the graph's shapes. Chains that cannot be measured (dynamic shapes, devices other than CPU / CUDA, a
    failure such as running out of memory) are rewritten, as without measurement."""
    metas = [None if n is None else tensor_meta(n) for n in candidate.tensors]
    present = [m for m in metas if m is not None]
    if len(present) != sum(n is not None for n in candidate.tensors):
        return True
    static = (all(isinstance(v, int) for m in present for v in (*m.shape, *m.stride()))
              and not _has_graph_values(candidate.scalars))
    device = present[0].device.type
    if not static or device not in ("cpu", "cuda"):
        log.info("myops.compile: %s not measured (%s)", candidate.pattern,
                 "dynamic shapes" if not static else f"device {device}")
        return True
    trained = _trained(candidate, metas)
    key = (candidate.pattern, candidate.scalars, trained,
           tuple(None if m is None else (tuple(m.shape), m.stride(), m.dtype, str(m.device)) for m in metas))
    if key in decisions:
        log.info("myops.compile: %s %s (measured earlier in this process)", candidate.pattern,
                 "rewritten" if decisions[key] else "left to Inductor")
        return decisions[key]
    keep = _timed_decision(candidate, metas, present, device, trained)
    if keep is None:  # not measured (not remembered: the failure may be transient)
        return True
    decisions[key] = keep
    return keep


def _trained(candidate: Candidate, metas) -> Tuple[int, ...]:
    """The indices of the chain's tensors that get gradients where autograd records the chain (a
    training graph), else none: a training graph is decided on its training step's time."""
    out = tensor_meta(candidate.output) if candidate.output is not None else None
    if out is None or not out.requires_grad:
        return ()
    return tuple(i for i, m in enumerate(metas) if m is not None and m.requires_grad)


def _timed_decision(candidate: Candidate, metas, present, device: str, trained: Tuple[int, ...]) -> Optional[bool]:
    """The timed comparison, logged; None where it could not run."""
    try:
        # the pass runs while Inductor's fake-tensor mode may be active: real tensors, real kernels
        with torch._subclasses.fake_tensor.unset_fake_temporarily(), torch.no_grad():
            tensors = [None if m is None else _random_like(m) for m in metas]
            fused_ms, chain_ms = chain_times(candidate, tensors, device, trained)
    except Exception as e:  # noqa: BLE001 - a failed measurement leaves the default decision
        log.warning("myops.compile: %s could not be measured (%s: %s); rewritten", candidate.pattern,
                    type(e).__name__, e)
        return None
    keep = fused_ms <= chain_ms
    log.info("myops.compile: %s %s (%s: fused %.3f ms in its slower layout, the chain %.3f ms in its faster, %s)",
             candidate.pattern, "rewritten" if keep else "left to Inductor",
             "training step" if trained else "forward", fused_ms, chain_ms, list(present[0].shape))
    return keep
