import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import myops  # noqa: E402  (registers the ops)
import myops.backends  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
NO_CUDA = "no CUDA GPU"  # the skip reason of every test that needs a GPU (--myops-cuda-only keys on it)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA))]


def pytest_addoption(parser):
    # e.g. --myops-option hopper=0: the whole suite as on a GPU without sm_90 features
    parser.addoption("--myops-option", action="append", default=[], metavar="NAME=VALUE",
                     help="a myops.backends option for every test (an int, or a name such as 'never')")
    # e.g. --myops-shard 2/3: every third test from the second on; the GPU suite runs in shards
    # that each fit one device call
    parser.addoption("--myops-shard", default=None, metavar="I/N", help="run only shard I of N (1-based)")
    # on the GPU machine: only the tests CPU-only CI skips (their skip reason is NO_CUDA)
    parser.addoption("--myops-cuda-only", action="store_true", help="run only the tests that need a GPU")


# the --myops-option values of this run (pytest_configure)
SESSION_OPTIONS = {}
# what every test starts from (_backend_options says why)
TEST_OPTIONS = {"conv_source": "myops", "cpu_channels_last": "never"}


def pytest_configure(config):
    SESSION_OPTIONS.update(_session_options(config))


def pytest_collection_modifyitems(config, items):
    if config.getoption("--myops-cuda-only"):
        _keep(config, items, lambda i, item: any(
            mark.kwargs.get("reason") == NO_CUDA for mark in item.iter_markers("skipif")))
    shard = config.getoption("--myops-shard")
    if shard is None:
        return
    index, _, count = shard.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise pytest.UsageError(f"--myops-shard: expected I/N with 1 <= I <= N, got {shard!r}")
    index, count = int(index), int(count)
    _keep(config, items, lambda i, item: i % count == index - 1)


def _keep(config, items, wanted):  # deselects the items for which wanted(position, item) is false
    kept = [item for i, item in enumerate(items) if wanted(i, item)]
    config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if not wanted(i, item)])
    items[:] = kept


def _session_options(config):
    try:
        return dict(myops.backends.parse_assignment(item) for item in config.getoption("--myops-option"))
    except ValueError as e:
        raise pytest.UsageError(f"--myops-option: {e}") from e


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _backend_options():
    # A CUDA op may time our conv against cuDNN's on each new shape and keep the faster (strict
    # float32, channels-last forms). Tests of our kernels must run them whatever the timing says:
    # they run with our conv forced; test_conv_sources.py covers both sources and the choice.
    # Likewise the CPU conv runs NCHW (test_conv_transpose2d.py covers its timed layout choice).
    # Whatever a test sets through myops.backends is undone after it.
    saved = myops.backends.get_options()
    myops.backends.set_options(**TEST_OPTIONS, **SESSION_OPTIONS)
    yield
    myops.backends.set_options(**saved)
