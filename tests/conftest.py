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
