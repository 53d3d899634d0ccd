#!/usr/bin/env bash
# Issue #32 item 6 on a GPU machine: where our INT8 kernel's time goes against cuBLASLt's GEMM alone at one
# shape. Times the shape (`bench_cuda_scaled_mm --shape`), then profiles with Nsight Compute one launch of each
# named tile of ours and one of cuBLASLt's kernel (`--set full`, the source imported), and prints for each the
# headline metrics and the SASS lines with the most warp-stall samples (`--page source`): the line-level
# answer that the sections' summaries (docs/performance.md, ninth session) do not give.
#   BUILD=build-gpu SHAPE=4096,4096,4096 TILES="wg128x256 wgpp128x128c2" OUT=gemm-profile-out scripts/gemm-profile.sh
# Needs a build with -DQCONFORM_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a (the bench target is built here).
set -uo pipefail
B=${BUILD:-build-gpu}
SHAPE=${SHAPE:-4096,4096,4096}
TILES=${TILES:-wg128x256}
OUT=${OUT:-gemm-profile-out}
mkdir -p "$OUT"
cmake --build "$B" -j"$(nproc)" --target bench_cuda_scaled_mm > "$OUT/bench-build.log" 2>&1 || { tail -20 "$OUT/bench-build.log"; exit 1; }
BENCH=$B/bench/bench_cuda_scaled_mm
first=${TILES%% *}
"$BENCH" --shape "$SHAPE" --tiles "${TILES// /,}" | tee "$OUT/bench.txt"

# One launch after the warm-ups (5) and the first timed one, by kernel name; $1 = report name, $2 = name regex,
# $3 = the tile the bench runs of ours.
profile() {
  ncu --set full --import-source yes -f -o "$OUT/$1" -k "regex:$2" --launch-skip 6 --launch-count 1 \
    "$BENCH" --shape "$SHAPE" --tiles "$3" > "$OUT/$1.log" 2>&1 || { echo "ncu $1: failed"; tail -5 "$OUT/$1.log"; return; }
  ncu -i "$OUT/$1.ncu-rep" --page details > "$OUT/$1.details.txt" 2>&1
  ncu -i "$OUT/$1.ncu-rep" --page source --print-source sass --csv > "$OUT/$1.source.csv" 2>&1
  echo "== $1"
  grep -E "^\s+(Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Registers Per Thread|Dynamic Shared Memory Per Block|Grid Size|No Eligible) " \
    "$OUT/$1.details.txt"
  python3 - "$OUT/$1.source.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace"))]
head = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r)), None)
if head is None:
    sys.exit("no source table in " + sys.argv[1])
cols = rows[head]
src = [i for i, c in enumerate(cols) if c.strip() == "Source"][0]
stall = [i for i, c in enumerate(cols) if c.startswith("Warp Stall Sampling (All")]
if not stall:
    sys.exit("no warp-stall column in " + sys.argv[1] + ": " + ", ".join(cols))
def num(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0
body = [r for r in rows[head + 1:] if len(r) > max(src, stall[0])]
total = sum(num(r[stall[0]]) for r in body) or 1.0
print("  SASS lines with the most warp-stall samples (of %d):" % total)
for r in sorted(body, key=lambda r: -num(r[stall[0]]))[:25]:
    print("  %5.1f %%  %s" % (100 * num(r[stall[0]]) / total, r[src].strip()[:110]))
PY
}
for t in $TILES; do profile "ours-$t" int8_scaled_mm_wgmma "$t"; done
profile cublaslt 'gemm|xmma|Kernel|nvjet' "$first"
