#!/usr/bin/env bash
# Issue #32 on a GPU machine: verify's device pipeline against the code before it, in one call.
# Builds this tree and a baseline (a `git archive` of the commit to compare with, .carry/baseline.tar.gz)
# side by side, runs the GPU tests of the pipeline, then the 196-layer verifies of scripts/fp8-verify-speed.sh
# (INT8 `cuda:mma-vllm-cutlass` vs `cuda:mma-vllm-triton` with pinned predictions, FP8 `cuda:cublaslt-fp8` vs
# `-fastacc`) alternating baseline and this tree, and compares every JSON field for field (timings and the
# reference's description aside). Logs and the JSON go to $OUT.
#   git archive <commit> | gzip > .carry/baseline.tar.gz; STEPS=build,tests,speed,70b scripts/resident-validate.sh
# `speed` times a single file and the same operands as a sharded set (NCU=1: and sums one FP8 block's GPU time by kernel);
# `70b` a Llama-3-70B-shaped set at full size (560 layers, 71.6 GB in /dev/shm), below; `upload` the upload's pace.
# Highway is taken from .carry/hwy/usr when present (the GPU machine has no libhwy-dev; docs/gpu.md).
#   CUTLASS=1: this tree is built with CUTLASS's headers from .carry/nvidia_cutlass-*.whl (its GPU tests then run
#   the CUTLASS arms too; the build takes minutes longer); the baseline is always built without.
set -uo pipefail
OUT=${OUT:-resident-out}
STEPS=${STEPS:-build,tests,speed}
PAIRS=${PAIRS:-3}
BASE=${BASE:-1}  # 0: no baseline (this tree's runs only)
FILTER=${FILTER:-*}
source scripts/gpu-steps.sh
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
HWY_ARGS=
hwy_from_carry
ARGS="-DCMAKE_BUILD_TYPE=Release -DQCONFORM_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DQCONFORM_WITH_ONEDNN=OFF
  -DQCONFORM_WITH_CUTLASS=OFF -DQCONFORM_BUILD_TESTS=ON -DQCONFORM_BUILD_PYTHON=OFF $HWY_ARGS ${CMAKE_ARGS:-}"
CUTLASS_ARGS=
if [ "${CUTLASS:-0}" = 1 ]; then
  wheel=$(ls .carry/nvidia_cutlass-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || { echo "CUTLASS=1: no .carry/nvidia_cutlass-*.whl"; exit 1; }
  rm -rf /tmp/qc-cutlass && python3 -m zipfile -e "$wheel" /tmp/qc-cutlass &&
    CUTLASS_ARGS="-DQCONFORM_WITH_CUTLASS=ON -DQCONFORM_CUTLASS_DIR=/tmp/qc-cutlass/cutlass_library/source"
fi

if want build; then
  step "build this tree and the baseline ($(nproc) cores)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/env.txt"
  rm -rf /tmp/qc-base && mkdir -p /tmp/qc-base && tar -xzf .carry/baseline.tar.gz -C /tmp/qc-base
  t0=$(now_ms)
  (cmake -S . -B "$B" $ARGS $CUTLASS_ARGS > "$OUT/build.log" 2>&1 &&
     cmake --build "$B" -j"$(nproc)" --target qconform qconform_gpu_tests >> "$OUT/build.log" 2>&1) &
  after=$!
  base=
  if [ "$BASE" = 1 ]; then
    (cmake -S /tmp/qc-base -B /tmp/qc-base/build $ARGS > "$OUT/build-base.log" 2>&1 &&
       cmake --build /tmp/qc-base/build -j"$(nproc)" --target qconform >> "$OUT/build-base.log" 2>&1) &
    base=$!
  fi
  wait $after || { tail -30 "$OUT/build.log"; exit 1; }
  [ -z "$base" ] || wait $base || { tail -30 "$OUT/build-base.log"; exit 1; }
  touch "$OUT/build-base.log"
  echo "built both in $(( ($(now_ms) - t0) / 1000 )) s"
  mv "$OUT/build.log" "$OUT/build-base.log" /tmp/  # kept back only when a build fails
fi
QB=/tmp/qc-base/build/qconform

if want tests; then
  step "GPU tests ($FILTER)"
  QC_EXPECT_WGMMA=1 "$B/tests/qconform_gpu_tests" --gtest_filter="$FILTER" > "$OUT/gpu-tests.log" 2>&1
  grep -E "^\[  (FAILED|PASSED) |SKIPPED|Failure" "$OUT/gpu-tests.log" | head -40
fi

if want speed; then
  step "operands (qwen3-1.7b, M=512, seed 1) and predictions"
  tmp=${TMPDIR:-/tmp}
  "$Q" synth --shapes qwen3-1.7b --m 512 --seed 1 --out "$tmp/speed-int8.safetensors" > /dev/null
  "$Q" synth --shapes qwen3-1.7b --m 512 --seed 1 --element e4m3 --out "$tmp/speed-fp8.safetensors" > /dev/null
  R=/tmp/resident-runs  # every run's output and JSON (the call brings back 8 files at most: the summaries go to $OUT)
  mkdir -p $R
  "$Q" predict "$tmp/speed-int8.safetensors" --out "$R/int8.predictions.json" --quiet > "$R/predict.txt"
  pin=$(sed -n 's/^pin: //p' "$R/predict.txt")
  # The baseline pins its own (an older tree digest's predictions are refused by an older binary).
  [ "$BASE" = 1 ] && "$QB" predict "$tmp/speed-int8.safetensors" --out "$R/int8.base.predictions.json" --quiet > "$R/predict-base.txt"
  # The same operands as a sharded set (9 shards of <= 200 MB), whose shards are hashed in parallel.
  "$Q" synth --shapes qwen3-1.7b --m 512 --seed 1 --shard-size 200000000 --out "$tmp/speed-int8-sharded.index.json" > /dev/null
  "$Q" predict "$tmp/speed-int8-sharded.index.json" --out "$R/int8-sharded.predictions.json" --quiet > "$R/predict-sharded.txt"
  pin_sharded=$(sed -n 's/^pin: //p' "$R/predict-sharded.txt")
  sync  # the files just written reach the disk now, not during a timed run's fsync of its JSON
  grep -m1 -E "^(model name|flags)" /proc/cpuinfo | cut -c1-80 | tee -a "$OUT/env.txt"
  grep -o -w sha_ni /proc/cpuinfo | head -1 | tee -a "$OUT/env.txt"
  # The floor of the operands' digest on this host: sha256sum of the file (page cache warm), and OpenSSL's rate.
  t0=$(now_ms); sha256sum "$tmp/speed-int8.safetensors" > /dev/null
  echo "sha256sum of $(stat -c %s "$tmp/speed-int8.safetensors") bytes: $(( $(now_ms) - t0 )) ms" | tee -a "$OUT/env.txt"
  openssl speed -evp sha256 -bytes 8388608 -seconds 2 2>/dev/null | tail -1 | tee -a "$OUT/env.txt"
  one() {  # name, binary, operands, arms, extra args...
    local name=$1 q=$2 ops=$3 arms=$4
    shift 4
    local start rc=0
    start=$(now_ms)
    "$q" verify "$ops" --arms "$arms" --reference gpu --timings --json "$R/$name.json" "$@" > "$R/$name.txt" 2>&1 || rc=$?
    local ms=$(( $(now_ms) - start ))
    local inside laps
    inside=$(sed -n 's/^  the verification (verify_layer_runs; its phases above) *//p' "$R/$name.txt")
    # The process's own phases add up to the wall up to its last write; the rest is its exit (destructors,
    # the CUDA driver's teardown).
    laps=$(awk '/^this process around/ { on = 1; next } on && NF { s += $NF } END { print s + 0 }' "$R/$name.txt")
    printf '%-14s exit %d  process %6.2f s  in the verification %6.2f s  after the last phase %5.2f s\n' "$name" "$rc" \
      "$(awk "BEGIN{print $ms / 1000}")" "$inside" "$(awk "BEGIN{print $ms / 1000 - $laps}")" | tee -a "$OUT/speed.txt"
    [ $rc -le 1 ] || tail -3 "$R/$name.txt"
  }
  for i in $(seq 1 "$PAIRS"); do
    sides="base after"; [ "$BASE" = 1 ] || sides=after
    for side in $sides; do
      q=$Q; [ $side = base ] && q=$QB
      p=int8 pn=$pin; [ $side = base ] && p=int8.base pn=$(sed -n 's/^pin: //p' "$R/predict-base.txt")
      one "int8-$side-$i" "$q" "$tmp/speed-int8.safetensors" cuda:mma-vllm-cutlass,cuda:mma-vllm-triton \
        --predictions "$R/$p.predictions.json" --pin "$pn"
    done
    for side in $sides; do
      q=$Q; [ $side = base ] && q=$QB
      one "int8-sharded-$side-$i" "$q" "$tmp/speed-int8-sharded.index.json" cuda:mma-vllm-cutlass,cuda:mma-vllm-triton \
        --predictions "$R/int8-sharded.predictions.json" --pin "$pin_sharded"
    done
    for side in $sides; do
      q=$Q; [ $side = base ] && q=$QB
      one "fp8-$side-$i" "$q" "$tmp/speed-fp8.safetensors" cuda:cublaslt-fp8,cuda:cublaslt-fp8-fastacc
    done
  done
  python3 - "$R" <<'PY' | tee -a "$OUT/speed.txt"
import json, sys, os
runs = sys.argv[1]
def load(name):
    path = os.path.join(runs, name + ".json")
    if not os.path.exists(path):
        return None
    j = json.load(open(path))
    for key in ("seconds", "wall_seconds", "reference"):
        j.pop(key, None)
    return j
def diff(a, b, path, out):
    if type(a) != type(b):
        out.append((path, a, b))
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            diff(a.get(k), b.get(k), path + "." + str(k), out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append((path + ".length", len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, path + "[%d]" % i, out)
    elif a != b:
        out.append((path, a, b))
for kind in ("int8", "fp8", "int8-sharded"):
    a, b = load(kind + "-base-1"), load(kind + "-after-1")
    if a is None or b is None:
        print(kind, "a run wrote no JSON")
        continue
    found = []
    diff(a, b, "", found)
    print(kind, "baseline vs this tree:", "IDENTICAL field for field" if not found else "%d fields differ" % len(found))
    for p, x, y in found[:12]:
        print("  ", p, "|", str(x)[:160], "|", str(y)[:160])
PY
  if [ "${NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
    # Where the FP8 verify's GPU time goes: every kernel's duration over one decoder block (7 layers), summed by
    # kernel name (ncu serializes the kernels: the durations add up, the verify's own wall does not matter here).
    "$Q" synth --shapes qwen3-1.7b --layers 7 --m 512 --seed 1 --element e4m3 --out "$tmp/ncu-fp8.safetensors" > /dev/null
    : > "$OUT/fp8-ncu.txt"
    sides="after"; [ "$BASE" = 1 ] && sides="base after"
    for side in $sides; do
      q=$Q; [ $side = base ] && q=$QB
      # --clock-control none: the clocks as the timed runs have them (ncu would lock them to base otherwise).
      ncu --clock-control none --metrics gpu__time_duration.sum --csv "$q" verify "$tmp/ncu-fp8.safetensors" \
        --arms cuda:cublaslt-fp8,cuda:cublaslt-fp8-fastacc --reference gpu > "$R/ncu-$side.csv" 2> "$R/ncu-$side.err"
      python3 - "$R/ncu-$side.csv" "$side" <<'PY' >> "$OUT/fp8-ncu.txt"
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head = rows[0]
name, value, unit = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
total = collections.defaultdict(lambda: [0, 0.0])
for r in rows[1:]:
    scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}
    if r[unit] not in scale:
        sys.exit("unknown unit %r of %s" % (r[unit], r[name][:60]))
    v = float(r[value].replace(",", "")) * scale[r[unit]]
    t = total[r[name][:110]]
    t[0] += 1
    t[1] += v
print("%s: FP8 verify, one block (7 qwen3-1.7b layers, M = 512): GPU time by kernel (ms; x28 for the 196 layers)" % sys.argv[2])
for k, (n, ms) in sorted(total.items(), key=lambda kv: -kv[1][1])[:14]:
    print("%10.3f ms %6d launches  %s" % (ms, n, k))
print("%10.3f ms total" % sum(t[1] for t in total.values()))
PY
      tail -3 "$R/ncu-$side.err" >> "$OUT/fp8-ncu.txt"
    done
  fi
  for f in int8-after-1 fp8-after-1; do cp "$R/$f.txt" "$OUT/$f.txt"; done
  for f in int8-after-1 fp8-after-1 int8-sharded-after-1; do echo "-- $f"; sed -n '/^time by phase/,$p' "$R/$f.txt"; done
fi

# A Llama-3-70B-shaped set at full size: 560 layers (80 blocks), M = 512, sharded as HF checkpoints are (5 GB),
# 71.6 GB, in DIR70 (default /dev/shm: the machine's 64 GiB disk cannot hold it). SRC70 layers (default 77: 11
# blocks) are synthesized and repeated to BLOCKS70 blocks (scripts/replicate-operands.py: every layer keeps its
# name, shape and a synthesized layer's bytes). `predict` pins them (and fills the digest record), then the INT8
# pair verifies them RUNS70 times; the last run's phases are kept. This tree only.
if want 70b; then
  n=${SRC70:-77} blocks=${BLOCKS70:-80} dir=${DIR70:-/dev/shm}
  step "llama3-70b-shaped, $blocks blocks from $n synthesized layers, in $dir"
  rm -rf "$dir/qc70" && mkdir -p "$dir/qc70"
  free -g | head -2 | tee "$OUT/70b.txt"
  timed "$Q" synth --shapes llama3-70b --layers "$n" --m 512 --seed 1 --shard-size 5000000000 \
    --out "$dir/qc70/src.index.json" | tee -a "$OUT/70b.txt"
  timed python3 scripts/replicate-operands.py "$dir/qc70/src.index.json" "$blocks" "$dir/qc70/l70.index.json" | tee -a "$OUT/70b.txt"
  rm -f "$dir"/qc70/src*
  du -sb "$dir/qc70" | tee -a "$OUT/70b.txt"
  free -g | head -2 | tee -a "$OUT/70b.txt"
  timed "$Q" predict "$dir/qc70/l70.index.json" --out /tmp/70b.predictions.json --quiet | tee /tmp/70b.predict.txt | tee -a "$OUT/70b.txt"
  pin70=$(sed -n 's/^pin: //p' /tmp/70b.predict.txt)
  for i in $(seq 1 "${RUNS70:-3}"); do
    # ENV70="- QC_VERIFY_OVERLAP=1 QC_UPLOAD_CHUNK_MIB=8,QC_EXACT_STREAM=0 ...": run i with the i-th word's
    # comma-separated settings (none, or "-": the defaults).
    w=$(echo "${ENV70:-}" | awk -v i="$i" '{ print $i }'); [ "$w" = - ] && w=
    t0=$(now_ms)
    env ${w//,/ } "$Q" verify "$dir/qc70/l70.index.json" --arms cuda:mma-vllm-cutlass,cuda:mma-vllm-triton --reference gpu --timings \
      --predictions /tmp/70b.predictions.json --pin "$pin70" --json /tmp/70b-$i.json > /tmp/70b-$i.txt 2>&1
    rc=$?
    echo "run $i: exit $rc, process $(( $(now_ms) - t0 )) ms for $(( blocks * 7 )) layers${w:+ ($w)}" | tee -a "$OUT/70b.txt"
    [ $rc -le 1 ] || tail -5 /tmp/70b-$i.txt | tee -a "$OUT/70b.txt"
  done
  head -120 /tmp/70b-"${RUNS70:-3}".txt >> "$OUT/70b.txt"
  # Every run's results against run 1's (the settings change how, never what): timings aside.
  python3 - "${RUNS70:-3}" <<'PY' | tee -a "$OUT/70b.txt"
import json, sys
def load(i):
    try:
        j = json.load(open("/tmp/70b-%d.json" % i))
    except OSError:
        return None
    for k in ("seconds", "wall_seconds"):
        j.pop(k, None)
    return json.dumps(j, sort_keys=True)
first = load(1)
for i in range(2, int(sys.argv[1]) + 1):
    other = load(i)
    print("70b run %d against run 1:" % i, "no JSON" if other is None or first is None else
          ("the same, field for field" if other == first else "DIFFERENT"))
PY
  rm -rf "$dir/qc70"
fi

# The upload's pace on this host: the link and the host's copy rates (a torch probe), then a 35-layer, one-shard
# Llama-3-70B-shaped subset (4.5 GB, in /dev/shm) verified with QC_UPLOAD_WORKERS = 8, 16, 0, 4, 8 (0: a plain
# cudaMemcpyAsync from the mapped file); each run's "layer uploads ahead" phase is its upload time. This tree only.
if want upload; then
  step "the upload's pace"
  python3 - <<'PY' | tee "$OUT/upload.txt"
import time, torch
n = 1 << 30
x, y = torch.empty(n, dtype=torch.uint8).pin_memory(), torch.ones(n, dtype=torch.uint8)
d = torch.empty(n, dtype=torch.uint8, device="cuda")
def rate(src, reps=8):
    for _ in range(2): d.copy_(src, non_blocking=True)
    torch.cuda.synchronize(); t = time.time()
    for _ in range(reps): d.copy_(src, non_blocking=True)
    torch.cuda.synchronize(); return reps * n / (time.time() - t) / 1e9
print("H2D pinned %.1f GB/s, pageable %.1f GB/s" % (rate(x), rate(y)))
for th in (1, 8, 16):
    torch.set_num_threads(th); z = torch.empty(n, dtype=torch.uint8); z.copy_(y); t = time.time()
    for _ in range(4): z.copy_(y)
    print("host memcpy, %d threads: %.1f GB/s" % (th, 4 * n / (time.time() - t) / 1e9))
PY
  d=/dev/shm/qc-upload
  rm -rf "$d" && mkdir -p "$d"
  "$Q" synth --shapes llama3-70b --layers 35 --m 512 --seed 1 --shard-size 5000000000 --out "$d/s.index.json" > /dev/null
  sync
  "$Q" predict "$d/s.index.json" --out /tmp/upload.predictions.json --quiet > /tmp/upload.predict.txt
  pin=$(sed -n 's/^pin: //p' /tmp/upload.predict.txt)
  for w in 8 16 0 4 8; do
    t0=$(now_ms)
    QC_UPLOAD_WORKERS=$w "$Q" verify "$d/s.index.json" --arms cuda:mma-vllm-cutlass,cuda:mma-vllm-triton --reference gpu \
      --timings --predictions /tmp/upload.predictions.json --pin "$pin" > /tmp/upload-$w.txt 2>&1
    echo "QC_UPLOAD_WORKERS=$w: exit $?, process $(( $(now_ms) - t0 )) ms; $(grep -E 'uploads ahead' /tmp/upload-$w.txt | tr -s ' ')" |
      tee -a "$OUT/upload.txt"
  done
  rm -rf "$d"
fi
