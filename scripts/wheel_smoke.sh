#!/usr/bin/env bash
# Builds the wheel (pip wheel reuses the install's build directory), installs it into a fresh venv
# beside the same torch, and runs scripts/smoke_test.py there from outside the tree: what a user
# of the wheel gets, with nothing from the checkout on the path.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
work=$(mktemp -d)
"$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$work/dist" .
"$PY" -m venv "$work/venv"
torch_version=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])")
"$work/venv/bin/python" -m pip install -q "torch==$torch_version" numpy
"$work/venv/bin/python" -m pip install -q --no-deps "$work"/dist/myops-*.whl
cp scripts/smoke_test.py "$work/"
cd "$work" && "$work/venv/bin/python" smoke_test.py
