#!/usr/bin/env bash
# Which Debian mirror and security archive this machine's apt uses, for scripts that build a
# Debian system of their own (scripts/fresh-machine-check.sh): a machine behind a local mirror or
# a caching proxy (apt-cacher-ng) must use that, not a literal public address.
#
# Usage: scripts/apt-mirrors.sh SUITE [ROOT]
#   reads ROOT/etc/apt/sources.list, ROOT/etc/apt/sources.list.d/*.list (one-line format) and
#   ROOT/etc/apt/sources.list.d/*.sources (deb822), ROOT defaulting to /, and prints two lines:
#     main URI FROM       the first enabled `deb` source of SUITE with component main
#     security URI FROM   the first enabled `deb` source of SUITE-security (or SUITE/updates)
#   FROM is the file the entry was read from, or `default` with the public address when no entry
#   matched (http://deb.debian.org/debian, http://deb.debian.org/debian-security).
# Only `deb` entries count (not deb-src); `Enabled: no` stanzas, comments, options in brackets
# (`[arch=amd64 signed-by=...]`) and files of other names (`*.disabled`) are skipped.
# Test: tests/scripts/test_apt_mirrors.sh (ctest apt_mirrors).
set -euo pipefail

suite=${1:?usage: apt-mirrors.sh SUITE [ROOT]}
root=${2:-}
apt="$root/etc/apt"

# Every entry as "FILE<TAB>URI<TAB>SUITE<TAB>COMPONENTS" (one line per URI x suite).
entries() {
  local f
  for f in "$apt/sources.list" "$apt"/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk -v file="$f" '
      { sub(/#.*/, "") }
      $1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }   # options [a=b c=d]
        if (i + 1 > NF) next
        uri = $i; s = $(i + 1); comps = ""
        for (j = i + 2; j <= NF; j++) comps = comps " " $j
        printf "%s\t%s\t%s\t%s\n", file, uri, s, comps
      }' "$f"
  done
  for f in "$apt"/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk -v file="$f" '
      function flush(   n, m, a, b, x, y) {
        if (types ~ /(^| )deb( |$)/ && tolower(enabled) != "no") {
          n = split(uris, a, " "); m = split(suites, b, " ")
          for (x = 1; x <= n; x++) for (y = 1; y <= m; y++) printf "%s\t%s\t%s\t %s\n", file, a[x], b[y], comps
        }
        types = uris = suites = comps = ""; enabled = "yes"
      }
      BEGIN { enabled = "yes" }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/ { if (key == "uris") uris = uris " " $0; else if (key == "suites") suites = suites " " $0; next }
      {
        key = tolower($0); sub(/:.*/, "", key)
        value = $0; sub(/^[^:]*:[ \t]*/, "", value)
        if (key == "types") types = value
        else if (key == "uris") uris = value
        else if (key == "suites") suites = value
        else if (key == "components") comps = value
        else if (key == "enabled") enabled = value
      }
      END { flush() }' "$f"
  done
}

main="" main_from="" security="" security_from=""
while IFS=$'\t' read -r file uri s comps; do
  uri=${uri%/}
  if [[ -z $main && $s == "$suite" && " $comps " == *" main "* ]]; then main=$uri main_from=$file; fi
  if [[ -z $security && ($s == "$suite-security" || $s == "$suite/updates") ]]; then security=$uri security_from=$file; fi
done < <(entries)
echo "main ${main:-http://deb.debian.org/debian} ${main_from:-default}"
echo "security ${security:-http://deb.debian.org/debian-security} ${security_from:-default}"
