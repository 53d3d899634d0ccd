#!/usr/bin/env bash
# A configure on a machine whose oneDNN CMake package cannot load must succeed without the oneDNN
# arm and say why in one line (issue #19: Debian's dnnl-config.cmake needs OpenCL, which
# libdnnl-dev only recommends). A stand-in dnnl-config.cmake that requires a package that does not
# exist plays that machine; `dnnl_DIR` points the configure at it.
# Usage: configure_without_usable_onednn.sh SOURCE_DIR
set -euo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/dnnl"
cat >"$work/dnnl/dnnl-config.cmake" <<'CFG'
find_package(QconformNoSuchTransitiveDependency REQUIRED)
CFG
if ! cmake -S "$src" -B "$work/build" -Ddnnl_DIR="$work/dnnl" -DQCONFORM_WITH_CUDA=OFF -DQCONFORM_BUILD_TESTS=OFF \
  -DQCONFORM_BUILD_BENCH=OFF >"$work/log" 2>&1; then
  cat "$work/log"
  echo "FAIL: the configure aborted on an unusable dnnl-config.cmake"
  exit 1
fi
line=$(grep "oneDNN not usable:" "$work/log" || true)
echo "configure printed: $line"
[[ $line == *"QconformNoSuchTransitiveDependency"*"the onednn arms are not built"* ]] ||
  { cat "$work/log"; echo "FAIL: no one-line reason naming the missing package"; exit 1; }
grep -q "oneDNN=OFF" "$work/log" || { echo "FAIL: the summary does not say oneDNN=OFF"; exit 1; }
header="$work/build/generated/arms/absent_backends.hpp"
grep -q "QconformNoSuchTransitiveDependency" "$header" ||
  { cat "$header"; echo "FAIL: the reason does not reach qconform arms ($header)"; exit 1; }
echo "PASS: configure succeeded without the oneDNN arm; the reason reaches 'qconform arms'"
