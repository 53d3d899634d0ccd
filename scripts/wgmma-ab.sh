#!/usr/bin/env bash
# Issue #32 item 6 on a GPU machine: each measurement setting of the wgmma INT8 kernel (docs/gpu.md:
# QC_WGMMA_STREAMK, QC_WGMMA_PREFETCH, QC_WGMMA_ONE_RELEASE, QC_WGMMA_GROUP_ROWS) against the same kernel without it, and with it
# against cuBLASLt's INT8 GEMM alone, each pair in 16 alternating rounds of back-to-back batches inside one
# process (`bench_cuda_scaled_mm --shape S --tiles T --ab NAME=VALUE`); every output compared bit for bit with
# the cuBLASLt pipeline's. One summary line per shape, setting and tile; the bench's whole output in $OUT.
#   BUILD=build-gpu SHAPES="4096,4096,4096 8192,8192,8192" TILES=auto,wgpp64x256,wgpp128x128,wg128x256 \
#   SETTINGS="QC_WGMMA_STREAMK=0 QC_WGMMA_PREFETCH=1" OUT=wgmma-ab-out scripts/wgmma-ab.sh
# Needs a build with -DQCONFORM_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a (the bench target is built here).
set -uo pipefail
B=${BUILD:-build-gpu}
SHAPES=${SHAPES:-4096,4096,4096 8192,8192,8192}
TILES=${TILES:-auto,wgpp64x256,wgpp128x128,wg128x256,wgpp64x256c2,wgpp128x128c2,wg128x256c2}
SETTINGS=${SETTINGS:-QC_WGMMA_STREAMK=0 QC_WGMMA_PREFETCH=1 QC_WGMMA_ONE_RELEASE=1 QC_WGMMA_GROUP_ROWS=512 QC_WGMMA_GROUP_ROWS=2048}
OUT=${OUT:-wgmma-ab-out}
mkdir -p "$OUT"
cmake --build "$B" -j"$(nproc)" --target bench_cuda_scaled_mm > "$OUT/bench-build.log" 2>&1 || { tail -20 "$OUT/bench-build.log"; exit 1; }
BENCH=$B/bench/bench_cuda_scaled_mm
head -1 < <("$BENCH" --shape 64,64,64 --tiles auto 2>&1)
for shape in $SHAPES; do
  for setting in $SETTINGS; do
    f="$OUT/ab-${shape//,/x}-${setting//=/-}.txt"
    timeout "${PER_RUN_S:-120}" "$BENCH" --shape "$shape" --tiles "$TILES" --ab "$setting" > "$f" 2>&1
    echo "-- $shape $setting (exit $?)"
    grep -E " with .* vs without" "$f" | sed -E 's/^ +ours ([^ ]+) with [^ ]+ vs without, alternating \(batches of ([0-9]+)\): /  \1 (b\2): /; s/  \[.*//'
  done
done
