"""Builds myops._C with torch.utils.cpp_extension (ninja).

CUDAExtension when torch has CUDA and nvcc is found, else CppExtension.
Environment override: MYOPS_CUDA=0 (CPU only) or MYOPS_CUDA=1 (CUDA even where torch says none).
"""
import glob
import os

from setuptools import setup
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.abspath(__file__))


def _want_cuda() -> bool:
    forced = os.environ.get("MYOPS_CUDA")
    if forced in ("0", "1"):
        return forced == "1"
    import torch

    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def _sources(pattern: str) -> list:
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


def build_extension():
    sources = _sources("csrc/*.cpp") + _sources("csrc/common/*.cpp") + _sources("csrc/cpu/*.cpp")
    # no FP-trap semantics: lets GCC if-convert (and so vectorise) the branch-free math in csrc/cpu
    # -fopenmp: at::parallel_for is an inline OpenMP region, compiled in our own objects (the
    # loader then shares the libgomp that torch already loaded, so one thread pool)
    openmp = ["-fopenmp"]
    cxx_flags = ["-O3", "-fno-trapping-math"] + openmp
    include_dirs = [os.path.join(ROOT, "csrc")]
    if _want_cuda():
        sources += _sources("csrc/cuda/**/*.cpp") + _sources("csrc/cuda/**/*.cu")
        nvcc_flags = [
            "-O3", "--expt-relaxed-constexpr", "-lineinfo",
            "-gencode=arch=compute_80,code=sm_80",
            "-gencode=arch=compute_90a,code=sm_90a",  # wgmma (conv_transpose2d_wgmma.cu) needs sm_90a
        ]
        return cpp_extension.CUDAExtension(
            "myops._C", sources, include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags}, extra_link_args=openmp)
    return cpp_extension.CppExtension(
        "myops._C", sources, include_dirs=include_dirs,
        extra_compile_args={"cxx": cxx_flags}, extra_link_args=openmp)


setup(
    ext_modules=[build_extension()],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
)
