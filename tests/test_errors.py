"""Every bad input raises an error that names the op and the argument, on the real kernels and on
the fake (meta) path that torch.compile traces through."""
import pytest
import torch
import torch.nn.functional as F

import myops

OPS = torch.ops.myops


def t(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device)


def conv(x=None, w=None, b=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1, dilation=(1, 1), device="cpu"):
    x = t(2, 4, 5, 5, device=device) if x is None else x
    w = t(4, 3, 3, 3, device=device) if w is None else w
    return OPS.conv_transpose2d(x, w, b, list(stride), list(padding), list(output_padding), groups, list(dilation))


def fused(approximate="none", num_groups=3, gn_weight=None, gn_bias=None, device="cpu", **conv_kwargs):
    x = t(2, 4, 5, 5, device=device)
    w = t(4, 3, 3, 3, device=device)
    return OPS.conv_transpose2d_gelu_group_norm(x, w, None, [1, 1], [0, 0], [0, 0], 1, [1, 1], approximate,
                                                num_groups, gn_weight, gn_bias, 1e-5)


def group_stats(approximate="none", num_groups=3, stride=(1, 1), device="cpu"):
    x = t(2, 4, 5, 5, device=device)
    w = t(4, 3, 3, 3, device=device)
    return OPS.conv_transpose2d_gelu_group_stats(x, w, None, list(stride), [0, 0], [0, 0], 1, [1, 1], approximate,
                                                 num_groups, 1e-5)


def chain(x=None, mean=None, var=None, bn_weight=None, kernel_size=(2, 2), pool_stride=(2, 2), pool_padding=(0, 0),
          pool_dilation=(1, 1), num_groups=2, gn_weight=None, device="cpu"):
    x = t(2, 4, 6, 6, device=device) if x is None else x
    mean = t(4, device=device) if mean is None else mean
    var = t(4, device=device).abs() if var is None else var
    return OPS.batch_norm_tanh_max_pool2d_group_norm(x, mean, var, bn_weight, None, 1e-5, list(kernel_size),
                                                     list(pool_stride), list(pool_padding), list(pool_dilation),
                                                     num_groups, gn_weight, None, 1e-5)


def conv_chain(training=True, mean=None, var=None, x=None, k=3, bn_weight=None, kernel_size=(2, 2), device="cpu"):
    x = t(2, 4, 3, 3, device=device) if x is None else x
    w = t(4, 3, k, k, device=device)
    return OPS.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(
        x, w, None, [1, 1], [0, 0], [0, 0], 1, [1, 1], mean, var, bn_weight, None, training, 1e-5, list(kernel_size),
        [2, 2], [0, 0], [1, 1], 3, None, None, 1e-5)


def C(device):
    """Bad-input cases: (description, thunk, op name, argument name)."""
    d = device
    return [
        ("input rank", lambda: conv(x=t(4, 5, 5, device=d), device=d), "conv_transpose2d", "input"),
        ("weight rank", lambda: conv(w=t(4, 3, 3, device=d), device=d), "conv_transpose2d", "weight"),
        ("weight dtype", lambda: conv(w=t(4, 3, 3, 3, dtype=torch.float64, device=d), device=d), "conv_transpose2d", "weight"),
        ("bias dtype", lambda: conv(b=t(3, dtype=torch.float16, device=d), device=d), "conv_transpose2d", "bias"),
        ("integer input", lambda: conv(x=torch.ones(2, 4, 5, 5, dtype=torch.int32, device=d),
                                       w=torch.ones(4, 3, 3, 3, dtype=torch.int32, device=d), device=d), "conv_transpose2d", "input"),
        ("groups do not divide C_in", lambda: conv(x=t(2, 6, 5, 5, device=d), w=t(6, 2, 3, 3, device=d), groups=4, device=d),
         "conv_transpose2d", "groups"),
        ("weight C_in mismatch", lambda: conv(w=t(8, 3, 3, 3, device=d), groups=2, device=d), "conv_transpose2d", "weight"),
        ("output_padding too big", lambda: conv(stride=(2, 2), output_padding=(2, 0), device=d), "conv_transpose2d", "output_padding"),
        ("output_padding >= dilation and stride", lambda: conv(output_padding=(0, 1), device=d), "conv_transpose2d", "output_padding"),
        ("zero stride", lambda: conv(stride=(0, 1), device=d), "conv_transpose2d", "stride"),
        ("zero dilation", lambda: conv(dilation=(1, 0), device=d), "conv_transpose2d", "dilation"),
        ("negative padding", lambda: conv(padding=(-1, 0), device=d), "conv_transpose2d", "padding"),
        ("non-positive output size", lambda: conv(padding=(4, 0), device=d), "conv_transpose2d", "padding"),
        ("bias length", lambda: conv(b=t(4, device=d), device=d), "conv_transpose2d", "bias"),
        ("stride length", lambda: conv(stride=(1, 1, 1), device=d), "conv_transpose2d", "stride"),
        ("zero groups", lambda: conv(groups=0, device=d), "conv_transpose2d", "groups"),
        ("gelu approximate", lambda: OPS.gelu(t(3, device=d), approximate="sigmoid"), "gelu", "approximate"),
        ("gelu dtype", lambda: OPS.gelu(torch.ones(3, dtype=torch.int64, device=d)), "gelu", "self"),
        ("group_norm groups", lambda: OPS.group_norm(t(2, 6, 3, device=d), 4, None, None, 1e-5), "group_norm", "num_groups"),
        ("group_norm zero groups", lambda: OPS.group_norm(t(2, 6, 3, device=d), 0, None, None, 1e-5), "group_norm", "num_groups"),
        ("group_norm rank", lambda: OPS.group_norm(t(6, device=d), 1, None, None, 1e-5), "group_norm", "input"),
        ("group_norm weight length", lambda: OPS.group_norm(t(2, 6, 3, device=d), 3, t(5, device=d), None, 1e-5), "group_norm", "weight"),
        ("group_norm bias dtype", lambda: OPS.group_norm(t(2, 6, 3, device=d), 3, None, t(6, dtype=torch.float64, device=d), 1e-5),
         "group_norm", "bias"),
        ("fused approximate", lambda: fused(approximate="fast", device=d), "conv_transpose2d_gelu_group_norm", "approximate"),
        ("fused num_groups", lambda: fused(num_groups=4, device=d), "conv_transpose2d_gelu_group_norm", "num_groups"),
        ("fused gn_weight length", lambda: fused(gn_weight=t(4, device=d), device=d), "conv_transpose2d_gelu_group_norm", "gn_weight"),
        ("fused gn_bias dtype", lambda: fused(gn_bias=t(3, dtype=torch.bfloat16, device=d), device=d),
         "conv_transpose2d_gelu_group_norm", "gn_bias"),
        ("group stats approximate", lambda: group_stats(approximate="erf", device=d), "conv_transpose2d_gelu_group_stats",
         "approximate"),
        ("group stats num_groups", lambda: group_stats(num_groups=2, device=d), "conv_transpose2d_gelu_group_stats",
         "num_groups"),
        ("group stats stride", lambda: group_stats(stride=(0, 1), device=d), "conv_transpose2d_gelu_group_stats", "stride"),
        ("stats conv groups", lambda: OPS.conv_transpose2d_channel_stats(t(2, 6, 5, 5, device=d), t(6, 2, 3, 3, device=d),
                                                                         None, [1, 1], [0, 0], [0, 0], 4, [1, 1]),
         "conv_transpose2d_channel_stats", "groups"),
        ("chain input rank", lambda: chain(x=t(4, 6, 6, device=d), device=d), "batch_norm_tanh_max_pool2d_group_norm", "input"),
        ("chain mean length", lambda: chain(mean=t(3, device=d), device=d), "batch_norm_tanh_max_pool2d_group_norm", "mean"),
        ("chain var dtype", lambda: chain(var=torch.ones(4, dtype=torch.int64, device=d), device=d),
         "batch_norm_tanh_max_pool2d_group_norm", "var"),
        ("chain bn_weight dtype", lambda: chain(bn_weight=t(4, dtype=torch.float64, device=d), device=d),
         "batch_norm_tanh_max_pool2d_group_norm", "bn_weight"),
        ("chain pool padding", lambda: chain(pool_padding=(2, 0), device=d), "batch_norm_tanh_max_pool2d_group_norm",
         "pool_padding"),
        ("chain zero pool stride", lambda: chain(pool_stride=(0, 2), device=d), "batch_norm_tanh_max_pool2d_group_norm",
         "pool_stride"),
        ("chain kernel too big", lambda: chain(kernel_size=(7, 2), device=d), "batch_norm_tanh_max_pool2d_group_norm",
         "kernel_size"),
        ("chain kernel_size length", lambda: chain(kernel_size=(2, 2, 2), device=d),
         "batch_norm_tanh_max_pool2d_group_norm", "kernel_size"),
        ("chain num_groups", lambda: chain(num_groups=3, device=d), "batch_norm_tanh_max_pool2d_group_norm", "num_groups"),
        ("chain gn_weight length", lambda: chain(gn_weight=t(2, device=d), device=d),
         "batch_norm_tanh_max_pool2d_group_norm", "gn_weight"),
        ("one-call mean in training", lambda: conv_chain(mean=t(3, device=d), device=d), ONE_CALL, "mean"),
        ("one-call var in training", lambda: conv_chain(var=t(3, device=d), device=d), ONE_CALL, "var"),
        ("one-call no mean in eval", lambda: conv_chain(training=False, var=t(3, device=d), device=d), ONE_CALL, "mean"),
        ("one-call var length", lambda: conv_chain(training=False, mean=t(3, device=d), var=t(2, device=d), device=d),
         ONE_CALL, "var"),
        ("one-call one value", lambda: conv_chain(x=t(1, 4, 1, 1, device=d), k=1, kernel_size=(1, 1), device=d),
         ONE_CALL, "input"),
        ("one-call bn_weight", lambda: conv_chain(bn_weight=t(2, device=d), device=d), ONE_CALL, "bn_weight"),
        ("one-call pool", lambda: conv_chain(kernel_size=(6, 2), device=d), ONE_CALL, "kernel_size"),
        ("update running_mean 2-D", lambda: update(rm=t(2, 2, device=d), device=d), UPDATE, "running_mean"),
        ("update running_mean int", lambda: update(rm=torch.zeros(4, dtype=torch.int32, device=d), device=d), UPDATE,
         "running_mean"),
        ("update running_var length", lambda: update(rv=t(3, device=d), device=d), UPDATE, "running_var"),
        ("update running_var dtype", lambda: update(rv=t(4, dtype=torch.float64, device=d), device=d), UPDATE,
         "running_var"),
        ("update mean length", lambda: update(mean=t(5, device=d), device=d), UPDATE, "mean"),
        ("update var dtype", lambda: update(var=t(4, dtype=torch.float16, device=d), device=d), UPDATE, "var"),
        ("update counter dtype", lambda: update(nbt=torch.tensor(1.0, device=d), device=d), UPDATE,
         "num_batches_tracked"),
        ("update counter shape", lambda: update(nbt=torch.zeros(2, dtype=torch.int64, device=d), device=d), UPDATE,
         "num_batches_tracked"),
    ]


UPDATE = "batch_norm_update_running_stats"


def update(rm=None, rv=None, mean=None, var=None, nbt=None, device="cpu"):
    rm, rv = (t(4, device=device) if v is None else v for v in (rm, rv))
    mean, var = (t(4, device=device) if v is None else v for v in (mean, var))
    return OPS.batch_norm_update_running_stats(rm, rv, mean, var, 0.1, 1.0, nbt)


ONE_CALL = "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm"


def _ids(device):
    return [c[0] for c in C(device)]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("index", range(len(C("cpu"))), ids=_ids("cpu"))
def test_bad_input_names_op_and_argument(device, index):
    _, thunk, op, arg = C(device)[index]
    with pytest.raises(RuntimeError, match=rf"myops::{op}: argument '{arg}'"):
        thunk()


def test_device_mismatch_is_reported():
    # input on the CPU, weight / bias / gn_weight on another device ("meta" exists on every machine)
    with pytest.raises(RuntimeError, match=r"myops::conv_transpose2d: argument 'weight' is on meta"):
        conv(w=t(4, 3, 3, 3, device="meta"))
    with pytest.raises(RuntimeError, match=r"myops::conv_transpose2d: argument 'bias' is on meta"):
        conv(b=t(3, device="meta"))
    with pytest.raises(RuntimeError, match=r"myops::group_norm: argument 'weight' is on meta"):
        OPS.group_norm(t(2, 6, 3), 3, t(6, device="meta"), None, 1e-5)
    with pytest.raises(RuntimeError, match=r"myops::conv_transpose2d_gelu_group_norm: argument 'gn_weight' is on meta"):
        fused(gn_weight=t(3, device="meta"))


@pytest.mark.parametrize("case", ["rank", "zero groups", "weight length", "weight device", "gelu approximate"])
def test_api_in_cpu_training_names_op_and_argument(case):
    # a CPU call that records a gradient runs aten's GroupNorm / GELU; its arguments are still the
    # op's to refuse
    x = t(2, 6, 3).requires_grad_()
    call, op, arg = {
        "rank": (lambda: myops.group_norm(t(6).requires_grad_(), 1), "group_norm", "input"),
        "zero groups": (lambda: myops.group_norm(x, 0), "group_norm", "num_groups"),
        "weight length": (lambda: myops.group_norm(x, 3, t(5)), "group_norm", "weight"),
        "weight device": (lambda: myops.group_norm(x, 3, t(6, device="meta")), "group_norm", "weight"),
        "gelu approximate": (lambda: myops.gelu(x, "fast"), "gelu", "approximate")}[case]
    with pytest.raises((RuntimeError, ValueError), match=rf"myops[:.]+{op}: argument '{arg}'"):
        call()


def test_python_api_refuses_single_value_groups_like_functional_group_norm():
    # torch.nn.functional.group_norm refuses a batch of 1 with one channel of one pixel per group
    # (aten.group_norm, which the ops follow, returns zeros there); the Python API mirrors F
    x = t(1, 4, 1, 1)
    with pytest.raises(ValueError, match="Expected more than 1 value"):
        F.group_norm(x, 4)
    with pytest.raises(ValueError, match=r"myops.group_norm: expected more than 1 value per group"):
        myops.group_norm(x, 4)
    assert OPS.group_norm(x, 4, None, None, 1e-5).abs().max() == 0  # the op: aten's semantics
    assert myops.group_norm(t(2, 4, 1, 1), 4).shape == (2, 4, 1, 1)  # two values per group: fine
    assert myops.group_norm(t(1, 4, 1, 1), 2).shape == (1, 4, 1, 1)
    w = t(3, 2, 1, 1)  # a 1 x 1 output of 2 channels
    for x in (t(1, 3, 1, 1), t(3, 1, 1)):
        with pytest.raises(ValueError, match=r"myops.conv_transpose2d_gelu_group_norm: expected more than 1 value"):
            myops.conv_transpose2d_gelu_group_norm(x, w, num_groups=2)
    with pytest.raises(ValueError, match=r"myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm: expected "
                                         r"more than 1 value per group"):
        myops.conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm(t(1, 3, 2, 2), w, training=True, kernel_size=2,
                                                                     num_groups=2)


def test_update_refuses_buffers_that_require_grad():
    # the op writes the buffers below autograd: a buffer in a graph would silently lose the write
    rm = torch.zeros(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="myops::batch_norm_update_running_stats: argument 'running_mean' is "
                                           "updated in place and must not require grad"):
        OPS.batch_norm_update_running_stats(rm, torch.ones(4), t(4), t(4), 0.1, 1.0, None)
