#!/usr/bin/env bash
# Compiles every csrc/cuda/*.cu with nvcc for sm_90a (they include no torch header, so this works on
# a CPU-only machine). Fails if nvcc is missing while .cu files exist.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
sources=(csrc/cuda/*.cu)
if [ ${#sources[@]} -eq 0 ]; then echo "no CUDA sources"; exit 0; fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
out=$(mktemp -d)
for f in "${sources[@]}"; do
  # the half / bfloat16 macros torch's extension build sets: catch implicit conversions here too
  "$NVCC" -std=c++17 -O3 --expt-relaxed-constexpr -Icsrc -D__CUDA_NO_HALF_OPERATORS__ \
    -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ \
    -gencode=arch=compute_90a,code=sm_90a -c "$f" -o "$out/$(basename "$f").o"
  echo "nvcc ok: $f"
done
