#!/usr/bin/env bash
# On a GPU machine, in one run: build (CUDAExtension), the whole test suite, compute-sanitizer
# (memcheck on every op, racecheck on the fused kernel; each for the kernel choice as shipped, the
# Hopper kernel forced, its channels-last input path forced, and the mma.sync kernel alone), and the bench; a summary table last.
# Racecheck instruments our kernels only (kns=myops) on the cases whose conv is ours (--ours-only):
# instrumenting cuDNN's kernels too took minutes, and its float32 channels-last conv stops the
# sanitizer with an internal error.
# Logs go to $OUT (default /tmp/myops_gpu). Usage: bash scripts/gpu_check.sh [bench args...]
# PYTEST_WORKERS / PYTEST_ARGS: see the pytest step.
# GPU_CHECK_ONLY="step ..." runs only the named steps (e.g. "build pytest", then "memcheck racecheck
# repeat_l2_19 bench" on the same machine: the steps add up to well over 10 minutes on an H100,
# more than some lent machines allow one command); unset, every step.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/myops_gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
summary=()
step() {  # step NAME COMMAND...: runs it, logs to $OUT/NAME.log, records pass / fail
  local name=$1; shift
  if [ -n "${GPU_CHECK_ONLY:-}" ] && [[ " $GPU_CHECK_ONLY " != *" $name "* ]]; then return 0; fi
  local t0=$SECONDS
  if "$@" >"$OUT/$name.log" 2>&1; then summary+=("| $name | ok | $((SECONDS - t0)) s | $(tail -n 1 "$OUT/$name.log") |")
  else summary+=("| $name | FAILED | $((SECONDS - t0)) s | $(tail -n 1 "$OUT/$name.log") |"); fi
}
# pure-Python test deps missing on the GPU image travel as wheels in .whl/ (expecttest: without it the two
# graph-text tests of test_compile.py skip)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/myops_site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/myops_site
fi
nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
# the sm_80 and Hopper targets (the default list adds sm_86 / 89 / 100 / 120 and PTX: minutes more)
step build env TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0;9.0a}" python3 setup.py build_ext --inplace
# PYTEST_WORKERS=n: the suite in n processes sharing the GPU (pytest-xdist, carried in .whl/);
# PYTEST_ARGS: more pytest arguments (e.g. --myops-option hopper=0; --myops-cuda-only, the tests CPU
# CI skips; --myops-shard 1/3: the GPU tests take about 11 minutes with 8 workers on an H100,
# more than one 10-minute device call)
workers=()
if [ -n "${PYTEST_WORKERS:-}" ] && python3 -c "import xdist" 2>/dev/null; then workers=(-n "$PYTEST_WORKERS"); fi
# (-v: a line per finished test, so that a call cut off by its time limit still shows which passed,
# failed or never finished; -rf and the durations come only at the end)
step pytest python3 -m pytest tests -v -p no:cacheprovider -rf --durations=20 "${workers[@]}" ${PYTEST_ARGS:-}
step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/sanitize_cases.py
step racecheck compute-sanitizer --tool racecheck --kernel-name kns=myops --error-exitcode 1 python3 scripts/sanitize_cases.py --fused-only --ours-only
# the Hopper kernel on every case it can run, and the mma.sync kernel alone
step memcheck_wgmma compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/sanitize_cases.py --kernel wgmma
step racecheck_wgmma compute-sanitizer --tool racecheck --kernel-name kns=myops --error-exitcode 1 python3 scripts/sanitize_cases.py --fused-only --ours-only --kernel wgmma
# the Hopper kernel with its input staged channels-last (TMA boxes straight into the stages)
step memcheck_nhwc compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/sanitize_cases.py --kernel wgmma_nhwc
step racecheck_nhwc compute-sanitizer --tool racecheck --kernel-name kns=myops --error-exitcode 1 python3 scripts/sanitize_cases.py --fused-only --ours-only --kernel wgmma_nhwc
step memcheck_mma compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/sanitize_cases.py --kernel no_wgmma
# repeated seed-chain calls, bit for bit: the overlapped GroupNorm pass beside the conv
step repeat_l2_19 python3 scripts/follower_race_repro.py 100
step demo_seed_block python3 compile_demos/seed_block.py
step demo_vae_up_block python3 compile_demos/vae_up_block.py
step demo_dcgan_generator python3 compile_demos/dcgan_generator.py
# the compile pass's measured selection (enable(measure=True)): the same demos, chains timed at compile time
step demo_vae_up_block_measured python3 compile_demos/vae_up_block.py --measure
step demo_dcgan_generator_measured python3 compile_demos/dcgan_generator.py --measure
# issue-sized measurements: the layer sweep (standalone convs against every stock choice) and the
# family's chains, inference and a training step, float32 and bfloat16
FAMILY=dcgan_bn_relu,pix2pix_bn,cyclegan_in_relu,decoder_gn_silu,dcgan_tanh,vocoder_leaky_relu
step sweep_fp32 python3 -m myops.bench --sweep --dtype float32 --json "$OUT/sweep_fp32.json"
step sweep_bf16 python3 -m myops.bench --sweep --dtype bfloat16 --json "$OUT/sweep_bf16.json"
step family_fp32 python3 -m myops.bench --dtype float32 --workloads "$FAMILY,L2_19,L2_11"
step family_bf16 python3 -m myops.bench --dtype bfloat16 --workloads "$FAMILY,L2_19,L2_11"
step train_fp32 python3 -m myops.bench --train --dtype float32 --workloads "$FAMILY,L2_19,L2_11"
step train_bf16 python3 -m myops.bench --train --dtype bfloat16 --workloads "$FAMILY,L2_19,L2_11"
# eager training through the modules (ATen's ops and fused norm backward after the conv), and the
# same with aten_training=never (the ops' own formulas)
step pytest_formula_training python3 -m pytest tests -q -p no:cacheprovider -rf "${workers[@]}" --myops-cuda-only \
  --myops-option aten_training=never -k "norm_act or bn_chain or test_nn or gradients or errors or gelu_group_norm"
step train_eager_fp32 python3 -m myops.bench --train --eager --dtype float32 --workloads "$FAMILY,L2_19,L2_11"
step train_eager_fp32_formulas python3 -m myops.bench --train --eager --dtype float32 --workloads "$FAMILY,L2_19,L2_11" \
  --option aten_training=never
step demos bash -c "cd compile_demos && python3 architectures_demo.py --dtype bfloat16 && python3 architectures_demo.py --dtype float32"
# torch.export + AOTInductor with the family's ops on this GPU (packaged in one process, loaded in another)
step aoti python3 -m pytest tests/test_compile.py -q -p no:cacheprovider -rs -k aot_inductor
# bf16 training steps of the architectures compiled with the rewrite (autocast and a cast model)
step train_16_bit python3 -m pytest tests/test_compile_family.py -q -p no:cacheprovider -rf -k "16_bit and cuda"
# a measured bf16 DCGAN training step that failed Inductor's stride check (see the script)
step measured_training_repro python3 scripts/measured_training_repro.py
# the same under the measured selection (whether it can be the CUDA default: every architecture >= 1.0x)
step demos_measured bash -c "cd compile_demos && python3 architectures_demo.py --dtype bfloat16 --measure && python3 architectures_demo.py --dtype float32 --measure"
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  step bench python3 -m myops.bench --json "$OUT/bench.json" "$@"
  [ -f "$OUT/bench.log" ] && grep '^|' "$OUT/bench.log"
fi
[ -f "$OUT/pytest.log" ] && tail -n 25 "$OUT/pytest.log"
printf '\n| step | result | time | last line |\n|---|---|---|---|\n'; printf '%s\n' "${summary[@]}"
