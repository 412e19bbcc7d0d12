"""Runtime options: which kernels run a call, in the style of ``torch.backends`` and
``torch.nn.attention.sdpa_kernel``.

    import myops.backends as B
    B.get_options()                       # every option and its value
    B.set_options(winograd=False)         # process-wide; returns the previous values
    with B.options(conv_source="cudnn"):  # for a block, restored on exit
        ...
    with B.conv_engines("mma"):           # only these conv engines (generic is always the fallback)
        ...
    print(myops.explain(x, w, stride=2))  # which engine a call gets, and why the others did not

Options are process-wide, as ``torch.backends.cudnn.benchmark`` is; kernel plans and the timed
ours-vs-cuDNN choice are cached per option values, so a change applies to the next call.
"""
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, Tuple, Union

import torch

from . import _C

# value kinds: how a Python value maps to the C++ table's int (csrc/common/options.h)
_BOOL, _TRI, _COUNT, _SOURCE = "bool", "tri", "count", "source"
_TRI_VALUES = {"auto": -1, "never": 0, "always": 1}
_SOURCE_VALUES = {"auto": -1, "myops": 1, "cudnn": 2, "cudnn_channels_last": 3}

# name -> (kind, what it chooses)
OPTIONS = {
    "conv_source": (_SOURCE, "whose conv runs a call: 'auto' (the fastest of the candidates, timed at the first "
                             "call of each shape: ours and cuDNN's in both layouts for the plain conv; ours and "
                             "cuDNN's where it may win for the fused ops), 'myops', 'cudnn', 'cudnn_channels_last' "
                             "(an NCHW input through cuDNN's channels-last kernels; the fused ops take it as 'cudnn')"),
    "direct": (_BOOL, "the direct conv engine (few multiply-adds per output value)"),
    "few_channels": (_BOOL, "the few-channels conv engine (at most 4 output channels per group)"),
    "mma": (_BOOL, "the mma.sync conv engine (tensor cores on sm_80+; exact FFMA for strict float32)"),
    "wgmma": (_BOOL, "the Hopper conv engine (wgmma + TMA, sm_90a)"),
    "force_wgmma": (_BOOL, "the Hopper engine for every call it can run, whatever the cost model says"),
    "tma": (_BOOL, "the Hopper engine's bulk-tensor input loads (off: through registers, never NHWC)"),
    "nhwc_staging": (_TRI, "the Hopper engine's input staged channels-last: 'auto', 'never', 'always'"),
    "wide_tiles": (_TRI, "the Hopper engine's wide tiles: 'auto' (plain convs), 'never', 'always'"),
    "winograd": (_BOOL, "Winograd F(2,3) rows for strict float32 where every phase has 3 row taps"),
    "window_stores": (_BOOL, "the BatchNorm chain's conv storing 2 x 2 windows for MaxPool2d(2)"),
    "gn_followers": (_COUNT, "blocks of the GroupNorm pass overlapped with the conv: None (auto), "
                             "0 (separate passes) or a count"),
    "bn_stats_blocks": (_COUNT, "blocks per channel of the batch-statistics reduction: None (auto) or 1-8"),
    "bn_tail_prefetch": (_BOOL, "the BatchNorm chain's persistent, prefetching tail kernel"),
    "early_launch": (_BOOL, "programmatic dependent launch (a kernel starting under the one before it)"),
    "gelu_vectors": (_COUNT, "16-byte vectors per thread in the GELU kernel: None (auto), 1, 2 or 4"),
    "hopper": (_BOOL, "sm_90 features where the GPU and the build have them: thread block clusters, programmatic "
                      "dependent launch, the Hopper engine (off: every kernel as on an sm_80 GPU)"),
    "cpu_reference": (_BOOL, "the CPU ops' conv by myops' GEMM + col2im reference (a test oracle) instead of "
                             "ATen's (oneDNN)"),
    "recompute_conv": (_BOOL, "training: a chain whose gelu / silu comes before its normalisation saves only its "
                              "activation output and recomputes the conv in backward (less memory; off: saves the "
                              "conv output, no conv in backward). Read when a call is traced or run"),
    "cpu_channels_last": (_TRI, "the CPU conv of an NCHW input by oneDNN's channels-last kernels, layout copies "
                                "included: 'auto' (the faster way, timed at the first call of each shape; NCHW "
                                "under torch.use_deterministic_algorithms), 'never', 'always'"),
    "aten_training": (_TRI, "eager training (float32 / 64): what follows the conv in the family and the BatchNorm "
                            "chain, and standalone group_norm (and, on the CPU, gelu), by ATen's ops and fused norm "
                            "backward, which keep what backward needs: 'auto' (on the CPU and CUDA), 'never' (the ops "
                            "and their formulas), 'always' (every device)"),
}

CONV_ENGINES = ("direct", "few_channels", "mma", "wgmma")

Value = Union[bool, int, str, None]


def _check_names() -> None:
    native = list(_C._option_names())
    if sorted(native) != sorted(OPTIONS):  # the extension and this file must agree
        raise RuntimeError(f"myops.backends: the extension's options {native} differ from {sorted(OPTIONS)}; "
                           "rebuild myops")


_check_names()


def _encode(name: str, value: Value) -> int:
    if name not in OPTIONS:
        raise ValueError(f"myops.backends: no option '{name}' (options: {', '.join(OPTIONS)})")
    kind = OPTIONS[name][0]
    if kind == _BOOL:
        if not isinstance(value, bool):
            raise ValueError(f"myops.backends: option '{name}' takes True or False, got {value!r}")
        return int(value)
    if kind in (_TRI, _SOURCE):
        table = _TRI_VALUES if kind == _TRI else _SOURCE_VALUES
        if value not in table:
            raise ValueError(f"myops.backends: option '{name}' takes one of {list(table)}, got {value!r}")
        return table[value]
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"myops.backends: option '{name}' takes None (auto) or a count >= 0, got {value!r}")
    return value


def _decode(name: str, raw: int) -> Value:
    kind = OPTIONS[name][0]
    if kind == _BOOL:
        return bool(raw)
    if kind in (_TRI, _SOURCE):
        table = _TRI_VALUES if kind == _TRI else _SOURCE_VALUES
        return next(k for k, v in table.items() if v == raw)
    return None if raw < 0 else raw


@torch.compiler.assume_constant_result
def get_option(name: str) -> Value:
    """One option's current value (a constant to torch.compile: read when a call is traced)."""
    if name not in OPTIONS:
        raise ValueError(f"myops.backends: no option '{name}' (options: {', '.join(OPTIONS)})")
    return _decode(name, _C._get_option(name))


def get_options() -> Dict[str, Value]:
    """Every option and its current value."""
    return {name: _decode(name, _C._get_option(name)) for name in OPTIONS}


def set_options(**values: Value) -> Dict[str, Value]:
    """Sets the given options process-wide; returns their previous values (for set_options(**prev))."""
    encoded = {name: _encode(name, value) for name, value in values.items()}  # all checked before any is set
    previous = {name: _decode(name, _C._get_option(name)) for name in encoded}
    for name, raw in encoded.items():
        _C._set_option(name, raw)
    return previous


def parse_assignment(text: str) -> Tuple[str, Value]:
    """'name=value' as a command line gives it (pytest's --myops-option, the demos' --option) as
    (name, value): 1 / true / on for a bool, an int, None, or a name such as 'never'."""
    name, sep, value = text.partition("=")
    if not sep or name not in OPTIONS:
        raise ValueError(f"myops.backends: expected NAME=VALUE with NAME one of {', '.join(OPTIONS)}, got {text!r}")
    if OPTIONS[name][0] == _BOOL:
        return name, value.lower() in ("1", "true", "on")
    if value.lstrip("-").isdigit():
        return name, int(value)
    return name, None if value == "None" else value


def reset() -> None:
    """Every option back to its default."""
    set_options(**DEFAULTS)


@contextmanager
def options(**values: Value) -> Iterator[None]:
    """Sets the given options for the block, then restores them."""
    previous = set_options(**values)
    try:
        yield
    finally:
        set_options(**previous)


@contextmanager
def conv_engines(*engines: str, force_wgmma: Optional[bool] = None) -> Iterator[None]:
    """Only the named conv engines (of CONV_ENGINES) may run a call for the block; the generic
    implicit-GEMM kernel remains the fallback for calls none of them takes."""
    unknown = [e for e in engines if e not in CONV_ENGINES]
    if unknown:
        raise ValueError(f"myops.backends.conv_engines: unknown engine(s) {unknown}; engines: {CONV_ENGINES}")
    values: Dict[str, Value] = {e: e in engines for e in CONV_ENGINES}
    if force_wgmma is not None:
        values["force_wgmma"] = force_wgmma
    with options(**values):
        yield


DEFAULTS: Dict[str, Value] = get_options()  # at import, before any change
