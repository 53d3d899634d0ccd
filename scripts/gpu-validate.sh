#!/usr/bin/env bash
# GPU validation on an NVIDIA machine (the H200 runs of docs/gpu.md): builds qconform with CUDA
# (sm_90a) and the Python extension, runs the `gpu` tests, then the layer-level procedure on the
# 196 qwen3-1.7b layers with the CUDA arms, the C1 suite through each CUDA arm, the Python Triton
# and torch._int_mm arms, the FP8 depth sweep and a conform run. Logs go to $OUT (default gpu-out).
#   scripts/gpu-validate.sh                         # everything
#   CMAKE_ARGS=-DCMAKE_PREFIX_PATH=... scripts/gpu-validate.sh
set -uo pipefail
OUT=${OUT:-gpu-out}
. "$(dirname "$0")/gpu-steps.sh"
OPS=${OPS:-/tmp/qc-q17.safetensors}
STEPS=${STEPS:-tests,verify,cross,boundary,python,sweep,conform,bench}   # which steps to run

step build
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DQCONFORM_WITH_CUDA=ON -DQCONFORM_BUILD_PYTHON=ON \
  -DQCONFORM_BUILD_BENCH=ON -DQCONFORM_WITH_ONEDNN=OFF ${CMAKE_ARGS:-} > "$OUT/build.log" 2>&1 &&
  timed cmake --build "$B" -j"$(nproc)" --target qconform qconform_gpu_tests _qconform bench_cuda_scaled_mm >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }

want tests && step "gpu tests" && QC_EXPECT_WGMMA=1 timed "$B/tests/qconform_gpu_tests" > "$OUT/gpu-tests.log" 2>&1
want tests && grep -E "^\[  (FAILED|PASSED) |SKIPPED|Failure" "$OUT/gpu-tests.log" | head -20

step "synth + predict (qwen3-1.7b, M=512)"
timed "$Q" synth --shapes qwen3-1.7b --m 512 --seed 1 --out "$OPS" | tail -2
timed "$Q" predict "$OPS" --out "$OUT/predictions.json" --quiet | tee "$OUT/predict.txt"
PIN=$(sed -n 's/^pin: //p' "$OUT/predict.txt")

# The same verify twice: reference accumulators on the GPU (the default here) and on the CPU; the
# results must be equal field for field (only timings and the reference description differ).
if want verify; then
  for ref in gpu cpu; do
    step "verify cuda:mma-vllm-cutlass vs cuda:mma-vllm-triton (196 layers, 3 scale regimes), reference on the $ref"
    timed "$Q" verify "$OPS" --arms cuda:mma-vllm-cutlass,cuda:mma-vllm-triton --predictions "$OUT/predictions.json" \
      --pin "$PIN" --reference $ref --timings --json "/tmp/verify-mma-$ref.json" > "$OUT/verify-mma-$ref.txt" 2>&1
    grep -E "^(real|pow2|C[2-6]) |^  [a-zA-Z]" "$OUT/verify-mma-$ref.txt" | grep -v "^  model\."
  done
  python3 - /tmp/verify-mma-gpu.json /tmp/verify-mma-cpu.json <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for j in (a, b):
    for key in ("seconds", "wall_seconds", "reference"): j.pop(key)
print("verify results with the GPU and the CPU reference:", "IDENTICAL" if a == b else "DIFFER")
PY
fi

want cross && step "verify across devices: cpu:vllm-cutlass vs cuda:mma-vllm-cutlass, cuda:cublaslt-int8 vs cpu:vllm-cutlass-muladd"
if want cross; then
  timed "$Q" verify "$OPS" --arms cpu:vllm-cutlass,cuda:mma-vllm-cutlass --scales real > "$OUT/verify-cross.txt" 2>&1
  grep -E "^C[2-6]" "$OUT/verify-cross.txt"
  timed "$Q" verify "$OPS" --arms cpu:vllm-cutlass-muladd,cuda:cublaslt-int8 --scales real > "$OUT/verify-cublaslt.txt" 2>&1
  grep -E "^C[2-6]" "$OUT/verify-cublaslt.txt"
fi

want boundary && step "boundary (C1) through the CUDA arms" && for arm in cuda:mma-vllm-cutlass cuda:mma-vllm-triton cuda:mma-sglang-sm89 cuda:cublaslt-int8; do
  "$Q" boundary --arm "$arm" --json "$OUT/boundary-${arm//[:]/_}.json" > "$OUT/boundary-${arm//[:]/_}.txt" 2>&1
  echo "$arm: $(grep '^C1' "$OUT/boundary-${arm//[:]/_}.txt")"
done

want python && step "Python arms: Triton and torch._int_mm" && PYTHONPATH=$B/python timed python3 examples/gpu_python_arms.py --int-mm --against cuda:mma-vllm-cutlass \
  --json "$OUT/python-arms.json" > "$OUT/python-arms.txt" 2>&1; want python && tail -25 "$OUT/python-arms.txt"

want sweep && step "FP8 depth sweep: cuda:cublaslt-fp8 vs cuda:cublaslt-fp8-fastacc" && timed "$Q" sweep --pair cuda:cublaslt-fp8,cuda:cublaslt-fp8-fastacc --k 512,1024,2048,4096,8192,16384,32768 \
  --m 512 --n 1024 --seeds 5 --json "$OUT/sweep-fp8.json" > "$OUT/sweep-fp8.txt" 2>&1; want sweep && tail -30 "$OUT/sweep-fp8.txt"

want conform && step "conform with the CUDA arms (synthetic model)" && timed "$Q" conform --arms cuda:mma-vllm-cutlass,cuda:mma-vllm-triton --out "$OUT/conform" > "$OUT/conform.txt" 2>&1
want conform && tail -14 "$OUT/conform.txt"

want bench && step "benchmark" && timed "$B/bench/bench_cuda_scaled_mm" --quick > "$OUT/bench.txt" 2>&1; want bench && tail -20 "$OUT/bench.txt"
tar -czf "$OUT.tar.gz" -C "$(dirname "$OUT")" "$(basename "$OUT")" 2>/dev/null && echo "logs: $OUT.tar.gz"
