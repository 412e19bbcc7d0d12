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
def _conv_source_is_ours(monkeypatch):
    # A CUDA op may time our conv against cuDNN's on each new shape and keep the faster (with TF32
    # off; the fused GELU + GroupNorm op always: csrc/cuda/conv_source.h). Tests of our kernels must
    # run them whatever the timing says: they run with our conv forced; test_conv_sources.py covers
    # both sources and the choice.
    monkeypatch.setenv("MYOPS_CONV_SOURCE", "myops")
