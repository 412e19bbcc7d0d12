import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import myops  # noqa: E402,F401  (registers the ops)

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU"))]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _strict_fp32_conv_is_ours(monkeypatch):
    # With TF32 off, a CUDA op times our conv against cuDNN's on each new shape and keeps the faster
    # (csrc/cuda/strict_fp32_conv.h). Tests of our FFMA kernels must run them whatever the timing
    # says: they run with our conv forced; test_strict_fp32_sources.py covers both and the choice.
    monkeypatch.setenv("MYOPS_STRICT_FP32_CONV", "myops")
