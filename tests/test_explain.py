"""myops.explain: which kernel runs a conv call and why, under the current myops.backends options."""
import pytest
import torch

import myops
import myops.backends
from conftest import DEVICES, HAS_CUDA, NO_CUDA


@pytest.mark.parametrize("device", DEVICES)
def test_header_names_the_call(device):
    x = torch.randn(2, 8, 5, 6, device=device)
    w = torch.randn(8, 4, 3, 3, device=device)
    text = myops.explain(x, w, stride=2, padding=1, output_padding=1, op="conv_transpose2d_gelu_group_norm")
    first = text.splitlines()[0]
    assert first.startswith(f"myops.conv_transpose2d_gelu_group_norm on {device}")
    assert "[2, 8, 5, 6] -> [2, 4, 10, 12]" in first and "float32" in first
    assert "engine:" in text


@pytest.mark.parametrize("device", DEVICES)
def test_one_dimensional_convs_are_explained_as_their_one_row_image(device):
    x, w = torch.randn(2, 8, 10, device=device), torch.randn(8, 4, 16, device=device)
    as_image = myops.explain(x.unsqueeze(2), w.unsqueeze(2), stride=(1, 8), padding=(0, 4))
    assert myops.explain(x, w, stride=8, padding=4, op="conv_transpose1d") == as_image
    assert myops.explain(x[0], w, stride=(8,), padding=[4]) == myops.explain(x[:1], w, stride=8, padding=4)
    assert "[2, 8, 1, 10] -> [2, 4, 1, 80]" in as_image
    with pytest.raises(TypeError, match="myops.explain: argument 'stride' must be an int or a 1-tuple"):
        myops.explain(x, w, stride=(2, 2))
    with pytest.raises(ValueError, match=r"myops.explain: argument 'input' must be \[N, C_in, L\] .* got 4-D"):
        myops.explain(x.unsqueeze(2), w)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_op_and_bad_arguments_name_them(device):
    x = torch.randn(1, 4, 3, 3, device=device)
    w = torch.randn(4, 4, 3, 3, device=device)
    with pytest.raises(RuntimeError, match="myops::explain: argument 'op'"):
        myops.explain(x, w, op="conv2d")
    with pytest.raises(RuntimeError, match="myops::explain: argument 'weight'"):
        myops.explain(x, torch.randn(5, 4, 3, 3, device=device))
    with pytest.raises(TypeError, match="myops.explain: argument 'stride' must be an int or a pair of ints"):
        myops.explain(x, w, stride=2.0)


def test_float_stride_gives_the_ops_own_error():
    x, w = torch.randn(1, 4, 3, 3), torch.randn(4, 4, 3, 3)
    with pytest.raises(TypeError, match="myops.conv_transpose2d: argument 'stride' must be an int or a pair"):
        myops.conv_transpose2d(x, w, stride=2.0)
    with pytest.raises(TypeError, match="myops.conv_transpose2d_gelu_group_norm: argument 'padding'"):
        myops.conv_transpose2d_gelu_group_norm(x, w, padding=None, num_groups=2)
    with pytest.raises(TypeError, match="argument 'groups' must be an int"):
        myops.conv_transpose2d(x, w, groups=1.5)


@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_cuda_reasons_follow_the_options():
    x = torch.randn(2, 64, 16, 16, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16)
    default = myops.explain(x, w)
    assert "conv source: ours (forced" in default  # conftest forces our conv
    with myops.backends.conv_engines("mma"):
        text = myops.explain(x, w)
        assert "engine: mma" in text
        assert "direct: disabled" in text and "wgmma: disabled" in text
    with myops.backends.conv_engines():
        assert "engine: generic" in myops.explain(x, w)
    myops.backends.set_options(conv_source="auto")
    torch.backends.cudnn.allow_tf32 = False
    try:
        strict = myops.explain(x.float(), w.float(), op="conv_transpose2d_gelu_group_stats")
        assert "the fastest of ours and cuDNN's, timed" in strict
    finally:
        torch.backends.cudnn.allow_tf32 = True


@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_cuda_plain_conv_times_every_source_and_shows_the_choice():
    # the plain conv's choice takes cuDNN in both layouts (an NCHW input's channels-last form with
    # its copies); explain shows the candidates, then after the first call the one kept and the times
    x = torch.randn(2, 32, 12, 12, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(32, 16, 4, 4, device="cuda", dtype=torch.bfloat16)
    myops.backends.set_options(conv_source="auto")
    before = myops.explain(x, w, stride=2, padding=1)
    assert "the fastest of ours, cuDNN's and cuDNN's channels-last (with the layout copies)" in before
    myops.conv_transpose2d(x, w, stride=2, padding=1)
    after = myops.explain(x, w, stride=2, padding=1)
    assert "(median ms: ours " in after and "cuDNN's channels-last (with the layout copies) " in after
    x_cl = x.contiguous(memory_format=torch.channels_last)
    assert "the fastest of ours and cuDNN's, timed" in myops.explain(x_cl, w, stride=2, padding=1)
    fused = myops.explain(x, w, stride=2, padding=1, op="conv_transpose2d_act_stats")
    assert "the fastest of ours and cuDNN's, timed" in fused
