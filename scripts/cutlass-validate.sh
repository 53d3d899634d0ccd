#!/usr/bin/env bash
# The CUTLASS arms on an NVIDIA H200 (issue #29; docs/gpu.md, "CUTLASS arms"): builds qconform with
# CUDA (sm_90a) and CUTLASS's headers from the nvidia-cutlass wheel, runs the GPU tests, then verifies
# every CUTLASS arm against its declaration on the 196 qwen3-1.7b layers (M in {1, 16, 512} x the three
# scale regimes) and identifies each. Logs go to $OUT (default cutlass-out).
#   scripts/cutlass-validate.sh [WHEEL]       # WHEEL: nvidia_cutlass-*.whl (default .carry/nvidia_cutlass-*.whl)
#   STEPS=build,tests scripts/cutlass-validate.sh
# Highway is taken from .carry/hwy/usr when present (the GPU machine has no libhwy-dev; docs/gpu.md).
set -uo pipefail
OUT=${OUT:-cutlass-out}
. "$(dirname "$0")/gpu-steps.sh"
WHEEL=${1:-$(ls .carry/nvidia_cutlass-*.whl 2>/dev/null | head -1)}
STEPS=${STEPS:-build,tests,verify-int8,verify-fp8,identify,triton,bench}
hwy_from_carry

if want build; then
  step "build with CUTLASS from $WHEEL"
  [ -n "$WHEEL" ] || { echo "no nvidia-cutlass wheel given"; exit 2; }
  rm -rf /tmp/qc-cutlass && python3 -m zipfile -e "$WHEEL" /tmp/qc-cutlass || exit 2
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DQCONFORM_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DQCONFORM_CUTLASS_DIR=/tmp/qc-cutlass/cutlass_library/source -DQCONFORM_BUILD_PYTHON=ON -DQCONFORM_BUILD_TESTS=ON \
    -DQCONFORM_WITH_ONEDNN=OFF ${HWY_ARGS:-} ${CMAKE_ARGS:-} > "$OUT/build.log" 2>&1 &&
    timed cmake --build "$B" -j"$(nproc)" --target qconform qconform_gpu_tests _qconform bench_cuda_scaled_mm >> "$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; }
  "$Q" arms | grep -E "cutlass|absent" | tee "$OUT/arms.txt"
fi

want tests && step "gpu tests" && timed "$B/tests/qconform_gpu_tests" > "$OUT/gpu-tests.log" 2>&1
want tests && grep -E "^\[  (FAILED|PASSED) |SKIPPED|Failure|CUTLASS INT8:|outputs equal" "$OUT/gpu-tests.log" | head -30

OPS=/tmp/qc-q17.safetensors
FP8=/tmp/qc-q17-fp8.safetensors
if want verify-int8 || want verify-fp8; then
  step "synth qwen3-1.7b, M = 512 (INT8 and FP8 e4m3)"
  timed "$Q" synth --shapes qwen3-1.7b --m 512 --seed 1 --out "$OPS" | tail -1
  timed "$Q" synth --shapes qwen3-1.7b --m 512 --seed 1 --element e4m3 --out "$FP8" | tail -1
fi
# Each CUTLASS arm against an arm of the same declaration: every output is checked against the arm's
# own declared formula (C6's "outputs off their formula") and the predicted set against the observed.
if want verify-int8; then
  for pair in cuda:cutlass-int8-vllm-cutlass,cuda:mma-vllm-cutlass cuda:cutlass-int8-vllm-cutlass,cpu:vllm-cutlass \
              cuda:cutlass-int8-vllm-cutlass,cuda:mma-vllm-triton; do
    step "verify $pair (196 layers, M in 1,16,512, 3 scale regimes)"
    timed "$Q" verify "$OPS" --arms "$pair" --m-sweep 1,16,512 --json "$OUT/verify-${pair//[:,]/_}.json" \
      > "$OUT/verify-${pair//[:,]/_}.txt" 2>&1
    grep -E "^(interchangeab|real|pow2|C[2-6]|declared)" "$OUT/verify-${pair//[:,]/_}.txt" | head -12
  done
fi
if want verify-fp8; then
  for pair in cuda:cutlass-fp8-rowwise,cuda:cublaslt-fp8 cuda:cutlass-fp8-rowwise-fastacc,cuda:cublaslt-fp8-fastacc \
              cuda:cutlass-fp8-rowwise,cuda:cutlass-fp8-rowwise-fastacc; do
    step "verify $pair (196 FP8 layers, M in 1,16,512, 3 scale regimes)"
    timed "$Q" verify "$FP8" --arms "$pair" --m-sweep 1,16,512 --json "$OUT/verify-${pair//[:,]/_}.json" \
      > "$OUT/verify-${pair//[:,]/_}.txt" 2>&1
    grep -E "^(interchangeab|real|pow2|C[2-6]|declared)" "$OUT/verify-${pair//[:,]/_}.txt" | head -12
  done
fi
if want identify; then
  for arm in cuda:cutlass-int8-vllm-cutlass cuda:cutlass-int8-vllm-cutlass-fma cuda:cutlass-fp8-rowwise cuda:cutlass-fp8-blockwise \
             cuda:cutlass-fp8-rowwise-fastacc; do
    step "identify $arm"
    timed "$Q" identify --arm "$arm" --json "$OUT/identify-${arm//[:]/_}.json" > "$OUT/identify-${arm//[:]/_}.txt" 2>&1
    grep -iE "verdict|identified|unexplained|ambiguous|model" "$OUT/identify-${arm//[:]/_}.txt" | head -6
  done
fi
want triton && step "vLLM-structured Triton arms (Python): INT8 against cuda:cutlass-int8-vllm-cutlass, FP8 against cuda:cutlass-fp8-rowwise" &&
  PYTHONPATH=$B/python timed python3 examples/gpu_python_arms.py --against cuda:cutlass-int8-vllm-cutlass \
    --fp8-against cuda:cutlass-fp8-rowwise --json "$OUT/triton-vs-cutlass.json" > "$OUT/triton-vs-cutlass.txt" 2>&1
want triton && tail -28 "$OUT/triton-vs-cutlass.txt"
want bench && step "benchmark (ours, CUTLASS, cuBLASLt)" && timed "$B/bench/bench_cuda_scaled_mm" --quick > "$OUT/bench.txt" 2>&1
want bench && tail -24 "$OUT/bench.txt"
exit 0
