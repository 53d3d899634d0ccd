#!/usr/bin/env bash
# Runs the README's two commands on a fresh Debian with nothing preinstalled: a minimal chroot
# built from Debian's packages (mmdebstrap, variant minbase, plus `make` to run the Makefile and
# `ca-certificates`), a clean checkout copied in (`git archive HEAD`, so uncommitted changes are
# not tested), ../shared copied beside it when present (as CI lays it), then `make demo` and/or
# `make test` inside, each timed. Packages installed on this machine cannot hide a missing install
# step there.
#
# Usage: scripts/fresh-machine-check.sh [demo] [test]    (default: demo test)
#   QC_FRESH_DIR    where the chroot goes (default /var/tmp/qconform-fresh; removed first)
#   QC_FRESH_SUITE  Debian suite (default: this machine's, from /etc/os-release, else bookworm)
#   QC_FRESH_KEEP=1 keep the chroot afterwards (default: removed)
# Needs root (chroot, mounts) and a Debian mirror: the one this machine's apt uses (its sources
# lists, scripts/apt-mirrors.sh; printed first), else deb.debian.org; installs mmdebstrap with
# apt-get if absent.
# Prints one line per step: "fresh-machine-check: <step> ok|FAILED in N s".
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

steps=("$@")
((${#steps[@]})) || steps=(demo test)
for s in "${steps[@]}"; do
  [[ $s == demo || $s == test ]] || { echo "fresh-machine-check: unknown step '$s' (expected demo, test)" >&2; exit 2; }
done
[[ $(id -u) -eq 0 ]] || { echo "fresh-machine-check: needs root (chroot and mounts)" >&2; exit 2; }

dir=${QC_FRESH_DIR:-/var/tmp/qconform-fresh}
suite=${QC_FRESH_SUITE:-$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")}
suite=${suite:-bookworm}
# The Debian mirror and security archive of this machine's own apt sources (a local mirror or a
# caching proxy is what this network can reach), else the public ones: scripts/apt-mirrors.sh.
mirrors=$(bash scripts/apt-mirrors.sh "$suite")
mirror=$(awk '$1 == "main" { print $2 }' <<<"$mirrors")
security=$(awk '$1 == "security" { print $2 }' <<<"$mirrors")

log() { echo "fresh-machine-check: $*"; }
elapsed() { echo $(($(date +%s) - $1)); }

# Every mount point at or below $1, deepest first, lazily unmounted: a run killed before its
# cleanup (a machine restarted mid-check) leaves proc, sys and dev mounted in the chroot, and
# `rm --one-file-system` refuses to cross them (CI failed so once).
unmount_below() {
  local root m
  root=$(realpath -m "$1")
  awk -v root="$root" '{ gsub(/\\040/, " ", $5); if ($5 == root || index($5, root "/") == 1) print $5 }' \
    /proc/self/mountinfo | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2- |
    while IFS= read -r m; do umount -l "$m" 2>/dev/null || true; done
}
remove_dir() {
  [[ -e $1 ]] || return 0
  unmount_below "$1"
  rm -rf --one-file-system "$1" || { echo "fresh-machine-check: cannot remove $1 (a mount below it?)" >&2; return 1; }
}

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [[ ${QC_FRESH_KEEP:-0} != 1 ]]; then remove_dir "$dir" || true; fi
}
trap cleanup EXIT

log "Debian mirror $mirror (from $(awk '$1 == "main" { print $3 }' <<<"$mirrors")), security $security (from $(awk '$1 == "security" { print $3 }' <<<"$mirrors"))"
if ! command -v mmdebstrap >/dev/null; then
  log "apt-get install mmdebstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

# 1. The chroot: Debian's minimal base, `make` (the README's commands are make targets) and the
#    CA certificates; nothing else. The host's CA bundle and pip settings are copied in because
#    they describe this network (a proxy's certificate), not the project's needs.
t=$(date +%s)
# A mirror caught mid-sync fails `apt-get update` now and then (seen once here): up to three tries.
for try in 1 2 3; do
  if ! remove_dir "$dir"; then
    dir=$(mktemp -d "${dir%/}.XXXXXX")  # an empty directory beside it; mmdebstrap accepts one
    log "using $dir instead"
  fi
  mmdebstrap --quiet --variant=minbase --include=make,ca-certificates "$suite" "$dir" \
    "deb $mirror $suite main" "deb $mirror $suite-updates main" \
    "deb $security $suite-security main" && break
  ((try < 3)) || { log "mmdebstrap failed 3 times"; exit 1; }
  log "mmdebstrap failed (try $try); again in 30 s"
  sleep 30
done
[[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
[[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$dir/etc/pip.conf"
cp /etc/resolv.conf "$dir/etc/resolv.conf"
log "chroot ($suite, minbase + make + ca-certificates) ok in $(elapsed "$t") s"

# 2. A clean checkout of HEAD, and shared/ beside it as CI has it.
mkdir -p "$dir/src/qconform"
git archive HEAD | tar -x -C "$dir/src/qconform"
if [[ -d ../shared ]]; then cp -r ../shared "$dir/src/shared"; fi

for m in proc sys; do
  mount --rbind "/$m" "$dir/$m" && mounted+=("$dir/$m")
done
# A /dev of the chroot's own (not a bind of this machine's): a test that replaced a device node
# there (qconform's hostile-input suite checks that it does not) must not reach the host's.
mount -t tmpfs -o mode=755 tmpfs "$dir/dev" && mounted+=("$dir/dev")
for node in "null c 1 3" "zero c 1 5" "full c 1 7" "random c 1 8" "urandom c 1 9" "tty c 5 0"; do
  set -- $node
  mknod -m 666 "$dir/dev/$1" "$2" "$3" "$4"
done
mkdir -p "$dir/dev/pts" "$dir/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$dir/dev/pts" && mounted+=("$dir/dev/pts")
ln -sf pts/ptmx "$dir/dev/ptmx"
mount -t tmpfs -o mode=1777 tmpfs "$dir/dev/shm" && mounted+=("$dir/dev/shm")
ln -sf /proc/self/fd "$dir/dev/fd"
# The standard streams' links, as every Debian machine has them (udev, a container runtime).
for fd in "stdin 0" "stdout 1" "stderr 2"; do
  set -- $fd
  ln -sf "/proc/self/fd/$2" "$dir/dev/$1"
done

# 3. The README's commands, each timed, in a login shell with a plain environment.
status=0
for s in "${steps[@]}"; do
  t=$(date +%s)
  if chroot "$dir" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 CI="${CI:-}" PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    /bin/bash -c "cd /src/qconform && make $s" 2>&1 | sed -u "s/^/[$s] /"; then
    log "make $s ok in $(elapsed "$t") s"
  else
    log "make $s FAILED in $(elapsed "$t") s"
    status=1
    break
  fi
done
exit $status
