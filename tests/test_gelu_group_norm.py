import pytest
import torch
import torch.nn.functional as F

import myops
from conftest import DEVICES, HAS_CUDA, NO_CUDA
from reference import assert_matches, f64, tolerance

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_pytorch(device, dtype, approximate):
    x = torch.randn(3, 5, 17, 13, device=device, dtype=dtype) * 3
    out = myops.gelu(x, approximate=approximate)
    assert out.dtype == dtype and out.shape == x.shape
    assert_matches(out, F.gelu(f64(x), approximate=approximate), tolerance(dtype, device))


@pytest.mark.parametrize("device", DEVICES)
def test_gelu_layouts(device):
    x = torch.randn(2, 6, 5, 7, device=device)
    cl = x.contiguous(memory_format=torch.channels_last)
    out = myops.gelu(cl)
    assert out.stride() == cl.stride()
    assert_matches(out, F.gelu(f64(x)), tolerance(torch.float32, device))
    view = torch.randn(4, 9, 10, device=device)[:, ::2, 1:]
    assert_matches(myops.gelu(view, approximate="tanh"), F.gelu(f64(view), approximate="tanh"),
                   tolerance(torch.float32, device))
    assert myops.gelu(torch.empty(0, 3, device=device)).shape == (0, 3)


@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_vectors_per_thread_cuda(dtype, monkeypatch):
    """The CUDA kernel's 1 / 2 / 4 vectors per thread (the gelu_vectors option; 16-bit types default to 4)
    give the same bits, on sizes that leave partial blocks, partial vector groups and scalar tails,
    and on a misaligned view (no vectors at all)."""
    for n in (1, 9, 2048 * 8 + 5, 1024 * 8 * 3 + 17 * 8 + 3):
        for offset in (0, 1):
            x = (torch.randn(n + offset, device="cuda", dtype=dtype) * 3)[offset:]
            outs = []
            for vecs in (1, 2, 4):
                myops.backends.set_options(gelu_vectors=vecs)
                outs.append(myops.gelu(x))
            myops.backends.set_options(gelu_vectors=None)
            default = myops.gelu(x)
            for out in outs[1:] + [default]:
                assert torch.equal(out, outs[0]), (n, offset)
            assert_matches(default, F.gelu(f64(x)), tolerance(dtype, "cuda"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,groups", [((2, 8, 9, 7), 4), ((3, 6, 5), 3), ((1, 4, 2, 3, 5), 1), ((2, 12), 12)])
def test_group_norm_matches_pytorch(device, dtype, affine, shape, groups):
    x = torch.randn(*shape, device=device, dtype=dtype) * 2 + 1
    c = shape[1]
    w = torch.randn(c, device=device, dtype=dtype) if affine else None
    b = torch.randn(c, device=device, dtype=dtype) if affine else None
    out = myops.group_norm(x, groups, w, b, eps=1e-5)
    assert out.dtype == dtype
    assert_matches(out, F.group_norm(f64(x), groups, f64(w), f64(b), 1e-5), tolerance(dtype, device))


@pytest.mark.parametrize("device", DEVICES)
def test_group_norm_channels_last_and_large_mean(device):
    x = torch.randn(2, 8, 6, 5, device=device, dtype=torch.float64) + 1000.0  # cancellation check
    out = myops.group_norm(x.contiguous(memory_format=torch.channels_last), 2, None, None, 1e-5)
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, F.group_norm(x, 2, eps=1e-5))
    assert myops.group_norm(torch.empty(0, 4, 3, 3, device=device), 2).shape == (0, 4, 3, 3)
