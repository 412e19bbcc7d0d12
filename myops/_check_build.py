"""The extension is compiled against one torch (its C++ ABI changes between minor releases, and a
CUDA build needs a CUDA torch): a clear error at import where the installed torch is another."""
import importlib

import torch


def _minor(version: str) -> tuple:
    return tuple(int(p) for p in version.split("+")[0].split(".")[:2])


def check_build() -> None:
    try:
        info = importlib.import_module("myops._build_info")
    except ImportError:  # a tree built before the file existed: nothing to compare
        return
    rebuild = "rebuild myops against it: pip install --no-build-isolation --force-reinstall --no-deps ."
    if _minor(info.TORCH_VERSION) != _minor(torch.__version__):
        raise ImportError(f"myops was built against torch {info.TORCH_VERSION} but torch {torch.__version__} is "
                          f"installed; {rebuild}")
    if info.CUDA_VERSION is not None and torch.version.cuda is None:
        raise ImportError(f"myops was built with CUDA {info.CUDA_VERSION} kernels, against a CUDA torch, but the "
                          f"installed torch {torch.__version__} has no CUDA; {rebuild}")
