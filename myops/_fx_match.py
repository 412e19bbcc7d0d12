"""Finds conv_transpose2d -> gelu -> group_norm chains (and conv_transpose2d -> batch_norm -> tanh ->
max_pool2d -> group_norm chains) in an FX graph and rewrites them to myops ops.

Works on the graphs torch.compile hands to Inductor's pre-grad passes (torch-function calls:
torch.conv_transpose2d, F.gelu, F.group_norm) and on torch.export graphs (aten.conv_transpose2d,
aten.convolution(transposed=True), aten.gelu, aten.group_norm / aten.native_group_norm). Every
scalar of a match is read from the matched nodes and checked; nothing is a wildcard.
"""
import logging
import operator
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import fx

from .ops import conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm as fused_api
from .norm_act import gelu_group_norm_chain
from .ops import group_norm_with_stats

log = logging.getLogger("myops.compile")

aten = torch.ops.aten

# target -> (argument names in order, defaults of trailing arguments)
_CONV_SIGNATURES = {
    torch.conv_transpose2d: (["input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"],
                             {"bias": None, "stride": 1, "padding": 0, "output_padding": 0, "groups": 1, "dilation": 1}),
    aten.conv_transpose2d.input: (["input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"],
                                  {"bias": None, "stride": [1, 1], "padding": [0, 0], "output_padding": [0, 0], "groups": 1, "dilation": [1, 1]}),
    aten.convolution.default: (["input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups"], {}),
}
_CONV1D_SIGNATURES = {
    torch.conv_transpose1d: (["input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"],
                             {"bias": None, "stride": 1, "padding": 0, "output_padding": 0, "groups": 1, "dilation": 1}),
    aten.conv_transpose1d.default: (["input", "weight", "bias", "stride", "padding", "output_padding", "groups",
                                     "dilation"],
                                    {"bias": None, "stride": [1], "padding": [0], "output_padding": [0], "groups": 1,
                                     "dilation": [1]}),
}
_GELU_SIGNATURES = {
    F.gelu: (["input", "approximate"], {"approximate": "none"}),
    aten.gelu.default: (["input", "approximate"], {"approximate": "none"}),
}
_GROUP_NORM_SIGNATURES = {
    F.group_norm: (["input", "num_groups", "weight", "bias", "eps"], {"weight": None, "bias": None, "eps": 1e-5}),
    torch.group_norm: (["input", "num_groups", "weight", "bias", "eps", "cudnn_enabled"],
                       {"weight": None, "bias": None, "eps": 1e-5, "cudnn_enabled": True}),
    aten.group_norm.default: (["input", "num_groups", "weight", "bias", "eps", "cudnn_enabled"],
                              {"weight": None, "bias": None, "eps": 1e-5, "cudnn_enabled": True}),
}
_BATCH_NORM_SIGNATURES = {
    F.batch_norm: (["input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"],
                   {"running_mean": None, "running_var": None, "weight": None, "bias": None, "training": False,
                    "momentum": 0.1, "eps": 1e-5}),
    aten.batch_norm.default: (["input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps",
                               "cudnn_enabled"], {}),
}
_MAX_POOL_SIGNATURES = {
    F.max_pool2d: (["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"],
                   {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False, "return_indices": False}),
    aten.max_pool2d.default: (["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"],
                              {"stride": [], "padding": [0, 0], "dilation": [1, 1], "ceil_mode": False,
                               "return_indices": False}),
}
_FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# Consumers Inductor fuses a pointwise normalisation into (a residual add and its kin).
_POINTWISE_FUNCTIONS = {operator.add, operator.sub, operator.mul, operator.iadd, operator.isub, operator.imul,
                        torch.add, torch.sub, torch.mul, aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor}
_POINTWISE_METHODS = {"add", "sub", "mul", "add_", "sub_", "mul_"}


@dataclass
class Candidate:
    """A matched chain, for a caller that decides whether it is rewritten (myops.compile's measured
    selection): its tensor arguments (graph nodes; None where absent) and two callables taking real
    tensors in that order: the replacement, and the chain as eager PyTorch runs it."""
    pattern: str
    tensors: List[Optional[fx.Node]]
    fused: Callable[..., Any]
    reference: Callable[..., Any]
    scalars: Tuple[Any, ...] = ()  # every non-tensor argument: with the tensors' metadata, a cache key
    output: Optional[fx.Node] = None  # the chain's last node: whether autograd records it says training


Accept = Optional[Callable[[Candidate], bool]]


def _hashable(v):
    """Lists and dicts of scalars as nested tuples."""
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    return v


def _bind(node: fx.Node, signatures) -> Optional[Dict[str, Any]]:
    """The call's arguments by name (defaults filled in), or None if node is no such call."""
    if node.op != "call_function" or node.target not in signatures:
        return None
    names, defaults = signatures[node.target]
    if len(node.args) > len(names) or any(k not in names for k in node.kwargs):
        return None
    bound = dict(defaults)
    bound.update(zip(names, node.args))
    bound.update(node.kwargs)
    return bound if all(n in bound for n in names) else None


def _meta(node) -> Optional[torch.Tensor]:
    if not isinstance(node, fx.Node):
        return None
    val = node.meta.get("val", node.meta.get("example_value"))
    return val if isinstance(val, torch.Tensor) else None


tensor_meta = _meta  # a tensor node's example value (a fake tensor), else None


def _is_int(v) -> bool:
    """An int, or a graph value that is one (a SymInt node: Dynamo makes a module's int attribute
    dynamic where one frame ran for blocks that differ in it, e.g. blocks compiled one by one)."""
    if isinstance(v, fx.Node):
        return isinstance(v.meta.get("example_value", v.meta.get("val")), (int, torch.SymInt))
    return isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool)


def _ints(v, n: int) -> Optional[List[Any]]:
    """v as a list of n ints: an int repeated, or a sequence of n (or 1) ints; else None."""
    if _is_int(v):
        return [v] * n
    if isinstance(v, (list, tuple)) and len(v) in (1, n) and all(_is_int(e) for e in v):
        return list(v) * (n // len(v))
    return None


def _pair(v) -> Optional[List[Any]]:
    return _ints(v, 2)


def _conv_args(node: fx.Node, devices: Optional[Tuple[str, ...]], dims: int = 2) -> Optional[List[Any]]:
    """[input, weight, bias, stride, padding, output_padding, groups, dilation] of a `dims`-D
    (2 or 1) transposed convolution on a floating (dims + 2)-D input on one of `devices` (device
    types; None: any), the sizes as lists of `dims` ints; else None."""
    b = _bind(node, _CONV_SIGNATURES if dims == 2 else _CONV1D_SIGNATURES)
    if b is None or (node.target is aten.convolution.default and b["transposed"] is not True):
        return None
    x = _meta(b["input"])
    if x is None or x.dim() != dims + 2 or x.dtype not in _FLOATING:
        return None
    if devices is not None and x.device.type not in devices:
        return None
    sizes = [_ints(b[k], dims) for k in ("stride", "padding", "output_padding", "dilation")]
    if any(s is None for s in sizes) or not isinstance(b["groups"], (int, torch.SymInt)):
        return None
    stride, padding, output_padding, dilation = sizes
    return [b["input"], b["weight"], b["bias"], stride, padding, output_padding, b["groups"], dilation]


def _single_user(node: fx.Node, user: fx.Node) -> bool:
    return len(node.users) == 1 and user in node.users


def _group_norm_of(node: fx.Node):
    """(group_norm node to replace, its bound arguments) for group_norm calls, including
    aten.native_group_norm whose only used output is getitem 0."""
    b = _bind(node, _GROUP_NORM_SIGNATURES)
    if b is not None:
        return node, b
    if node.op == "call_function" and node.target is aten.native_group_norm.default and len(node.args) == 8:
        getters = list(node.users)
        if len(getters) == 1 and getters[0].target is operator.getitem and getters[0].args[1] == 0:
            x, w, bias, _n, _c, _hxw, groups, eps = node.args
            return getters[0], {"input": x, "num_groups": groups, "weight": w, "bias": bias, "eps": eps}
    return None, None


def _group_norm_sites(graph: fx.Graph):
    """(group_norm node, node to replace, bound arguments) for every group_norm over a node: where
    a chain can end. Iterates over a snapshot, so the caller may rewrite the graph meanwhile (a
    rewrite only erases the chain's nodes, which come before the group_norm being visited)."""
    for node in list(graph.nodes):
        out_node, gn = _group_norm_of(node)
        if gn is not None and isinstance(gn["input"], fx.Node):
            yield node, out_node, gn


def _is_tanh(node: fx.Node) -> bool:
    if node.op == "call_function":
        return node.target in (torch.tanh, F.tanh, aten.tanh.default) and len(node.args) == 1 and not node.kwargs
    return node.op == "call_method" and node.target == "tanh" and len(node.args) == 1 and not node.kwargs


def _dtype_is(node, dtype, floating_only=False) -> bool:
    """None (an absent optional tensor) or a tensor node of that dtype (of any floating dtype)."""
    if node is None:
        return True
    m = _meta(node)
    return m is not None and (m.dtype in _FLOATING if floating_only else m.dtype == dtype)


def _replace(graph: fx.Graph, out_node: fx.Node, chain: List[fx.Node], target, args, kwargs=None) -> None:
    with graph.inserting_before(out_node):
        fused = graph.call_function(target, tuple(args), kwargs or {})
    fused.meta.update({k: v for k, v in out_node.meta.items() if k in ("val", "example_value", "stack_trace", "nn_module_stack")})
    out_node.replace_all_uses_with(fused)
    for dead in [out_node, *chain]:
        if dead in graph.nodes and not dead.users:
            graph.erase_node(dead)


def _batch_norm_candidate(conv, kwargs, output: fx.Node) -> Candidate:
    """The BatchNorm chain's candidate; kwargs: the replacement's (fused_api's) keyword arguments."""
    conv_scalars = conv[3:]
    names = ("running_mean", "running_var", "bn_weight", "bn_bias", "gn_weight", "gn_bias")  # its tensors

    def fused(x, w, b, *rest):
        return fused_api(x, w, b, *conv_scalars, **{**kwargs, **dict(zip(names, rest))})

    def reference(x, w, b, rm, rv, bw, bb, gw, gb):
        y = F.batch_norm(F.conv_transpose2d(x, w, b, *conv_scalars), rm, rv, bw, bb, kwargs["training"],
                         kwargs["momentum"], kwargs["bn_eps"])
        y = F.max_pool2d(torch.tanh(y), kwargs["kernel_size"], kwargs["pool_stride"], kwargs["pool_padding"],
                         kwargs["pool_dilation"])
        return F.group_norm(y, kwargs["num_groups"], gw, gb, kwargs["gn_eps"])

    scalars = (_hashable(conv_scalars), _hashable({k: v for k, v in kwargs.items() if k not in names}))
    return Candidate("conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm",
                     [*conv[:3], *(kwargs[k] for k in names)], fused, reference, scalars, output)


_DEVICES_WARNED: set = set()


def _chain_conv_args(conv_node: fx.Node, devices: Optional[Tuple[str, ...]], chain: str,
                     dims: int = 2) -> Optional[List[Any]]:
    """_conv_args for the (dims-D) conv that starts a matched chain; where the chain is left alone
    only for its device, says so once per device type (the default rewrites CUDA chains only)."""
    conv = _conv_args(conv_node, devices, dims)
    if conv is None and devices is not None and _conv_args(conv_node, None, dims) is not None:
        signatures = _CONV_SIGNATURES if dims == 2 else _CONV1D_SIGNATURES
        device = _meta(_bind(conv_node, signatures)["input"]).device.type
        if device not in _DEVICES_WARNED:
            _DEVICES_WARNED.add(device)
            warnings.warn(f"myops.compile: a {chain} chain on {device} tensors was left alone: the pass rewrites "
                          f"chains on {', '.join(devices)} only (myops.compile.enable(devices=None) for every "
                          f"device; the CPU kernels are slower than PyTorch's there)", stacklevel=2)
    return conv


def _rewrite_batch_norm_chains(graph: fx.Graph, devices: Optional[Tuple[str, ...]], accept: Accept = None) -> int:
    """conv_transpose2d -> F.batch_norm -> tanh -> F.max_pool2d -> group_norm, in training or eval
    mode: replaced by one call of the Python API, which runs the two ops and updates the running
    buffers in place as F.batch_norm does (AOTAutograd records that as a buffer mutation)."""
    count = 0
    for node in list(graph.nodes):
        out_node, gn = _group_norm_of(node)
        if gn is None or not isinstance(gn["input"], fx.Node):
            continue
        pool_node = gn["input"]
        pool = _bind(pool_node, _MAX_POOL_SIGNATURES)
        if pool is None or pool["ceil_mode"] is not False or pool["return_indices"] is not False:
            continue
        tanh_node = pool["input"]
        if not isinstance(tanh_node, fx.Node) or not _is_tanh(tanh_node) or not isinstance(tanh_node.args[0], fx.Node):
            continue
        bn_node = tanh_node.args[0]
        bn = _bind(bn_node, _BATCH_NORM_SIGNATURES)
        if bn is None or not isinstance(bn["input"], fx.Node):
            continue
        conv_node = bn["input"]
        conv = _chain_conv_args(conv_node, devices, "ConvTranspose2d -> BatchNorm2d -> Tanh -> MaxPool2d -> GroupNorm")
        if conv is None or not all(_single_user(a, b) for a, b in
                                   ((conv_node, bn_node), (bn_node, tanh_node), (tanh_node, pool_node), (pool_node, node))):
            continue
        kernel = _pair(pool["kernel_size"])
        stride = kernel if pool["stride"] in (None, [], ()) else _pair(pool["stride"])
        padding, dilation = _pair(pool["padding"]), _pair(pool["dilation"])
        if None in (kernel, stride, padding, dilation) or not isinstance(bn["training"], bool):
            continue
        if not isinstance(bn["momentum"], (int, float)) or not isinstance(bn["eps"], (int, float)):
            continue
        if not isinstance(gn["num_groups"], int) or not isinstance(gn["eps"], (int, float)):
            continue
        if not bn["training"] and (bn["running_mean"] is None or bn["running_var"] is None):
            continue
        dtype = _meta(conv_node).dtype if _meta(conv_node) is not None else None
        if dtype is None or not all(_dtype_is(t, dtype) for t in (bn["weight"], bn["bias"], gn["weight"], gn["bias"])):
            continue
        if not all(_dtype_is(t, dtype, floating_only=True) for t in (bn["running_mean"], bn["running_var"])):
            continue
        kwargs = dict(running_mean=bn["running_mean"], running_var=bn["running_var"], bn_weight=bn["weight"],
                      bn_bias=bn["bias"], training=bn["training"], momentum=float(bn["momentum"]),
                      bn_eps=float(bn["eps"]), kernel_size=kernel, pool_stride=stride, pool_padding=padding,
                      pool_dilation=dilation, num_groups=gn["num_groups"], gn_weight=gn["weight"],
                      gn_bias=gn["bias"], gn_eps=float(gn["eps"]))
        if accept is not None and not accept(_batch_norm_candidate(conv, kwargs, out_node)):
            continue
        _replace(graph, out_node, [node, pool_node, tanh_node, bn_node, conv_node], fused_api, conv, kwargs)
        count += 1
    return count


def _feeds_only_pointwise(node: fx.Node) -> bool:
    """Whether every user of node is a pointwise arithmetic call (and there is one)."""
    def pointwise(user):
        if user.op == "call_function":
            return user.target in _POINTWISE_FUNCTIONS
        return user.op == "call_method" and user.target in _POINTWISE_METHODS
    return bool(node.users) and all(pointwise(u) for u in node.users)


def _gelu_candidate(conv, approximate, gn, output: fx.Node) -> Candidate:
    # (where the pass emits the statistics op and leaves the normalisation to Inductor, the fused
    # op stands for that pair: the same kernels, with the normalise pass of its own)
    conv_scalars, num_groups, eps = conv[3:], gn["num_groups"], float(gn["eps"])

    def fused(x, w, b, gw, gb):
        return torch.ops.myops.conv_transpose2d_gelu_group_norm.default(x, w, b, *conv_scalars, approximate, num_groups,
                                                                        gw, gb, eps)

    def reference(x, w, b, gw, gb):
        y = F.gelu(F.conv_transpose2d(x, w, b, *conv_scalars), approximate=approximate)
        return F.group_norm(y, num_groups, gw, gb, eps)

    return Candidate("conv_transpose2d_gelu_group_norm", [conv[0], conv[1], conv[2], gn["weight"], gn["bias"]],
                     fused, reference, _hashable((conv_scalars, approximate, num_groups, eps)), output)


def _conv_candidate(conv, op, reference, output: fx.Node) -> Candidate:
    """A standalone conv for the measured selection: op (myops') against reference (torch's)."""
    conv_scalars = conv[3:]
    return Candidate(op._schema.name.split("::")[1], conv[:3], lambda x, w, b: op(x, w, b, *conv_scalars),
                     lambda x, w, b: reference(x, w, b, *conv_scalars), _hashable(conv_scalars), output)


def _rewrite_gelu_chains(graph: fx.Graph, split_normalize: bool, devices: Optional[Tuple[str, ...]],
                         accept: Accept = None) -> int:
    """conv_transpose2d -> gelu -> group_norm: replaced by gelu_group_norm_chain: the fused op;
    with split_normalize, where the group_norm only feeds pointwise arithmetic, the op that stops
    at the statistics plus the normalisation in torch ops, which Inductor fuses into those
    consumers (one pass over the output instead of the normalise pass and the consumer's); in
    training the family's form that saves the conv output."""
    count = 0
    for node, out_node, gn in _group_norm_sites(graph):
        gelu_node = gn["input"]
        gelu = _bind(gelu_node, _GELU_SIGNATURES)
        if gelu is None or gelu["approximate"] not in ("none", "tanh") or not isinstance(gelu["input"], fx.Node):
            continue
        conv_node = gelu["input"]
        conv = _chain_conv_args(conv_node, devices, "ConvTranspose2d -> GELU -> GroupNorm")
        if conv is None or not _single_user(conv_node, gelu_node) or not _single_user(gelu_node, node):
            continue
        if not isinstance(gn["num_groups"], int) or not isinstance(gn["eps"], (int, float)):
            continue
        if accept is not None and not accept(_gelu_candidate(conv, gelu["approximate"], gn, out_node)):
            continue
        chain = [node, gelu_node, conv_node]
        # GroupNorm parameters of another dtype than the conv output (float32 norms in a 16-bit
        # model, or autocast): the fused op takes one dtype, group_norm_with_stats normalises in
        # float32 as aten's mixed-precision group_norm does
        conv_meta = _meta(conv_node)
        mixed = conv_meta is not None and not all(_dtype_is(t, conv_meta.dtype) for t in (gn["weight"], gn["bias"]))
        split = mixed or (split_normalize and _feeds_only_pointwise(out_node))
        args = (*conv, gelu["approximate"], gn["num_groups"], gn["weight"], gn["bias"], float(gn["eps"]))
        if split_normalize:  # torch.compile's pass: AOTAutograd traces the function, training or not
            _replace(graph, out_node, chain, gelu_group_norm_chain, (*args, split))
        elif mixed:
            with graph.inserting_before(out_node):
                stats = graph.call_function(torch.ops.myops.conv_transpose2d_gelu_group_stats.default,
                                            (*conv, gelu["approximate"], gn["num_groups"], float(gn["eps"])))
                act, mean, rstd = (graph.call_function(operator.getitem, (stats, i)) for i in range(3))
            _replace(graph, out_node, chain, group_norm_with_stats, (act, mean, rstd, gn["weight"], gn["bias"]))
        else:  # fuse() on an exported graph: the op itself
            _replace(graph, out_node, chain, torch.ops.myops.conv_transpose2d_gelu_group_norm.default, args)
        count += 1
    return count


# Output channels per group up to which a standalone conv after a rewritten chain is routed by
# default (standalone_conv="auto") on devices outside ROUTED_DEVICES: the image heads (64 -> 3) of
# generators and decoders.
HEAD_CHANNELS = 4

# Device types whose standalone convs "auto" routes, every one: there myops.conv_transpose2d times
# cuDNN in both layouts against its own kernels at the first call of each shape and keeps the
# fastest, so that routing never loses to the cuDNN call Inductor would make.
ROUTED_DEVICES = ("cuda",)


def _is_myops_output(node) -> bool:
    """A node holding a myops op's result (or one of its results)."""
    if isinstance(node, fx.Node) and node.op == "call_function" and node.target is operator.getitem:
        node = node.args[0]
    target = getattr(node, "target", None) if isinstance(node, fx.Node) else None
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace == "myops"
    return callable(target) and getattr(target, "__module__", "").startswith("myops.")  # a rewrite's function


def _is_head_after_chain(conv) -> bool:
    """A transposed convolution to at most HEAD_CHANNELS channels per group whose input a myops op
    produced. Its input is then NCHW; Inductor would run cuDNN's conv channels-last, after a layout
    copy of that input and with transposes inside cuDNN, slower than myops.conv_transpose2d on it."""
    w = _meta(conv[1])
    return _is_myops_output(conv[0]) and w is not None and isinstance(w.shape[1], int) and w.shape[1] <= HEAD_CHANNELS


def routed_by_default(conv) -> bool:
    """Whether standalone_conv="auto" sends this transposed convolution to myops: every one on
    ROUTED_DEVICES, elsewhere the heads after a rewritten chain (_is_head_after_chain)."""
    x = _meta(conv[0])
    return (x is not None and x.device.type in ROUTED_DEVICES) or _is_head_after_chain(conv)


def routes(standalone_conv: Union[bool, str], conv) -> bool:
    """Whether the standalone-conv option sends this conv to myops: True all, False none, "auto"
    as routed_by_default says."""
    return standalone_conv is True or (standalone_conv == "auto" and routed_by_default(conv))


StandaloneConv = Union[bool, str]


def rewrite_graph(graph: fx.Graph, split_normalize: bool = False, devices: Optional[Tuple[str, ...]] = None,
                  accept: Accept = None) -> Dict[str, int]:
    """Rewrites the seed chains in place; returns {pattern name: replacements}. split_normalize:
    see _rewrite_gelu_chains (torch.compile's pass sets it: Inductor then generates the consumers).
    devices: the device types (e.g. ("cuda",)) whose chains are rewritten; None: every device.
    accept: called with each matched chain's Candidate; a chain is rewritten where it returns True.
    (The family's chains: _chains; the standalone convs: route_standalone_convs.)"""
    counts = {"conv_transpose2d_gelu_group_norm": 0, "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm": 0,
              "conv_transpose2d": 0}
    counts["conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm"] = _rewrite_batch_norm_chains(graph, devices, accept)
    counts["conv_transpose2d_gelu_group_norm"] = _rewrite_gelu_chains(graph, split_normalize, devices, accept)
    return counts


def route_standalone_convs(graph: fx.Graph, standalone_conv: StandaloneConv, devices: Optional[Tuple[str, ...]],
                           accept: Accept, counts: Dict[str, int], found: Optional[Dict[str, int]] = None) -> None:
    """The transposed convolutions outside chains that standalone_conv sends to myops (see
    routes), counted into counts (and every one seen into found); each one left is logged
    with its reason."""
    for dims, op, reference in ((2, torch.ops.myops.conv_transpose2d.default, F.conv_transpose2d),
                                (1, torch.ops.myops.conv_transpose1d.default, F.conv_transpose1d)):
        kind = op._schema.name.split("::")[1]
        for node in list(graph.nodes):
            conv = _conv_args(node, devices, dims=dims)
            if conv is None:
                continue
            if found is not None:
                found[kind] = found.get(kind, 0) + 1
            reason = None
            if not routes(standalone_conv, conv):
                reason = ("conv_transpose2d=False" if not standalone_conv else
                          f"conv_transpose2d=\"auto\" routes every conv on {'/'.join(ROUTED_DEVICES)} and, "
                          "elsewhere, image heads after a rewritten chain")
            elif accept is not None and not accept(_conv_candidate(conv, op, reference, node)):
                reason = "measured slower"
            if reason is not None:
                log.info("myops.compile: standalone %s left to Inductor: %s", kind, reason)
                continue
            _replace(graph, node, [], op, conv)
            counts[kind] = counts.get(kind, 0) + 1
