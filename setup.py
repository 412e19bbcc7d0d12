"""Builds myops._C with torch.utils.cpp_extension (ninja).

CUDAExtension when torch has CUDA and nvcc is found, else CppExtension.
Environment override: MYOPS_CUDA=0 (CPU only) or MYOPS_CUDA=1 (CUDA even where torch says none).
CUDA targets: TORCH_CUDA_ARCH_LIST where set (as PyTorch reads it: "8.0;9.0a;12.0+PTX"), else
DEFAULT_ARCHS plus the newer ones this nvcc supports, with PTX of the newest for GPUs after it.
build_ext writes myops/_build_info.py: the torch it was built against (checked at import), the targets.
"""
import glob
import os
import re
import subprocess

import torch
from setuptools import setup
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.abspath(__file__))
# sm_80 and its minor revisions; sm_90a, the Hopper engine's (wgmma, TMA: never plain sm_90)
DEFAULT_ARCHS = ["8.0", "8.6", "8.9", "9.0a"]
NEWER_ARCHS = ["10.0", "12.0"]  # (Blackwell: no wgmma; the sm_80-class engines)


def _nvcc_archs() -> set:
    """The virtual architectures this nvcc compiles for, as "9.0", "12.0"."""
    nvcc = os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc") if cpp_extension.CUDA_HOME else "nvcc"
    try:
        listed = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {f"{int(m[:-1])}.{m[-1]}" for m in re.findall(r"compute_(\d+)", listed)}


def cuda_archs() -> list:
    """The targets, as TORCH_CUDA_ARCH_LIST entries; plain 9.0 becomes 9.0a (the Hopper engine's
    kernels would otherwise be empty)."""
    listed = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if listed:
        archs = [a.strip() for a in re.split(r"[;\s]+", listed) if a.strip()]
        return [re.sub(r"^9\.0(?!a)", "9.0a", a) for a in archs]
    supported = _nvcc_archs()
    archs = DEFAULT_ARCHS + [a for a in NEWER_ARCHS if a in supported]
    # PTX of the newest portable target (an "a" target's PTX runs on that GPU only)
    newest = max((i for i, a in enumerate(archs) if not a.endswith("a")))
    archs[newest] += "+PTX"
    return archs


def gencode_flags(archs: list) -> list:
    """nvcc -gencode flags of TORCH_CUDA_ARCH_LIST-style entries ("8.6", "9.0a", "12.0+PTX")."""
    flags = []
    for entry in archs:
        m = re.fullmatch(r"(\d+)\.(\d+)(a?)(\+PTX)?", entry)
        if m is None:
            raise ValueError(f"myops setup.py: TORCH_CUDA_ARCH_LIST entry {entry!r} is not like '8.6', '9.0a' or "
                             "'12.0+PTX'")
        sm = f"{m[1]}{m[2]}{m[3]}"
        flags.append(f"-gencode=arch=compute_{sm},code=sm_{sm}")
        if m[4]:
            flags.append(f"-gencode=arch=compute_{sm},code=compute_{sm}")
    return flags


class BuildExtension(cpp_extension.BuildExtension):
    """torch's build_ext (ninja), also writing myops/_build_info.py beside the extension (in the
    tree and in the wheel's build directory). Its objects always go to build/temp in the tree, so
    that an editable install and a later `pip wheel` share them (pip's editable build would
    otherwise compile in a directory of its own, and the wheel compile everything again)."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(ROOT, "build", "temp")

    def run(self):
        archs = getattr(self.extensions[0], "cuda_archs", [])
        text = ("# Written by setup.py: what this build of myops._C was compiled against.\n"
                f"TORCH_VERSION = {torch.__version__!r}\n"
                f"CUDA_VERSION = {torch.version.cuda if archs else None!r}\n"
                f"CUDA_ARCHS = {archs!r}\n")
        for root in {ROOT, os.path.abspath(self.build_lib)}:
            if os.path.isdir(os.path.join(root, "myops")):
                with open(os.path.join(root, "myops", "_build_info.py"), "w") as f:
                    f.write(text)
        super().run()


def _want_cuda() -> bool:
    forced = os.environ.get("MYOPS_CUDA")
    if forced in ("0", "1"):
        return forced == "1"
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
        archs = cuda_archs()
        nvcc_flags = ["-O3", "--expt-relaxed-constexpr", "-lineinfo"] + gencode_flags(archs)
        extension = cpp_extension.CUDAExtension(
            "myops._C", sources, include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags}, extra_link_args=openmp)
        extension.cuda_archs = archs
        return extension
    return cpp_extension.CppExtension(
        "myops._C", sources, include_dirs=include_dirs,
        extra_compile_args={"cxx": cxx_flags}, extra_link_args=openmp)


setup(
    ext_modules=[build_extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
