import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import myops  # noqa: E402  (registers the ops)
import myops.backends  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU"))]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _backend_options():
    # A CUDA op may time our conv against cuDNN's on each new shape and keep the faster (strict
    # float32, channels-last forms). Tests of our kernels must run them whatever the timing says:
    # they run with our conv forced; test_conv_sources.py covers both sources and the choice.
    # Whatever a test sets through myops.backends is undone after it.
    saved = myops.backends.get_options()
    myops.backends.set_options(conv_source="myops")
    yield
    myops.backends.set_options(**saved)
