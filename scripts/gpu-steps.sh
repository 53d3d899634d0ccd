# Sourced by the GPU validation scripts (gpu-validate.sh, cutlass-validate.sh, block-validate.sh,
# invariance-validate.sh) once they have set OUT: the build folder B ($BUILD, default build-gpu) and its
# qconform Q, the output folder OUT made, whether a run wants a step (`want STEP`: STEPS is a comma
# list), a step's header (`step WORDS`) and a command timed (`timed CMD...`, its exit status kept).
# `hwy_from_carry`: Highway from .carry/hwy/usr when present (the GPU machine has no libhwy-dev;
# docs/gpu.md), for the build (HWY_ARGS) and at run time (LD_LIBRARY_PATH).
B=${BUILD:-build-gpu}
mkdir -p "$OUT"
Q=$B/qconform
want() { [[ ",$STEPS," == *",$1,"* ]]; }
step() { echo; echo "== $* ($(date +%T))"; }
timed() { local t0=$(date +%s%N); "$@"; local rc=$?; echo "[took $(( ($(date +%s%N) - t0) / 1000000 )) ms, rc=$rc]"; return $rc; }
hwy_from_carry() {
  [ -d .carry/hwy/usr ] && export LD_LIBRARY_PATH=$PWD/.carry/hwy/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-} &&
    HWY_ARGS=-DCMAKE_PREFIX_PATH=$PWD/.carry/hwy/usr
}
