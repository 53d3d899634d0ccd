#!/usr/bin/env bash
# Issue #14's speed bar on a GPU machine: the 196-layer verify of an FP8 pair against the INT8 one,
# in alternating pairs on the same machine (INT8, FP8, INT8, FP8, ...). Operands: `synth --shapes
# qwen3-1.7b --m 512 --seed 1`, INT8 and `--element e4m3`; INT8 `cuda:mma-vllm-cutlass` vs
# `cuda:mma-vllm-triton` with pinned predictions, FP8 `cuda:cublaslt-fp8` vs `-fastacc`; both with the
# reference on the GPU and --timings. Prints each process's wall time (from the shell) and its time
# inside the verification; the full --timings output goes to the output directory.
#   scripts/fp8-verify-speed.sh [build dir, default build-gpu] [pairs, default 5] [output dir, default fp8-speed-out]
set -euo pipefail
B=${1:-build-gpu}
PAIRS=${2:-5}
OUTDIR=${3:-fp8-speed-out}
mkdir -p "$OUTDIR"
Q=$B/qconform
tmp=${TMPDIR:-/tmp}
"$Q" synth --shapes qwen3-1.7b --m 512 --seed 1 --out "$tmp/speed-int8.safetensors" > /dev/null
"$Q" synth --shapes qwen3-1.7b --m 512 --seed 1 --element e4m3 --out "$tmp/speed-fp8.safetensors" > /dev/null
"$Q" predict "$tmp/speed-int8.safetensors" --out "$OUTDIR/int8.predictions.json" --quiet > "$OUTDIR/predict.txt"
pin=$(sed -n 's/^pin: //p' "$OUTDIR/predict.txt")
one() {  # name, operands, arms, extra args...
  local name=$1 ops=$2 arms=$3
  shift 3
  local start rc=0
  start=$(date +%s%N)
  "$Q" verify "$ops" --arms "$arms" --reference gpu --timings "$@" > "$OUTDIR/$name.txt" 2>&1 || rc=$?
  local ms=$(( ($(date +%s%N) - start) / 1000000 ))
  local inside
  inside=$(sed -n 's/^  the verification (verify_layer_runs; its phases above) *//p' "$OUTDIR/$name.txt")
  printf '%-8s exit %d  process %6.2f s  in the verification %6.2f s\n' "$name" "$rc" "$(awk "BEGIN{print $ms / 1000}")" "$inside"
}
for i in $(seq 1 "$PAIRS"); do
  one "int8-$i" "$tmp/speed-int8.safetensors" cuda:mma-vllm-cutlass,cuda:mma-vllm-triton \
    --predictions "$OUTDIR/int8.predictions.json" --pin "$pin"
  one "fp8-$i" "$tmp/speed-fp8.safetensors" cuda:cublaslt-fp8,cuda:cublaslt-fp8-fastacc
done
