"""The compile pass's measured selection (myops.compile.enable(measure=True)): a matched chain is
rewritten only where the fused op, timed at compile time on random tensors with the graph's sizes,
strides, dtype and device, beats the chain as Inductor compiles it without the rewrite."""
import functools
import logging
from typing import Callable, Dict, Optional, Tuple

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


def chain_times(candidate: Candidate, tensors, device: str) -> Tuple[float, float]:
    """Median ms of the fused op and of the chain, each as a compiled graph runs it: the fused op
    in its traced form and the chain as the rewrite would otherwise leave it, compiled by Inductor
    (their own graphs, without the pass), on the same tensors. The chain's time is the faster of
    its conv's input and weight as given and channels-last: in a model's graph Inductor lays
    convolutions out channels-last where that pays, the layout copies at the graph's edges, so the
    rewrite must beat that form too. Where Inductor cannot compile them, both run eagerly."""
    forms = {"as_given": list(tensors)}
    if tensors[0].dim() == 4:
        forms["channels_last"] = [t.contiguous(memory_format=torch.channels_last) for t in tensors[:2]] + list(
            tensors[2:])
    try:
        fns = {"fused": functools.partial(_inductor_compiled(candidate.fused, tensors), *tensors),
               **{f"inductor_{name}": functools.partial(_inductor_compiled(candidate.reference, ts), *ts)
                  for name, ts in forms.items()}}
    except Exception as e:  # noqa: BLE001 - eager calls stand in
        log.warning("myops.compile: %s: Inductor could not compile the candidates to time them (%s: %s); timed "
                    "in eager mode instead", candidate.pattern, type(e).__name__, e)
        fns = {"fused": functools.partial(candidate.fused, *tensors),
               **{f"eager_{name}": functools.partial(candidate.reference, *ts) for name, ts in forms.items()}}
    times = median_ms_each(fns, device, warmup=2, reps=5)
    return times.pop("fused"), min(times.values())


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
    key = (candidate.pattern, candidate.scalars,
           tuple(None if m is None else (tuple(m.shape), m.stride(), m.dtype, str(m.device)) for m in metas))
    if key in decisions:
        log.info("myops.compile: %s %s (measured earlier in this process)", candidate.pattern,
                 "rewritten" if decisions[key] else "left to Inductor")
        return decisions[key]
    keep = _timed_decision(candidate, metas, present, device)
    if keep is None:  # not measured (not remembered: the failure may be transient)
        return True
    decisions[key] = keep
    return keep


def _timed_decision(candidate: Candidate, metas, present, device: str) -> Optional[bool]:
    """The timed comparison, logged; None where it could not run."""
    try:
        # the pass runs while Inductor's fake-tensor mode may be active: real tensors, real kernels
        with torch._subclasses.fake_tensor.unset_fake_temporarily(), torch.no_grad():
            tensors = [None if m is None else _random_like(m) for m in metas]
            fused_ms, chain_ms = chain_times(candidate, tensors, device)
    except Exception as e:  # noqa: BLE001 - a failed measurement leaves the default decision
        log.warning("myops.compile: %s could not be measured (%s: %s); rewritten", candidate.pattern,
                    type(e).__name__, e)
        return None
    keep = fused_ms <= chain_ms
    log.info("myops.compile: %s %s (fused %.3f ms, the chain %.3f ms in its faster layout, %s)",
             candidate.pattern, "rewritten" if keep else "left to Inductor", fused_ms, chain_ms,
             list(present[0].shape))
    return keep
