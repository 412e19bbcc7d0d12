"""The conv + normalisation + activation family's chain templates, as tables: which calls are a
normalisation, which an activation (module, functional, in-place and method forms, the aten ops of
export graphs), and how a chain of them after a transposed convolution is matched, in either
order. Each found chain is rewritten to one myops.conv_transpose2d_norm_act call, or left alone
with its reason logged.

A chain's kind names its steps in order: conv_transpose2d_batch_norm_relu (norm, then activation),
conv_transpose2d_gelu_group_norm (activation, then norm), conv_transpose2d_instance_norm (no
activation), conv_transpose2d_tanh (no normalisation: the activation in the conv's epilogue).
"""
import logging
import numbers
import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import fx

from . import _fx_match as fm
from .norm_act import activation_fn, conv_transpose1d_norm_act, conv_transpose2d_norm_act

aten = torch.ops.aten
log = logging.getLogger("myops.compile")

# target -> (activation, argument names, defaults); F.<name> with inplace=True mutates its input,
# which is the chain's own intermediate here (single user), so it is the same function
_ACTIVATION_FUNCTIONS = {
    F.relu: ("relu", ["input", "inplace"], {"inplace": False}),
    torch.relu: ("relu", ["input"], {}),
    torch.relu_: ("relu", ["input"], {}),
    F.leaky_relu: ("leaky_relu", ["input", "negative_slope", "inplace"], {"negative_slope": 0.01, "inplace": False}),
    F.leaky_relu_: ("leaky_relu", ["input", "negative_slope"], {"negative_slope": 0.01}),
    F.silu: ("silu", ["input", "inplace"], {"inplace": False}),
    F.gelu: ("gelu", ["input", "approximate"], {"approximate": "none"}),
    torch.tanh: ("tanh", ["input"], {}),
    F.tanh: ("tanh", ["input"], {}),
    torch.sigmoid: ("sigmoid", ["input"], {}),
    F.sigmoid: ("sigmoid", ["input"], {}),
    aten.relu.default: ("relu", ["input"], {}),
    aten.relu_.default: ("relu", ["input"], {}),
    aten.leaky_relu.default: ("leaky_relu", ["input", "negative_slope"], {"negative_slope": 0.01}),
    aten.silu.default: ("silu", ["input"], {}),
    aten.gelu.default: ("gelu", ["input", "approximate"], {"approximate": "none"}),
    aten.tanh.default: ("tanh", ["input"], {}),
    aten.sigmoid.default: ("sigmoid", ["input"], {}),
}
# x.<method>() -> activation
_ACTIVATION_METHODS = {"relu": "relu", "relu_": "relu", "tanh": "tanh", "tanh_": "tanh", "sigmoid": "sigmoid",
                       "sigmoid_": "sigmoid"}

_NORM_ARGS = ["input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"]
_NORM_DEFAULTS = {"running_mean": None, "running_var": None, "weight": None, "bias": None, "momentum": 0.1,
                  "eps": 1e-5}
# aten.batch_norm / aten.instance_norm (torch.export graphs): the affine parameters first
_ATEN_NORM_ARGS = ["input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps",
                   "cudnn_enabled"]
# target -> (normalisation, argument names, defaults); F.instance_norm's use_input_stats is named
# training here, as the API takes it
_NORM_FUNCTIONS = {
    F.batch_norm: ("batch_norm", _NORM_ARGS, {**_NORM_DEFAULTS, "training": False}),
    F.instance_norm: ("instance_norm", _NORM_ARGS, {**_NORM_DEFAULTS, "training": True}),
    aten.batch_norm.default: ("batch_norm", _ATEN_NORM_ARGS, {}),
    aten.instance_norm.default: ("instance_norm", _ATEN_NORM_ARGS, {}),
    **{target: ("group_norm", names, defaults) for target, (names, defaults) in fm._GROUP_NORM_SIGNATURES.items()},
}


@dataclass
class Step:
    """A matched normalisation or activation call: its kind, node, input and API arguments."""
    name: str
    node: fx.Node
    input: Any
    kwargs: Dict[str, Any] = field(default_factory=dict)


def _bind(node: fx.Node, table) -> Optional[Tuple[str, Dict[str, Any]]]:
    if node.op != "call_function" or node.target not in table:
        return None
    name, names, defaults = table[node.target]
    bound = fm._bind(node, {node.target: (names, defaults)})
    return None if bound is None else (name, bound)


def activation_of(node: Any) -> Optional[Step]:
    """The activation call node is, with its API arguments, or None."""
    if not isinstance(node, fx.Node):
        return None
    if node.op == "call_method" and node.target in _ACTIVATION_METHODS and len(node.args) == 1 and not node.kwargs:
        return Step(_ACTIVATION_METHODS[node.target], node, node.args[0])
    found = _bind(node, _ACTIVATION_FUNCTIONS)
    if found is None:
        return None
    name, b = found
    kwargs = {}
    if name == "leaky_relu":
        if not isinstance(b["negative_slope"], numbers.Real):
            return None
        kwargs["negative_slope"] = float(b["negative_slope"])
    if name == "gelu":
        if b["approximate"] not in ("none", "tanh"):
            return None
        kwargs["approximate"] = b["approximate"]
    if not isinstance(b.get("inplace", False), bool):
        return None
    return Step(name, node, b["input"], kwargs)


def norm_of(node: Any) -> Optional[Step]:
    """The normalisation call node is, with the API's arguments for it, or None (also for a
    form the family does not take: non-constant scalars)."""
    if not isinstance(node, fx.Node):
        return None
    found = _bind(node, _NORM_FUNCTIONS)
    if found is None:
        return None
    name, b = found
    if not isinstance(b["eps"], numbers.Real):
        return None
    kwargs = dict(norm_weight=b["weight"], norm_bias=b["bias"], eps=float(b["eps"]))
    if name == "group_norm":
        if not isinstance(b["num_groups"], int):
            return None
        kwargs["num_groups"] = b["num_groups"]
    else:
        if not isinstance(b["training"], bool) or not isinstance(b["momentum"], numbers.Real):
            return None
        kwargs.update(running_mean=b["running_mean"], running_var=b["running_var"], training=b["training"],
                      momentum=float(b["momentum"]))
    return Step(name, node, b["input"], kwargs)


@dataclass
class Chain:
    """A conv followed by a normalisation and / or an activation, as found in a graph."""
    conv_node: fx.Node
    norm: Optional[Step]
    act: Optional[Step]
    order: str  # "norm_act" or "act_norm"

    @property
    def steps(self) -> List[Step]:
        steps = [s for s in (self.norm, self.act) if s is not None]
        return steps if self.order == "norm_act" else steps[::-1]

    @property
    def dims(self) -> int:
        """2, or 1 for a ConvTranspose1d chain (run as a one-row image)."""
        return 2 if fm._bind(self.conv_node, fm._CONV_SIGNATURES) is not None else 1

    @property
    def kind(self) -> str:
        return "_".join([f"conv_transpose{self.dims}d"] + [s.name for s in self.steps])

    @property
    def end(self) -> fx.Node:
        return self.steps[-1].node


def _is_conv(node: Any) -> bool:
    return isinstance(node, fx.Node) and (fm._bind(node, fm._CONV_SIGNATURES) is not None
                                          or fm._bind(node, fm._CONV1D_SIGNATURES) is not None)


def find_chains(graph: fx.Graph) -> List[Chain]:
    """Every conv -> norm [-> activation] and conv -> activation -> norm chain, found by its norm,
    and every conv -> activation with no norm after it, found by its activation."""
    chains = []
    for node in graph.nodes:
        act = activation_of(node)
        if act is not None and _is_conv(act.input):
            if not any((n := norm_of(user)) is not None and n.input is node for user in node.users):
                chains.append(Chain(act.input, None, act, "act_norm"))  # (else found by its norm)
            continue
        norm = norm_of(node)
        if norm is None:
            continue
        if _is_conv(norm.input):
            users = list(node.users)
            act = activation_of(users[0]) if len(users) == 1 else None
            chains.append(Chain(norm.input, norm, act if act is not None and act.input is node else None, "norm_act"))
            continue
        act = activation_of(norm.input)
        if act is not None and _is_conv(act.input):
            chains.append(Chain(act.input, norm, act, "act_norm"))
    return chains


def why_not(chain: Chain, conv: Optional[List[Any]], standalone_conv: fm.StandaloneConv) -> Optional[str]:
    """Why the chain is left alone (None: it is rewritten). A conv with only an activation after it
    goes to myops where the standalone-conv option sends the conv itself (standalone_conv)."""
    if conv is None:
        return "its conv is not a 2-D transposed convolution of a floating tensor on an enabled device"
    norm, act = chain.norm, chain.act
    if norm is None and not fm.routes(standalone_conv, conv):
        return ("a conv with only an activation after it is rewritten where the conv itself would be "
                "(enable(conv_transpose2d=True); by default on CUDA, or an image head after a rewritten chain)")
    if chain.order == "act_norm":
        if len(chain.conv_node.users) != 1:
            return "the conv output has other users, and the activation comes first"
        if norm is not None and len(act.node.users) != 1:
            return "the activation's output has other users"
    if norm is None:
        return None
    if norm.name != "group_norm":
        stats = norm.kwargs["training"]
        if not stats and (norm.kwargs["running_mean"] is None or norm.kwargs["running_var"] is None):
            return "no running statistics to normalise with"
        if not stats:
            return "eval-mode normalisation with running statistics: Inductor runs it as one pointwise pass already"
    for key in ("norm_weight", "norm_bias", "running_mean", "running_var"):
        t = norm.kwargs.get(key)
        if t is not None and (not isinstance(t, fx.Node) or fm._meta(t) is None or not fm._meta(t).is_floating_point()):
            return f"its {key} is not a floating tensor"
    return None


def _call_site(graph: fx.Graph, chain: Chain) -> Tuple[Optional[fx.Node], Optional[str]]:
    """Where the rewritten call goes, before the conv output's first reader (so that every reader
    can see it); or a reason where a tensor the normalisation reads is made only after that."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    first = min(chain.conv_node.users, key=order.__getitem__)
    for t in (chain.norm.kwargs.values() if chain.norm is not None else ()):
        if isinstance(t, fx.Node) and order[t] > order[first]:
            return None, "a normalisation parameter is computed after the conv output is first read"
    return first, None


def _api_kwargs(chain: Chain) -> Dict[str, Any]:
    kwargs = dict(norm="none", order=chain.order) if chain.norm is None else dict(
        norm=chain.norm.name, order=chain.order, **chain.norm.kwargs)
    if chain.act is not None:
        kwargs.update(activation=chain.act.name, **chain.act.kwargs)
    return kwargs


def _candidate(chain: Chain, conv: List[Any], kwargs: Dict[str, Any]) -> fm.Candidate:
    """The chain for the measured selection: its tensors, the rewrite and the torch-ops chain."""
    conv_scalars = conv[3:]
    names = ("norm_weight", "norm_bias", "running_mean", "running_var")
    scalars = {k: v for k, v in kwargs.items() if k not in names}

    def fused(x, w, b, *rest):
        return _api(chain)(x, w, b, *conv_scalars, **scalars, **dict(zip(names, rest)))

    def reference(x, w, b, nw, nb, rm, rv):
        act = activation_fn(scalars.get("activation", "none"), scalars.get("negative_slope", 0.01),
                            scalars.get("approximate", "none"))
        y = (F.conv_transpose2d if chain.dims == 2 else F.conv_transpose1d)(x, w, b, *conv_scalars)
        y = act(y) if chain.order == "act_norm" else y
        if chain.norm is not None and chain.norm.name == "group_norm":
            y = F.group_norm(y, scalars["num_groups"], nw, nb, scalars["eps"])
        elif chain.norm is not None:
            norm = F.batch_norm if chain.norm.name == "batch_norm" else F.instance_norm
            y = norm(y, rm, rv, nw, nb, scalars["training"], scalars["momentum"], scalars["eps"])
        return y if chain.order == "act_norm" else act(y)

    return fm.Candidate(chain.kind, [*conv[:3], *(kwargs.get(k) for k in names)], fused, reference,
                        fm._hashable((conv_scalars, scalars)), chain.end)


# Kinds with a matcher of their own (_fx_match), which has already taken or declined them
SEED_KINDS = ("conv_transpose2d_gelu_group_norm",)


def rewrite_chains(graph: fx.Graph, devices: Optional[Tuple[str, ...]], found: Dict[str, int],
                   rewritten: Dict[str, int], accept: fm.Accept = None,
                   standalone_conv: fm.StandaloneConv = False) -> None:
    """Rewrites the family's chains in place, counting found and rewritten chains per kind
    (standalone_conv: see why_not)."""
    for chain in find_chains(graph):
        kind = chain.kind
        if kind in SEED_KINDS or chain.end not in graph.nodes or chain.conv_node not in graph.nodes:
            continue
        found[kind] = found.get(kind, 0) + 1
        conv = fm._chain_conv_args(chain.conv_node, devices, kind, chain.dims)
        reason = why_not(chain, conv, standalone_conv)
        if reason is None:
            at, reason = _call_site(graph, chain)
        kwargs = None if reason else _api_kwargs(chain)
        if reason is None and accept is not None and not accept(_candidate(chain, conv, kwargs)):
            reason = "measured slower than the chain as Inductor compiles it"
        if reason is not None:
            log.info("myops.compile: %s chain left to Inductor: %s", kind, reason)
            continue
        _rewrite(graph, chain, conv, kwargs, at)
        rewritten[kind] = rewritten.get(kind, 0) + 1


def _api(chain: Chain):
    return conv_transpose2d_norm_act if chain.dims == 2 else conv_transpose1d_norm_act


def _rewrite(graph: fx.Graph, chain: Chain, conv: List[Any], kwargs: Dict[str, Any], at: fx.Node) -> None:
    """One conv_transpose2d_norm_act call, before node `at` (_call_site), in place of the chain;
    where the conv output has other users (a residual), the call also returns it (return_conv) and
    they read that."""
    others = [u for u in chain.conv_node.users if u is not chain.steps[0].node]
    end = chain.end
    with graph.inserting_before(at):
        call = graph.call_function(_api(chain), tuple(conv), {**kwargs, "return_conv": bool(others)})
        out = graph.call_function(operator.getitem, (call, 0)) if others else call
        if others:
            conv_out = graph.call_function(operator.getitem, (call, 1))
            conv_out.meta.update({k: v for k, v in chain.conv_node.meta.items() if k in ("val", "example_value")})
    out.meta.update({k: v for k, v in end.meta.items() if k in ("val", "example_value", "stack_trace",
                                                               "nn_module_stack")})
    end.replace_all_uses_with(out)
    for user in others:
        user.replace_input_with(chain.conv_node, conv_out)
    for dead in [*(s.node for s in chain.steps[::-1]), chain.conv_node]:
        if dead in graph.nodes and not dead.users:
            graph.erase_node(dead)
