"""Drop-in modules: the fused chains as nn.Modules, and a swapper that puts them into a model.

    block = myops.nn.ConvTranspose2dGELUGroupNorm(64, 64, 3, num_groups=8)  # as the three layers
    myops.nn.swap_modules(model)   # nn.Sequential runs of the chains -> the modules here, in place

A fused module holds the layers it replaces as its children (``conv``, ``act``, ``norm``, ...):
real ``nn.ConvTranspose2d`` / ``nn.GroupNorm`` / ``nn.BatchNorm2d`` modules, so parameters are
initialised, moved, trained and printed as PyTorch does, and ``from_modules`` / the swapper reuse a
model's own layers (the same parameter and buffer objects). Only ``forward`` changes: one call to
the fused op, with BatchNorm's bookkeeping (``num_batches_tracked``, momentum, train / eval, running
statistics) exactly as ``nn.BatchNorm2d`` does it.

For chains written in a ``forward`` method rather than an ``nn.Sequential``, use
``myops.compile`` (it sees the data flow; the swapper only sees the order of a Sequential).
"""
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from . import norm_act, ops


_STORES = ("_parameters", "_buffers", "_modules")
_MISSING = object()
_is_compiling = torch.compiler.is_compiling


def _own_member(module: nn.Module, name: str):
    """``module.<name>`` for a parameter, buffer or child module, read from the module's own dicts:
    a plain read of one goes through a failed attribute lookup and nn.Module.__getattr__ (about
    ten times slower; a dozen per fused call, all before its first kernel). Anything else (a parametrization's property, a plain attribute) takes the plain path."""
    state = module.__dict__
    for store in _STORES:
        value = state.get(store, _MISSING)
        if value is not _MISSING:
            value = value.get(name, _MISSING)
            if value is not _MISSING:
                return value
    return getattr(module, name)


def _member_reader():
    """How one fused call reads its modules' members: ``_own_member``, or ``getattr`` under
    torch.compile, which traces module attributes itself. Asked once per call, not per read (a
    dozen reads per call; the question is two Python calls each)."""
    return getattr if _is_compiling() else _own_member


def _output_padding(conv: nn.Module, input: Tensor, output_size: Sequence[int]) -> List[int]:
    """The output_padding that gives conv (a ConvTranspose1d / 2d) output_size, as its forward."""
    return conv._output_padding(input, list(output_size), list(conv.stride), list(conv.padding),
                                list(conv.kernel_size), len(conv.kernel_size), list(conv.dilation))


def _conv_args(conv: nn.Module, input: Tensor, output_size: Optional[Sequence[int]], read=getattr) -> tuple:
    """(weight, bias, conv_args): conv's (a ConvTranspose1d / 2d) tensors (read by `read`:
    _member_reader) and its (stride, padding, output_padding, groups, dilation) as the ops'
    *_chain_call functions take them."""
    if conv.padding_mode != "zeros":  # as nn.ConvTranspose1d / 2d
        raise ValueError(f"Only `zeros` padding mode is supported for {type(conv).__name__}")
    # (the module's own tuples: the ops take a sequence; no copies before the first kernel)
    output_padding = conv.output_padding if output_size is None else _output_padding(conv, input, output_size)
    return read(conv, "weight"), read(conv, "bias"), (
        conv.stride, conv.padding, output_padding, conv.groups, conv.dilation)


def _batch_norm_arguments(bn: nn.BatchNorm2d, read=getattr) -> Tuple[tuple, Optional[Tensor]]:
    """The BatchNorm arguments of one forward step of ``bn`` (running_mean, running_var, bn_weight,
    bn_bias, training, momentum, bn_eps of :func:`myops.ops.batch_norm_chain_call`), and the
    ``num_batches_tracked`` the step still owes ``+= 1`` (or None), nn.BatchNorm2d.forward's
    bookkeeping in training with tracked statistics. With momentum None the factor is the cumulative
    average 1 / num_batches_tracked, so the count goes up here; with a momentum the fused call adds
    it with the running buffers' update, after its kernels (one launch fewer, none before them).
    Tensors are read by `read` (_member_reader)."""
    training, momentum = bn.training, bn.momentum
    running_mean, running_var = read(bn, "running_mean"), read(bn, "running_var")
    count = read(bn, "num_batches_tracked")
    owed = count if training and bn.track_running_stats else None
    factor = 0.0 if momentum is None else momentum
    if owed is not None and momentum is None:
        owed.add_(1)
        factor = 1.0 / float(owed)
        owed = None
    if training and not bn.track_running_stats:  # buffers are updated in training only where tracked
        running_mean = running_var = None
    return (running_mean, running_var, read(bn, "weight"), read(bn, "bias"),
            training or (running_mean is None and running_var is None), factor, bn.eps), owed


def batch_norm_chain(conv: nn.ConvTranspose2d, bn: nn.BatchNorm2d, pool: nn.MaxPool2d, norm: nn.GroupNorm,
                     input: Tensor, output_size: Optional[Sequence[int]] = None, read=getattr) -> Tensor:
    """``norm(pool(tanh(bn(conv(input)))))`` as one call of the fused op, with the layers' own
    arguments and BatchNorm's bookkeeping (the forward of the module below; `read`: how it reads
    the layers' tensors, _member_reader)."""
    bn_args, owed_count = _batch_norm_arguments(bn, read)
    weight, bias, conv_args = _conv_args(conv, input, output_size, read)
    return ops.batch_norm_chain_call(
        input, weight, bias, conv_args, *bn_args,
        (ops._pair(pool.kernel_size), ops._pair(pool.stride), ops._pair(pool.padding), ops._pair(pool.dilation)),
        pool.ceil_mode, norm.num_groups, read(norm, "weight"), read(norm, "bias"), norm.eps, owed_count)


def _require(cls: type, name: str, module, kinds: tuple) -> None:
    if not isinstance(module, kinds):
        raise TypeError(f"myops.nn.{cls.__name__}.from_modules: argument '{name}' must be "
                        f"{' or '.join('nn.' + k.__name__ for k in kinds)}, got {type(module).__name__}")


def _require_channels(cls: type, name: str, channels: int, conv: nn.ConvTranspose2d) -> None:
    if channels != conv.out_channels:
        raise ValueError(f"myops.nn.{cls.__name__}.from_modules: argument '{name}' has {channels} channels, "
                         f"but 'conv' has {conv.out_channels} output channels")


def _adopt(cls: type, **children: nn.Module) -> nn.Module:
    """An instance of cls whose children are the given modules (shared, not copied)."""
    fused = cls.__new__(cls)
    nn.Module.__init__(fused)
    for name, child in children.items():
        setattr(fused, name, child)
    return fused


class ConvTranspose2dGELUGroupNorm(nn.Module):
    """``GroupNorm(GELU(ConvTranspose2d(x)))`` as one call to
    :func:`myops.conv_transpose2d_gelu_group_norm`.

    Arguments as ``nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding,
    output_padding, groups, bias, dilation)``, ``nn.GELU(approximate)`` and ``nn.GroupNorm(num_groups,
    out_channels, eps, affine)``; children ``conv``, ``act``, ``norm``. ``forward(input,
    output_size=None)`` as ``nn.ConvTranspose2d``'s.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, num_groups: int, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1, approximate: str = "none",
                 eps: float = 1e-5, affine: bool = True, device=None, dtype=None):
        super().__init__()
        factory = dict(device=device, dtype=dtype)
        self.conv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding, output_padding,
                                       groups, bias, dilation, **factory)
        self.act = nn.GELU(approximate)
        self.norm = nn.GroupNorm(num_groups, out_channels, eps, affine, **factory)

    @classmethod
    def from_modules(cls, conv: nn.ConvTranspose2d, act: nn.GELU, norm: nn.GroupNorm) -> "ConvTranspose2dGELUGroupNorm":
        """The fused module over existing layers (their parameters are shared, not copied)."""
        _require(cls, "conv", conv, (nn.ConvTranspose2d,))
        _require(cls, "act", act, (nn.GELU,))
        _require(cls, "norm", norm, (nn.GroupNorm,))
        _require_channels(cls, "norm", norm.num_channels, conv)
        return _adopt(cls, conv=conv, act=act, norm=norm)

    def forward(self, input: Tensor, output_size: Optional[Sequence[int]] = None) -> Tensor:
        read = _member_reader()
        weight, bias, conv_args = _conv_args(read(self, "conv"), input, output_size, read)
        norm = read(self, "norm")
        return ops.gelu_group_norm_chain_call(input, weight, bias, conv_args, read(self, "act").approximate,
                                              norm.num_groups, read(norm, "weight"), read(norm, "bias"), norm.eps)


class ConvTranspose2dBatchNormTanhMaxPool2dGroupNorm(nn.Module):
    """``GroupNorm(MaxPool2d(Tanh(BatchNorm2d(ConvTranspose2d(x)))))`` as one call to
    :func:`myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm`; BatchNorm behaves as
    ``nn.BatchNorm2d`` in train and eval mode (batch or running statistics, the running buffers
    and ``num_batches_tracked`` updated in training).

    Arguments as ``nn.ConvTranspose2d`` (the first eight), ``nn.BatchNorm2d(out_channels, bn_eps,
    bn_momentum, bn_affine, track_running_stats)``, ``nn.MaxPool2d(pool_kernel_size, pool_stride,
    pool_padding, pool_dilation)`` and ``nn.GroupNorm(num_groups, out_channels, gn_eps,
    gn_affine)``; children ``conv``, ``bn``, ``act``, ``pool``, ``norm``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, num_groups: int, pool_kernel_size=2,
                 stride=1, padding=0, output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 bn_eps: float = 1e-5, bn_momentum: Optional[float] = 0.1, bn_affine: bool = True,
                 track_running_stats: bool = True, pool_stride=None, pool_padding=0, pool_dilation=1,
                 gn_eps: float = 1e-5, gn_affine: bool = True, device=None, dtype=None):
        super().__init__()
        factory = dict(device=device, dtype=dtype)
        self.conv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding, output_padding,
                                       groups, bias, dilation, **factory)
        self.bn = nn.BatchNorm2d(out_channels, bn_eps, bn_momentum, bn_affine, track_running_stats, **factory)
        self.act = nn.Tanh()
        self.pool = nn.MaxPool2d(pool_kernel_size, pool_stride, pool_padding, pool_dilation)
        self.norm = nn.GroupNorm(num_groups, out_channels, gn_eps, gn_affine, **factory)

    @classmethod
    def from_modules(cls, conv: nn.ConvTranspose2d, bn: nn.BatchNorm2d, act: nn.Tanh, pool: nn.MaxPool2d,
                     norm: nn.GroupNorm) -> "ConvTranspose2dBatchNormTanhMaxPool2dGroupNorm":
        """The fused module over existing layers (parameters and buffers shared, not copied)."""
        _require(cls, "conv", conv, (nn.ConvTranspose2d,))
        _require(cls, "bn", bn, (nn.BatchNorm2d,))
        _require(cls, "act", act, (nn.Tanh,))
        _require(cls, "pool", pool, (nn.MaxPool2d,))
        _require(cls, "norm", norm, (nn.GroupNorm,))
        _require_channels(cls, "bn", bn.num_features, conv)
        _require_channels(cls, "norm", norm.num_channels, conv)
        if pool.return_indices:
            raise ValueError(f"myops.nn.{cls.__name__}.from_modules: argument 'pool' must not return indices")
        return _adopt(cls, conv=conv, bn=bn, act=act, pool=pool, norm=norm)

    def forward(self, input: Tensor, output_size: Optional[Sequence[int]] = None) -> Tensor:
        read = _member_reader()
        return batch_norm_chain(read(self, "conv"), read(self, "bn"), read(self, "pool"), read(self, "norm"), input,
                                output_size, read)


# The family's layers (exact types): normalisation -> the API's norm name (by the conv's spatial
# dimensions: a BatchNorm2d cannot follow a ConvTranspose1d); activation -> its name
_NORMS_BY_DIMS = {
    2: {nn.BatchNorm2d: "batch_norm", nn.SyncBatchNorm: "sync_batch_norm", nn.InstanceNorm2d: "instance_norm",
        nn.GroupNorm: "group_norm"},
    1: {nn.BatchNorm1d: "batch_norm", nn.SyncBatchNorm: "sync_batch_norm", nn.InstanceNorm1d: "instance_norm",
        nn.GroupNorm: "group_norm"},
}
_CONVS = {nn.ConvTranspose2d: 2, nn.ConvTranspose1d: 1}
_ACTIVATIONS = {nn.ReLU: "relu", nn.LeakyReLU: "leaky_relu", nn.SiLU: "silu", nn.GELU: "gelu", nn.Tanh: "tanh",
                nn.Sigmoid: "sigmoid"}


def _norm_kwargs(norm: nn.Module, read) -> Tuple[dict, Optional[Tensor]]:
    """conv_transpose2d_norm_act's arguments for one forward step of `norm`, as its own forward
    computes them, and (BatchNorm) the num_batches_tracked the step still owes += 1."""
    if isinstance(norm, nn.GroupNorm):
        return dict(norm="group_norm", num_groups=norm.num_groups, norm_weight=read(norm, "weight"),
                    norm_bias=read(norm, "bias"), eps=norm.eps), None
    if isinstance(norm, (nn.BatchNorm1d, nn.BatchNorm2d, nn.SyncBatchNorm)):
        (running_mean, running_var, weight, bias, training, momentum, eps), owed = _batch_norm_arguments(norm, read)
        kwargs = dict(norm="batch_norm", running_mean=running_mean, running_var=running_var, norm_weight=weight,
                      norm_bias=bias, training=training, momentum=momentum, eps=eps)
        if isinstance(norm, nn.SyncBatchNorm):
            kwargs.update(norm="sync_batch_norm", process_group=norm.process_group)
        return kwargs, owed
    return dict(norm="instance_norm", running_mean=read(norm, "running_mean"), running_var=read(norm, "running_var"),
                norm_weight=read(norm, "weight"), norm_bias=read(norm, "bias"),
                training=norm.training or not norm.track_running_stats,
                momentum=0.0 if norm.momentum is None else norm.momentum, eps=norm.eps), None


def _activation_kwargs(act: nn.Module) -> dict:
    name = _ACTIVATIONS[type(act)]
    if name == "leaky_relu":
        return dict(activation=name, negative_slope=act.negative_slope)
    if name == "gelu":
        return dict(activation=name, approximate=act.approximate)
    return dict(activation=name)


class _ConvTransposeNormAct(nn.Module):
    """ConvTranspose{1,2}dNormAct: the conv type, its norms and the API function by subclass."""
    _conv: type       # the conv layer it follows
    _api: staticmethod  # the Python API function it calls

    @classmethod
    def from_modules(cls, conv: nn.Module, *layers: nn.Module) -> "_ConvTransposeNormAct":
        """The fused module over ``conv`` and then a norm and an activation, in their order (one of
        them may be absent); parameters and buffers are shared, not copied."""
        _require(cls, "conv", conv, (cls._conv,))
        norm_types = _NORMS_BY_DIMS[_CONVS[cls._conv]]
        norms = [m for m in layers if type(m) in norm_types]
        acts = [m for m in layers if type(m) in _ACTIVATIONS]
        if len(norms) > 1 or len(acts) > 1 or len(norms) + len(acts) != len(layers) or not layers:
            raise TypeError(f"myops.nn.{cls.__name__}.from_modules: after 'conv', expected a normalisation "
                            f"({', '.join('nn.' + t.__name__ for t in norm_types)}) and / or an activation "
                            f"({', '.join('nn.' + t.__name__ for t in _ACTIVATIONS)}), got "
                            f"{[type(m).__name__ for m in layers]}")
        if norms:
            channels = norms[0].num_channels if isinstance(norms[0], nn.GroupNorm) else norms[0].num_features
            _require_channels(cls, "norm", channels, conv)
        children = {"conv": conv}
        for m in layers:
            children["norm" if type(m) in norm_types else "act"] = m
        fused = _adopt(cls, **children)
        fused.order = "act_norm" if acts and norms and layers[0] is acts[0] else "norm_act"
        return fused

    def forward(self, input: Tensor, output_size: Optional[Sequence[int]] = None) -> Tensor:
        read = _member_reader()
        weight, bias, conv_args = _conv_args(read(self, "conv"), input, output_size, read)
        norm, act = self._modules.get("norm"), self._modules.get("act")
        kwargs, owed = _norm_kwargs(norm, read) if norm is not None else (dict(norm="none"), None)
        if act is not None:
            kwargs.update(_activation_kwargs(act))
        return type(self)._api(input, weight, bias, *conv_args, order=self.order, num_batches_tracked=owed, **kwargs)


class ConvTranspose2dNormAct(_ConvTransposeNormAct):
    """A transposed convolution, a normalisation (``nn.BatchNorm2d``, ``nn.SyncBatchNorm``,
    ``nn.InstanceNorm2d``, ``nn.GroupNorm``) and an activation (``nn.ReLU``, ``nn.LeakyReLU``, ``nn.SiLU``, ``nn.GELU``,
    ``nn.Tanh``, ``nn.Sigmoid``; or none), in either order, as one call to
    :func:`myops.conv_transpose2d_norm_act`. Built over existing layers with :meth:`from_modules`
    (or by :func:`swap_modules`); its children are those layers, in their order. The norm behaves
    as its module does in train and eval mode, running buffers and ``num_batches_tracked``
    included."""
    _conv = nn.ConvTranspose2d
    _api = staticmethod(norm_act.conv_transpose2d_norm_act)


class ConvTranspose1dNormAct(_ConvTransposeNormAct):
    """:class:`ConvTranspose2dNormAct` after an ``nn.ConvTranspose1d`` (inputs ``[N, C, L]``), with
    the 1-D normalisations (``nn.BatchNorm1d``, ``nn.SyncBatchNorm``, ``nn.InstanceNorm1d``,
    ``nn.GroupNorm``): one call to :func:`myops.conv_transpose1d_norm_act`."""
    _conv = nn.ConvTranspose1d
    _api = staticmethod(norm_act.conv_transpose1d_norm_act)


_FUSED_BY_DIMS = {2: ConvTranspose2dNormAct, 1: ConvTranspose1dNormAct}


# The chains the swapper replaces: the layer types in order (exact types: a subclass may have its
# own forward), and the fused module that takes them.
CHAINS = {
    "conv_transpose2d_gelu_group_norm":
        ((nn.ConvTranspose2d, nn.GELU, nn.GroupNorm), ConvTranspose2dGELUGroupNorm),
    "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm":
        ((nn.ConvTranspose2d, nn.BatchNorm2d, nn.Tanh, nn.MaxPool2d, nn.GroupNorm),
         ConvTranspose2dBatchNormTanhMaxPool2dGroupNorm),
}


def _has_hooks(module: nn.Module) -> bool:
    # a hook would see (or change) a layer's own input / output, which the fused call never forms
    return any(getattr(module, name, None) for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                                        "_backward_pre_hooks"))


def _conv_dims(module: nn.Module) -> Optional[int]:
    """1 or 2 for an nn.ConvTranspose1d / 2d: its exact type, or the class that
    torch.nn.utils.parametrize derives from it for a parametrized weight (spectral_norm,
    weight_norm: its forward is the conv's); else None."""
    cls = type(module)
    if cls not in _CONVS and parametrize.is_parametrized(module):
        cls = cls.__bases__[0]
    return _CONVS.get(cls)


def _family_run(layers: Sequence[nn.Module]) -> int:
    """How many layers from the start form a family chain: a ConvTranspose1d / 2d, then a norm (of
    its dimensions) and / or an activation in either order (0: none)."""
    dims = _conv_dims(layers[0]) if layers else None
    if dims is None:
        return 0
    norms = _NORMS_BY_DIMS[dims]
    kinds = [norms if type(m) in norms else _ACTIVATIONS if type(m) in _ACTIVATIONS else None for m in layers[1:3]]
    if kinds[:1] == [None] or not kinds:
        return 0
    return 3 if len(kinds) == 2 and kinds[1] is not None and kinds[1] is not kinds[0] else 2


def _fused(layers: Sequence[nn.Module]) -> Optional[Tuple[str, nn.Module, int]]:
    """(chain name, fused module, layers it takes) for a run of layers that starts with one of
    CHAINS exactly, or with a family chain (ConvTranspose{1,2}dNormAct), else None."""
    span = _family_run(layers)
    candidates = list(CHAINS.items())
    if span:
        run = layers[:span]
        dims = _conv_dims(run[0])
        kind = "_".join([f"conv_transpose{dims}d"] + [{**_NORMS_BY_DIMS[dims], **_ACTIVATIONS}[type(m)]
                                                      for m in run[1:]])
        candidates.append((kind, (tuple(type(m) for m in run), _FUSED_BY_DIMS[dims])))
    for name, (types, cls) in candidates:
        if len(layers) >= len(types) and all(type(m) is t for m, t in zip(layers, types)):
            run = layers[:len(types)]
            if any(_has_hooks(m) for m in run):
                return None
            try:
                return name, cls.from_modules(*run), len(run)
            except (TypeError, ValueError):  # e.g. a GroupNorm over another channel count
                return None
    return None


class _Absorbed(nn.Identity):
    """Placeholder for a layer that a fused module before it in the Sequential now runs (keeps the
    indices, so the state_dict keys of the layers after a chain do not move)."""


def swap_modules(model: nn.Module) -> Dict[str, int]:
    """Replaces, in place, every run of layers in an ``nn.Sequential`` of ``model`` (``model``
    itself included) that forms one of the chains with the fused module over the same layers;
    the chain's other positions become identities, so later layers keep their indices. Returns
    ``{chain name: replacements}``.

    A run is replaced only where the fused op computes exactly what the layers did: exact layer
    types (subclasses may define their own forward; a conv whose weight is parametrized, e.g. by
    ``parametrizations.spectral_norm``, counts as its conv), no hooks on them, channel counts that agree,
    a MaxPool2d that does not return indices. The fused modules hold the original layers, so the
    model's parameters and buffers are the same objects, but their state_dict keys change (``i.weight``
    -> ``i.conv.weight``): load checkpoints before swapping, or undo it with :func:`unswap_modules`.
    On the CPU the fused ops run oneDNN's convolution and their own passes: about as fast as
    PyTorch's own layers (the CUDA kernels are the fast ones).
    """
    counts = {name: 0 for name in CHAINS}
    for sequential in [m for m in model.modules() if isinstance(m, nn.Sequential)]:
        layers = list(sequential)
        i = 0
        while i < len(layers):
            found = _fused(layers[i:])
            if found is None:
                i += 1
                continue
            name, sequential[i], span = found
            for j in range(i + 1, i + span):
                sequential[j] = _Absorbed()
            counts[name] = counts.get(name, 0) + 1
            i += span
    return counts


def unswap_modules(model: nn.Module) -> int:
    """Undoes :func:`swap_modules` in place: each fused module it placed in an ``nn.Sequential``
    gives its layers back to their positions. Returns the number of chains restored."""
    restored = 0
    fused_types = tuple(cls for _, cls in CHAINS.values()) + (_ConvTransposeNormAct,)
    for sequential in [m for m in model.modules() if isinstance(m, nn.Sequential)]:
        for i, module in enumerate(list(sequential)):
            if not isinstance(module, fused_types):
                continue
            layers = list(module.children())
            span = range(i + 1, i + len(layers))
            if span.stop > len(sequential) or not all(isinstance(sequential[j], _Absorbed) for j in span):
                continue  # not placed by swap_modules
            for j, layer in zip(range(i, span.stop), layers):
                sequential[j] = layer
            restored += 1
    return restored
