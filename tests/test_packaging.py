"""What an installed myops carries: the build's record of its torch (checked at import), the
version, and an sdist with every source the build needs."""
import os
import subprocess
import sys
import tarfile
import types

import pytest
import torch

import myops
from myops import _check_build

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_version_and_build_record():
    from myops import _build_info
    assert myops.__version__ == "0.1.0"
    assert _build_info.TORCH_VERSION == torch.__version__
    assert (_build_info.CUDA_VERSION is None) == (not _build_info.CUDA_ARCHS)


@pytest.mark.parametrize("built,cuda,match", [
    ("2.9.1", None, "built against torch 2.9.1 but torch"),
    (torch.__version__, "13.0", "built with CUDA 13.0 kernels"),
])
def test_a_mismatched_torch_is_a_clear_import_error(monkeypatch, built, cuda, match):
    fake = types.ModuleType("myops._build_info")
    fake.TORCH_VERSION, fake.CUDA_VERSION, fake.CUDA_ARCHS = built, cuda, ["9.0a"] if cuda else []
    monkeypatch.setitem(sys.modules, "myops._build_info", fake)
    if cuda and torch.version.cuda is not None:
        _check_build.check_build()  # a CUDA torch takes a CUDA build
        return
    with pytest.raises(ImportError, match=match):
        _check_build.check_build()


def test_sdist_holds_every_source(tmp_path):
    # every C++ / CUDA file of the tree, the build files and the license; not the build's record
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)], cwd=ROOT, check=True,
                   env={**os.environ, "MYOPS_CUDA": "0"}, capture_output=True)
    (archive,) = tmp_path.glob("myops-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    sources = {os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(os.path.join(ROOT, "csrc"))
               for f in fs if f.endswith((".cpp", ".h", ".cu", ".cuh"))}
    assert sources and sources <= names, sorted(sources - names)[:5]
    assert {"setup.py", "pyproject.toml", "LICENSE", "README.md", "myops/__init__.py"} <= names
    assert "myops/_build_info.py" not in names
