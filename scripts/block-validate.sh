#!/usr/bin/env bash
# Block-scaled FP8 on an NVIDIA H200 (issue #28's GPU side, issue #29's cuda:cutlass-fp8-blockwise;
# docs/gpu.md, "Block-scaled FP8 arms"): builds qconform and the GPU tests with CUDA (sm_90a) and CUTLASS's
# headers from the nvidia-cutlass wheel, runs the block GPU tests, then
#   1. each CUDA block arm against its declared block model on >= 10^8 outputs (6 layers, N = 4096,
#      K = 512 ... 16384, M in {1, 16, 512, 4096}, three scale regimes; reference on the GPU);
#   2. the UE8M0 probe: every pair of block arms on power-of-two scales (synth --ue8m0), C5 bitwise;
#   3. the 196-layer block-FP8 verify (qwen3-1.7b, M = 512) timed beside the per-tensor FP8 verify of the
#      same shapes (target: no slower than 1.5x);
#   4. qconform's own block kernel (cuda:mma-fp8-block-<form>, two forms) on the set of 1.
# Logs and JSON go to $OUT (default block-out); the last section prints the figures for docs/. Each verify
# is cut at VERIFY_TIMEOUT seconds (default 180; exit 124 in the summary) and the whole script keeps to
# BUDGET seconds (default 540), so that one slow step leaves the others their time and the logs come back.
#   scripts/block-validate.sh [WHEEL]      # WHEEL: nvidia_cutlass-*.whl (default .carry/nvidia_cutlass-*.whl)
#   STEPS=build,tests scripts/block-validate.sh
# Highway is taken from .carry/hwy/usr when present (the GPU machine has no libhwy-dev; docs/gpu.md).
set -uo pipefail
OUT=${OUT:-block-out}
. "$(dirname "$0")/gpu-steps.sh"
WHEEL=${1:-$(ls .carry/nvidia_cutlass-*.whl 2>/dev/null | head -1)}
STEPS=${STEPS:-build,tests,verify,ue8m0,speed,own}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
hwy_from_carry
T0=$(now_ms)
BUDGET=${BUDGET:-540}  # seconds for the whole script (the device call's limit is 600): later steps get what is left
left() { echo $(( BUDGET - ($(now_ms) - T0) / 1000 )); }
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }  # min(limit, time left)

if want build; then
  step "build with CUTLASS from ${WHEEL:-<none>}"
  CUTLASS_ARGS=-DQCONFORM_WITH_CUTLASS=OFF
  if [ -n "$WHEEL" ]; then
    rm -rf /tmp/qc-cutlass && python3 -m zipfile -e "$WHEEL" /tmp/qc-cutlass &&
      CUTLASS_ARGS=-DQCONFORM_CUTLASS_DIR=/tmp/qc-cutlass/cutlass_library/source
  else
    echo "no nvidia-cutlass wheel: building without CUTLASS (cuda:cutlass-fp8-blockwise absent)"
  fi
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
  t=$(now_ms)
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DQCONFORM_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    $CUTLASS_ARGS -DQCONFORM_BUILD_PYTHON=OFF -DQCONFORM_BUILD_TESTS=ON -DQCONFORM_WITH_ONEDNN=OFF \
    ${HWY_ARGS:-} ${CMAKE_ARGS:-} > "$OUT/build.log" 2>&1 &&
    cmake --build "$B" -j"$(nproc)" --target qconform qconform_gpu_tests >> "$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; }
  echo "[build took $(( ($(now_ms) - t) / 1000 )) s]"
  "$Q" arms | grep -E "block|blockwise|absent" | tee "$OUT/arms.txt"
fi

if want tests; then
  step "gpu tests (CudaFp8Block*, the block models' GPU evaluation and the block arms)"
  t=$(now_ms)
  timeout "$(cap 240)" "$B/tests/qconform_gpu_tests" --gtest_filter='CudaFp8Block*' > "$OUT/gpu-tests.log" 2>&1
  echo "[rc=$?, took $(( ($(now_ms) - t) / 1000 )) s]"
  grep -E "^\[  (FAILED|PASSED|  OK|SKIPPED) |SKIPPED|Failure|off each form|differ$" "$OUT/gpu-tests.log" | head -60
fi

# One verify: prints its verdict lines, the timing, and keeps the text and JSON.
verify() {  # name operands arms [args...]
  local name=$1 ops=$2 arms=$3
  shift 3
  local t rc
  t=$(now_ms)
  local lim
  lim=$(cap "${VERIFY_TIMEOUT:-180}")
  if [ "$lim" -lt 10 ]; then
    echo "$name: not run (the script's budget of $BUDGET s is spent)" | tee -a "$OUT/summary.txt"
    return 0
  fi
  timeout "$lim" "$Q" verify "$ops" --arms "$arms" --reference "${REFERENCE:-gpu}" --json "$OUT/$name.json" "$@" \
    > "$OUT/$name.txt" 2>&1
  rc=$?
  local ms=$(( $(now_ms) - t ))
  echo "$name: verify --arms $arms $* -> exit $rc in $(awk "BEGIN{printf \"%.1f\", $ms / 1000}") s" | tee -a "$OUT/summary.txt"
  grep -E "^(verify |scales|real|pow2|C[0-9]|FP8 verdict|  unmodelled|interchang|Interchang|A: |B: |.* declares )|error" \
    "$OUT/$name.txt" | head -24 | sed 's/^/    /' | tee -a "$OUT/summary.txt"
  echo "$ms" > "$OUT/$name.ms"
  return 0
}

# The block arm pair: the two CUDA block arms when both run here, else the one that does with itself
# (verify then checks every output of each arm against its own declared block model either way), else
# our own kernel's two forms. An arm runs here when a small verify of it against itself ends without an
# input or internal error (exit 2 or 3: absent from the build, or refused by its library at run time).
PROBE=/tmp/qc-block-probe.safetensors
runs_here() {
  [ -f "$PROBE" ] || "$Q" synth --shapes 16x256x512 --seed 5 --element e4m3 --act-scale per-token-group:128 \
    --weight-scale per-block:128x128 --act-quantizer deepgemm --out "$PROBE" > /dev/null 2>&1
  timeout 60 "$Q" verify "$PROBE" --arms "$1,$1" --reference "${REFERENCE:-gpu}" > "$OUT/probe-${1//[:]/_}.txt" 2>&1
  local rc=$?
  [ $rc -ne 2 ] && [ $rc -ne 3 ] && [ $rc -ne 124 ]
}
pair_arms() {
  local have=()
  for a in cuda:cutlass-fp8-blockwise cuda:cublaslt-fp8-block; do
    if runs_here "$a"; then have+=("$a"); else echo "  $a does not run here: $(grep -m1 -iE "error|absent|refus" "$OUT/probe-${a//[:]/_}.txt")" >&2; fi
  done
  [ ${#have[@]} -eq 0 ] && have=(cuda:mma-fp8-block-triton cuda:mma-fp8-block-deepgemm)
  if [ ${#have[@]} -ge 2 ]; then echo "${have[0]},${have[1]}"; else echo "${have[0]},${have[0]}"; fi
}
PAIR=${PAIR:-$(pair_arms)}
echo "block arm pair: $PAIR" | tee -a "$OUT/summary.txt"

BIG=/tmp/qc-block-big.safetensors
# Overridable for a dry run on a CPU machine (REFERENCE=cpu, small shapes, CPU block arms in PAIR).
BIG_SHAPES=${BIG_SHAPES:-4096x4096x512,4096x4096x1024,4096x4096x2048,4096x4096x4096,4096x4096x7168,4096x4096x16384}
BIG_SWEEP=${BIG_SWEEP:-1,16,512,4096}
Q17=${Q17:-qwen3-1.7b}
UE_M=${UE_M:-64}
SPEED_M=${SPEED_M:-512}
make_big() {
  [ -f "$BIG" ] && return 0
  "$Q" synth --shapes "$BIG_SHAPES" --seed 7 --element e4m3 --act-scale per-token-group:128 --weight-scale per-block:128x128 --act-quantizer deepgemm \
    --out "$BIG" | tail -1
  echo "outputs per arm and scale regime: $(echo "$BIG_SHAPES" | tr ',' '\n' | awk -F x -v s="$BIG_SWEEP" \
    'BEGIN{n=split(s,m,",");for(i=1;i<=n;i++)t+=m[i]} {sum+=$2} END{print sum*t}')" | tee -a "$OUT/summary.txt"
}
if want verify; then
  step "each block arm against its declared model: 6 layers N=4096, K 512..16384, M in 1,16,512,4096 (>= 10^8 outputs)"
  make_big
  verify big-pair "$BIG" "$PAIR" --m-sweep "$BIG_SWEEP"
fi

UE=/tmp/qc-block-ue8m0.safetensors
if want ue8m0; then
  step "UE8M0 probe: power-of-two block scales, every block arm pair bitwise (C5) on qwen3-1.7b layers, M = 64"
  "$Q" synth --shapes "$Q17" --m "$UE_M" --seed 3 --element e4m3 --act-scale per-token-group:128 \
    --weight-scale per-block:128x128 --act-quantizer deepgemm --ue8m0 --layers "${UE_LAYERS:-28}" --out "$UE" | tail -1
  verify ue8m0-pair "$UE" "$PAIR"
  verify ue8m0-cutlass-vs-cpu-triton "$UE" "cuda:cutlass-fp8-blockwise,cpu:fp8-block-triton" --m-sweep 1,16
  verify ue8m0-cublaslt-vs-cpu-triton "$UE" "cuda:cublaslt-fp8-block,cpu:fp8-block-triton" --m-sweep 1,16
  verify ue8m0-own-vs-cutlass "$UE" "cuda:mma-fp8-block-triton,cuda:cutlass-fp8-blockwise"
fi

BLK=/tmp/qc-block-q17.safetensors
FP8=/tmp/qc-fp8-q17.safetensors
if want speed; then
  step "196-layer block-FP8 verify (qwen3-1.7b, M = 512) beside the per-tensor FP8 verify of the same shapes"
  "$Q" synth --shapes "$Q17" --m "$SPEED_M" --seed 1 --element e4m3 --act-scale per-token-group:128 \
    --weight-scale per-block:128x128 --act-quantizer deepgemm --out "$BLK" | tail -1
  "$Q" synth --shapes "$Q17" --m "$SPEED_M" --seed 1 --element e4m3 --out "$FP8" | tail -1
  # Alternating, second of two runs each counts (the first warms the page cache and the device).
  for i in 1 2; do
    verify "speed-fp8-$i" "$FP8" "${FP8_PAIR:-cuda:cublaslt-fp8,cuda:cublaslt-fp8-fastacc}" --timings
    verify "speed-block-$i" "$BLK" "$PAIR" --timings
  done
  fp8=$(cat "$OUT/speed-fp8-2.ms" 2>/dev/null || echo 0); blk=$(cat "$OUT/speed-block-2.ms" 2>/dev/null || echo 0)
  [ "$fp8" -gt 0 ] && [ "$blk" -gt 0 ] && echo "196-layer verify, second runs: per-tensor FP8 $(awk "BEGIN{printf \"%.1f\", $fp8/1000}") s, block FP8 $(awk "BEGIN{printf \"%.1f\", $blk/1000}") s, ratio $(awk "BEGIN{printf \"%.2f\", $blk/$fp8}") (target <= 1.5)" | tee -a "$OUT/summary.txt"
fi

if want own; then
  step "qconform's own block kernel, two forms, against their declared models on the >= 10^8-output set"
  make_big
  verify big-own "$BIG" "${OWN_PAIR:-cuda:mma-fp8-block-triton,cuda:mma-fp8-block-deepgemm}" --m-sweep "$BIG_SWEEP"
fi

step "figures for docs/ (block-validate.sh, $(date -u +%F), $(cat "$OUT/env.txt" 2>/dev/null))"
grep -E "verify --arms|outputs per arm|block arm pair|ratio|not run|^    (C4|C5|C6|FP8 verdict|interchangeability)" \
  "$OUT/summary.txt" 2>/dev/null | cut -c1-420
echo "total $(( ($(now_ms) - T0) / 1000 )) s"
exit 0
