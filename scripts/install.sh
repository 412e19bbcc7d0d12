#!/usr/bin/env bash
# One command: installs what is missing, builds myops (ninja, torch.utils.cpp_extension) and runs
# the main demo. torch is installed only if absent, so a CUDA torch that is already there is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$PY" -m pip install "torch>=2.11"            # PyPI's Linux wheel is the CUDA build
  else
    # CPU build: a local wheel where pip is configured with one, else PyTorch's CPU index
    "$PY" -m pip install "torch==2.13.0+cpu" ||
      "$PY" -m pip install torch --index-url https://download.pytorch.org/whl/cpu
  fi
fi
"$PY" -m pip install "setuptools>=64" wheel ninja numpy pytest expecttest
echo "Building myops (C++ and, with a CUDA torch and nvcc, CUDA): 2-3 minutes on a CPU machine, more with CUDA; ninja prints little until it ends." >&2
"$PY" -m pip install --no-build-isolation -e .
"$PY" compile_demos/seed_block.py
