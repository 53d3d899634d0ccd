#!/usr/bin/env bash
# scripts/apt-mirrors.sh on made-up apt configurations (each a fake ROOT/etc/apt), so the mirror
# choice of scripts/fresh-machine-check.sh is tested without building a chroot. Each case states
# the two lines it expects; prints one line per case and exits 1 when any differs.
set -uo pipefail
script="$(cd "$(dirname "$0")/../.." && pwd)/scripts/apt-mirrors.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0 n=0

# case NAME SUITE EXPECTED_MAIN EXPECTED_SECURITY: the files are written by the caller into $root.
check() {
  local name=$1 suite=$2 want_main=$3 want_security=$4 out
  out=$(bash "$script" "$suite" "$root" 2>&1)
  local got_main got_security
  got_main=$(awk '$1 == "main" { print $2 " " $3 }' <<<"$out")
  got_security=$(awk '$1 == "security" { print $2 " " $3 }' <<<"$out")
  n=$((n + 1))
  if [[ $got_main == "$want_main" && $got_security == "$want_security" ]]; then
    echo "ok   $name"
  else
    echo "FAIL $name: expected main '$want_main', security '$want_security'; found:"
    sed 's/^/       /' <<<"$out"
    failed=$((failed + 1))
  fi
}
fresh() { root="$tmp/$1"; mkdir -p "$root/etc/apt/sources.list.d"; }

fresh deb822-debian-default
cat >"$root/etc/apt/sources.list.d/debian.sources" <<'S'
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
S
check deb822-debian-default bookworm "http://deb.debian.org/debian $root/etc/apt/sources.list.d/debian.sources" \
  "http://deb.debian.org/debian-security $root/etc/apt/sources.list.d/debian.sources"

fresh one-line-local-proxy
cat >"$root/etc/apt/sources.list" <<'S'
# a caching proxy (apt-cacher-ng) in front of both archives
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://10.0.0.5:3142/debian/ bookworm main contrib
deb http://10.0.0.5:3142/debian bookworm-updates main
deb http://10.0.0.5:3142/security bookworm-security main contrib
S
check one-line-local-proxy bookworm "http://10.0.0.5:3142/debian $root/etc/apt/sources.list" \
  "http://10.0.0.5:3142/security $root/etc/apt/sources.list"

fresh skip-disabled-and-other-suites
cat >"$root/etc/apt/sources.list.d/a.sources" <<'S'
Types: deb
URIs: http://disabled.example/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb-src
URIs: http://src-only.example/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://trixie.example/debian
Suites: trixie
Components: main
S
cat >"$root/etc/apt/sources.list.d/b.list" <<'S'
deb http://no-main.example/debian bookworm contrib non-free
deb http://mirror.example/debian bookworm main
S
cat >"$root/etc/apt/sources.list.d/google.list.disabled-by-farm" <<'S'
deb http://ignored.example/debian bookworm main
S
check skip-disabled-and-other-suites bookworm "http://mirror.example/debian $root/etc/apt/sources.list.d/b.list" \
  "http://deb.debian.org/debian-security default"

fresh old-security-suite
cat >"$root/etc/apt/sources.list" <<'S'
deb http://ftp.example.org/debian buster main
deb http://security.example.org buster/updates main
S
check old-security-suite buster "http://ftp.example.org/debian $root/etc/apt/sources.list" \
  "http://security.example.org $root/etc/apt/sources.list"

fresh multiline-uris
cat >"$root/etc/apt/sources.list.d/m.sources" <<'S'
Types: deb deb-src
URIs: http://first.example/debian
 http://second.example/debian
Suites: bookworm
Components: contrib main
S
check multiline-uris bookworm "http://first.example/debian $root/etc/apt/sources.list.d/m.sources" \
  "http://deb.debian.org/debian-security default"

fresh nothing-configured
check nothing-configured bookworm "http://deb.debian.org/debian default" "http://deb.debian.org/debian-security default"

echo "apt-mirrors: $((n - failed)) passed, $failed failed"
((failed == 0))
