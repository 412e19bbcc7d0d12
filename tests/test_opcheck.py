"""torch.library.opcheck on every op: schema, autograd registration, fake impl vs real kernel,
AOTAutograd with dynamic shapes. The samples cover every argument of every op."""
import pytest
import torch

from conftest import DEVICES


def _t(*shape, device, dtype=torch.float32, grad=False):
    return torch.randn(*shape, device=device, dtype=dtype, requires_grad=grad)


def conv_samples(device):
    # (input, weight, bias, stride, padding, output_padding, groups, dilation)
    return [
        (_t(2, 4, 5, 6, device=device), _t(4, 3, 3, 3, device=device), _t(3, device=device), [1, 1], [0, 0], [0, 0], 1, [1, 1]),
        (_t(1, 4, 5, 4, device=device, grad=True), _t(4, 2, 3, 2, device=device, grad=True), _t(4, device=device, grad=True),
         [2, 3], [1, 0], [1, 2], 2, [1, 1]),
        (_t(2, 6, 4, 5, device=device, grad=True), _t(6, 1, 2, 3, device=device, grad=True), None, [2, 1], [0, 1], [1, 1], 3, [2, 2]),
        (_t(0, 2, 3, 3, device=device), _t(2, 2, 3, 3, device=device), None, [1, 1], [1, 1], [0, 0], 1, [1, 1]),
        (_t(2, 4, 5, 6, device=device, grad=True).contiguous(memory_format=torch.channels_last),
         _t(4, 3, 3, 3, device=device, grad=True), _t(3, device=device), [2, 2], [1, 1], [1, 1], 1, [1, 1]),
        (_t(1, 2, 3, 4, device=device, dtype=torch.float64, grad=True), _t(2, 3, 2, 2, device=device, dtype=torch.float64, grad=True),
         _t(3, device=device, dtype=torch.float64, grad=True), [1, 2], [0, 1], [0, 1], 1, [3, 1]),
        (_t(2, 2, 3, 3, device=device, dtype=torch.bfloat16), _t(2, 2, 3, 3, device=device, dtype=torch.bfloat16), None,
         [1, 1], [0, 0], [0, 0], 1, [1, 1]),
    ]


def gelu_samples(device):
    return [
        ((_t(3, 4, 5, device=device),), {}),
        ((_t(2, 3, 4, 5, device=device, grad=True),), {"approximate": "tanh"}),
        ((_t(2, 3, 4, 5, device=device, grad=True).contiguous(memory_format=torch.channels_last),), {"approximate": "none"}),
        ((_t(7, device=device, dtype=torch.float64, grad=True),), {"approximate": "tanh"}),
        ((_t(4, 6, device=device, dtype=torch.float16),), {}),
    ]


def group_norm_samples(device):
    # (input, num_groups, weight, bias, eps)
    return [
        (_t(2, 6, 4, 5, device=device), 3, _t(6, device=device), _t(6, device=device), 1e-5),
        (_t(2, 6, 4, 5, device=device, grad=True), 2, _t(6, device=device, grad=True), _t(6, device=device, grad=True), 1e-3),
        (_t(3, 4, 7, device=device, grad=True), 4, None, None, 1e-5),
        (_t(2, 4, 3, 3, device=device, grad=True).contiguous(memory_format=torch.channels_last), 1,
         _t(4, device=device, grad=True), None, 1e-5),
        (_t(2, 4, 3, 3, device=device, dtype=torch.float64, grad=True), 2, None, _t(4, device=device, dtype=torch.float64, grad=True), 1e-5),
        (_t(0, 4, 3, 3, device=device), 2, None, None, 1e-5),
    ]


def fused_samples(device):
    out = []
    for i, (x, w, b, *conv) in enumerate(conv_samples(device)):
        c_out = w.shape[1] * conv[3]
        grad = x.requires_grad
        gn_w = _t(c_out, device=device, dtype=x.dtype, grad=grad) if i % 2 == 0 else None
        gn_b = _t(c_out, device=device, dtype=x.dtype, grad=grad) if i % 3 != 1 else None
        num_groups = c_out if i % 2 else 1
        out.append((x, w, b, *conv, "tanh" if i % 2 else "none", num_groups, gn_w, gn_b, 1e-5))
    return out


def group_stats_samples(device):
    # the fused samples without GroupNorm's affine parameters; non-empty batches (the statistics of
    # an empty group are NaN, which opcheck's comparisons reject)
    return [(*a[:10], a[12]) for a in fused_samples(device) if a[0].shape[0] > 0]


def channel_stats_samples(device):
    return [(x, w, b, *conv) for x, w, b, *conv in conv_samples(device) if x.shape[0] > 0]


def bn_chain_samples(device):
    # (input, mean, var, bn_weight, bn_bias, bn_eps, kernel_size, pool_stride, pool_padding,
    #  pool_dilation, num_groups, gn_weight, gn_bias, gn_eps)
    f32 = torch.float32
    return [
        (_t(2, 4, 6, 5, device=device), _t(4, device=device), _t(4, device=device).abs() + 0.5, _t(4, device=device),
         _t(4, device=device), 1e-5, [2, 2], [2, 2], [0, 0], [1, 1], 2, _t(4, device=device), _t(4, device=device), 1e-5),
        (_t(2, 4, 6, 5, device=device, grad=True), _t(4, device=device, grad=True),
         (_t(4, device=device).abs() + 0.5).requires_grad_(), _t(4, device=device, grad=True), None, 1e-3,
         [3, 2], [1, 2], [1, 1], [1, 2], 4, None, _t(4, device=device, grad=True), 1e-5),
        (_t(1, 6, 5, 5, device=device, grad=True).contiguous(memory_format=torch.channels_last), _t(6, device=device),
         _t(6, device=device).abs() + 0.5, None, None, 1e-5, [2, 3], [3, 1], [0, 1], [2, 1], 3,
         _t(6, device=device, grad=True), None, 1e-5),
        (_t(2, 2, 4, 4, device=device, dtype=torch.float64, grad=True), _t(2, device=device, dtype=torch.float64, grad=True),
         (_t(2, device=device, dtype=torch.float64).abs() + 0.5).requires_grad_(),
         _t(2, device=device, dtype=torch.float64, grad=True), _t(2, device=device, dtype=torch.float64, grad=True), 1e-5,
         [1, 1], [1, 1], [0, 0], [1, 1], 1, None, None, 1e-5),
        (_t(2, 4, 6, 6, device=device, dtype=torch.bfloat16), _t(4, device=device, dtype=f32),
         _t(4, device=device, dtype=f32).abs() + 0.5, _t(4, device=device, dtype=torch.bfloat16), None, 1e-5,
         [2, 2], [2, 2], [0, 0], [1, 1], 2, None, None, 1e-5),
    ]


def conv_bn_chain_samples(device):
    # (conv args..., mean, var, bn_weight, bn_bias, training, bn_eps, kernel_size, pool_stride,
    #  pool_padding, pool_dilation, num_groups, gn_weight, gn_bias, gn_eps): training with and
    # without affine parameters, eval with running statistics, every dtype and layout of conv_samples
    out = []
    for i, (x, w, b, *conv) in enumerate(conv_samples(device)):
        if x.shape[0] == 0:
            continue
        c = w.shape[1] * conv[3]
        like = dict(device=device, dtype=x.dtype)
        bn_w = _t(c, **like, grad=x.requires_grad) if i % 2 == 0 else None
        bn_b = _t(c, **like, grad=x.requires_grad) if i % 3 != 2 else None
        gn = (_t(c, **like, grad=x.requires_grad), None) if i % 2 else (None, _t(c, **like))
        pool = ([2, 2], [2, 2], [0, 0], [1, 1]) if i % 2 == 0 else ([2, 1], [1, 2], [1, 0], [1, 1])
        training = i != 2
        stats = (None, None) if training else (_t(c, device=device), _t(c, device=device).abs() + 0.5)
        out.append((x, w, b, *conv, *stats, bn_w, bn_b, training, 1e-5, *pool, 1, *gn, 1e-5))
    return out


def update_samples(device):
    # (running_mean, running_var, mean, var, momentum, var_factor, num_batches_tracked): the buffers
    # in every dtype, statistics float32 / float64, strided buffers, with and without the counter
    f32 = torch.float32
    count = lambda: torch.tensor(3, device=device)
    out = []
    for dt in (f32, torch.float64, torch.bfloat16, torch.float16):
        stats = torch.float64 if dt == torch.float64 else f32
        out.append((_t(5, device=device, dtype=dt), _t(5, device=device, dtype=dt).abs(), _t(5, device=device, dtype=stats),
                    _t(5, device=device, dtype=stats).abs(), 0.1, 5 / 4, count() if dt != torch.bfloat16 else None))
    out.append((_t(10, device=device)[::2], _t(15, device=device)[::3].abs(), _t(5, device=device),
                _t(5, device=device).abs(), 0.3, 1.0, count()))
    return out


def act_stats_samples(device):
    # every activation and statistics kind, with and without bias, channels-last, float64, bfloat16
    out = []
    configs = [("none", "channel", 1), ("gelu", "group", 2), ("silu", "group", 6), ("relu", "none", 1),
               ("leaky_relu", "channel", 1), ("tanh", "group", 3), ("sigmoid", "channel", 1)]
    for i, (activation, stats, groups_n) in enumerate(configs):
        x = _t(2, 4, 3, 4, device=device, grad=i % 2 == 0)
        if i == 2:
            x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
        w, b = _t(4, 6, 3, 2, device=device, grad=True), _t(6, device=device, grad=True) if i % 3 else None
        out.append((x, w, b, [2, 1], [1, 0], [1, 0], 1, [1, 1], activation, 0.2, "tanh" if i == 1 else "none",
                    stats, groups_n))
    f64 = dict(device=device, dtype=torch.float64, grad=True)
    out.append((_t(1, 2, 3, 3, **f64), _t(2, 4, 2, 2, **f64), _t(8, **f64), [1, 1], [0, 0], [0, 0], 2, [1, 1],
                "silu", 0.01, "none", "group", 4))
    bf16 = dict(device=device, dtype=torch.bfloat16)
    out.append((_t(2, 4, 3, 3, **bf16), _t(4, 4, 3, 3, **bf16), None, [2, 2], [1, 1], [1, 1], 1, [1, 1], "relu", 0.01,
                "none", "channel", 1))
    return out


def normalize_act_samples(device):
    # [N, C] parameters; NCHW, channels-last, 3-D, float64, bfloat16, an odd plane (no vectors)
    out = []
    for i, (shape, dtype, activation) in enumerate([((2, 4, 3, 4), torch.float32, "silu"),
                                                     ((2, 6, 5, 3), torch.float32, "leaky_relu"),
                                                     ((3, 4, 7), torch.float64, "gelu"),
                                                     ((2, 8, 4, 4), torch.bfloat16, "relu"),
                                                     ((1, 3, 3, 3), torch.float32, "none")]):
        x = _t(*shape, device=device, dtype=dtype, grad=dtype != torch.bfloat16)
        if i == 1:
            x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
        ct = torch.float64 if dtype == torch.float64 else torch.float32
        mean, shift = (_t(shape[0], shape[1], device=device, dtype=ct, grad=i % 2 == 0) for _ in range(2))
        scale = (torch.rand(shape[0], shape[1], device=device, dtype=ct) + 0.5).requires_grad_(i != 3)
        out.append((x, mean, scale, shift, activation, 0.2, "tanh" if i == 2 else "none"))
    return out


# op name -> samples as (args, kwargs)
SAMPLES = {
    "conv_transpose2d": lambda d: [(a, {}) for a in conv_samples(d)],
    "gelu": gelu_samples,
    "group_norm": lambda d: [(a, {}) for a in group_norm_samples(d)],
    "conv_transpose2d_gelu_group_norm": lambda d: [(a, {}) for a in fused_samples(d)],
    "conv_transpose2d_gelu_group_stats": lambda d: [(a, {}) for a in group_stats_samples(d)],
    "conv_transpose2d_channel_stats": lambda d: [(a, {}) for a in channel_stats_samples(d)],
    "batch_norm_tanh_max_pool2d_group_norm": lambda d: [(a, {}) for a in bn_chain_samples(d)],
    "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm": lambda d: [(a, {}) for a in conv_bn_chain_samples(d)],
    "batch_norm_update_running_stats": lambda d: [(a, {}) for a in update_samples(d)],
    "conv_transpose2d_act_stats": lambda d: [(a, {}) for a in act_stats_samples(d)],
    "normalize_act": lambda d: [(a, {}) for a in normalize_act_samples(d)],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", list(SAMPLES))
def test_opcheck(device, op_name):
    op = getattr(torch.ops.myops, op_name).default
    for args, kwargs in SAMPLES[op_name](device):
        torch.library.opcheck(op, args, kwargs)


def test_schemas_are_the_designed_ones():
    expected = {
        "conv_transpose2d": "myops::conv_transpose2d(Tensor input, Tensor weight, Tensor? bias, SymInt[2] stride, "
        "SymInt[2] padding, SymInt[2] output_padding, SymInt groups, SymInt[2] dilation) -> Tensor",
        "gelu": 'myops::gelu(Tensor self, *, str approximate="none") -> Tensor',
        "group_norm": "myops::group_norm(Tensor input, int num_groups, Tensor? weight, Tensor? bias, float eps) -> Tensor",
        "conv_transpose2d_gelu_group_norm": "myops::conv_transpose2d_gelu_group_norm(Tensor input, Tensor weight, "
        "Tensor? bias, SymInt[2] stride, SymInt[2] padding, SymInt[2] output_padding, SymInt groups, SymInt[2] dilation, "
        "str approximate, int num_groups, Tensor? gn_weight, Tensor? gn_bias, float eps) -> Tensor",
        "conv_transpose2d_gelu_group_stats": "myops::conv_transpose2d_gelu_group_stats(Tensor input, Tensor weight, "
        "Tensor? bias, SymInt[2] stride, SymInt[2] padding, SymInt[2] output_padding, SymInt groups, SymInt[2] dilation, "
        "str approximate, int num_groups, float eps) -> (Tensor, Tensor, Tensor)",
        "conv_transpose2d_channel_stats": "myops::conv_transpose2d_channel_stats(Tensor input, Tensor weight, "
        "Tensor? bias, SymInt[2] stride, SymInt[2] padding, SymInt[2] output_padding, SymInt groups, "
        "SymInt[2] dilation) -> (Tensor, Tensor, Tensor)",
        "batch_norm_tanh_max_pool2d_group_norm": "myops::batch_norm_tanh_max_pool2d_group_norm(Tensor input, "
        "Tensor mean, Tensor var, Tensor? bn_weight, Tensor? bn_bias, float bn_eps, int[2] kernel_size, "
        "int[2] pool_stride, int[2] pool_padding, int[2] pool_dilation, int num_groups, Tensor? gn_weight, "
        "Tensor? gn_bias, float gn_eps) -> Tensor",
        "conv_transpose2d_batch_norm_tanh_max_pool2d_group_norm": "myops::conv_transpose2d_batch_norm_tanh_max_pool2d_"
        "group_norm(Tensor input, Tensor weight, Tensor? bias, SymInt[2] stride, SymInt[2] padding, "
        "SymInt[2] output_padding, SymInt groups, SymInt[2] dilation, Tensor? mean, Tensor? var, Tensor? bn_weight, "
        "Tensor? bn_bias, bool training, float bn_eps, int[2] kernel_size, int[2] pool_stride, int[2] pool_padding, "
        "int[2] pool_dilation, int num_groups, Tensor? gn_weight, Tensor? gn_bias, float gn_eps) "
        "-> (Tensor, Tensor, Tensor)",
        "batch_norm_update_running_stats": "myops::batch_norm_update_running_stats(Tensor(a!) running_mean, "
        "Tensor(b!) running_var, Tensor mean, Tensor var, float momentum, float var_factor, "
        "Tensor(c!)? num_batches_tracked) -> ()",
        "conv_transpose2d_act_stats": "myops::conv_transpose2d_act_stats(Tensor input, Tensor weight, Tensor? bias, "
        "SymInt[2] stride, SymInt[2] padding, SymInt[2] output_padding, SymInt groups, SymInt[2] dilation, "
        "str activation, float negative_slope, str approximate, str stats, int num_groups) -> (Tensor, Tensor, Tensor)",
        "normalize_act": "myops::normalize_act(Tensor input, Tensor mean, Tensor scale, Tensor shift, "
        "str activation, float negative_slope, str approximate) -> Tensor",
    }
    for name, schema in expected.items():
        assert str(getattr(torch.ops.myops, name).default._schema) == schema
