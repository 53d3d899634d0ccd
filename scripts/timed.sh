#!/usr/bin/env bash
# scripts/timed.sh STEP COMMAND [ARGS...]: runs COMMAND and prints "timing: STEP N s" after it (also when
# it fails, keeping its exit status). `make test` prints one such line per step; docs/performance.md
# records them.
step=$1
shift
start=$(date +%s)
"$@"
status=$?
echo "timing: $step $(($(date +%s) - start)) s"
exit $status
