"""The float32 GELU forms of the CUDA conv epilogues (csrc/cuda/gelu_fast.cuh; the exact one also
in its form for 16-bit outputs), checked on the host against float64 over every 97th float32 in
[-40, 40] (scripts/check_gelu_fast.cu; nvcc compiles it on any machine, GPU or not). The device
versions differ only by ex2.approx / __fdividef (2 ulp); the fused-op tests on CUDA cover them there."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (CI has it)")
def test_gelu_fast_accuracy(tmp_path):
    exe = tmp_path / "check_gelu_fast"
    subprocess.run([NVCC, "-std=c++17", "-O2", "-I", os.path.join(ROOT, "csrc"),
                    os.path.join(ROOT, "scripts", "check_gelu_fast.cu"), "-o", str(exe)], check=True)
    run = subprocess.run([str(exe), "97"], capture_output=True, text=True)
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count(": ok\n") == 3, run.stdout
