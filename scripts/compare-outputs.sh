#!/usr/bin/env bash
# Behaviour unchanged, proven: runs the same verbs with two qconform binaries (e.g. before and after
# a restructuring) on the same inputs and compares every JSON output field for field, except the
# fields that name the version or measure time. Exit 0 when everything is identical, 1 otherwise,
# printing the first differing path of each file. A `kind` that BEFORE spelled the old way is read
# under its new name (KIND_RENAMES below; the rule: docs/results-schema.md), the one intended change.
#
#   scripts/compare-outputs.sh BEFORE/qconform AFTER/qconform [OUTDIR]
#   ARMS=cuda:mma-vllm-cutlass,cuda:mma-vllm-triton FP8_PAIR=cuda:cublaslt-fp8,cuda:cublaslt-fp8-fastacc \
#   BOUNDARY_ARMS="cuda:mma-vllm-cutlass cuda:cublaslt-int8" scripts/compare-outputs.sh ...   (on a GPU)
set -uo pipefail
before=$1
after=$2
out=${3:-$(mktemp -d)}
arms=${ARMS:-cpu:vllm-cutlass,cpu:vllm-triton}
fp8_pair=${FP8_PAIR:-fp8:sequential,fp8:blocked-4}
boundary_arms=${BOUNDARY_ARMS:-cpu:vllm-cutlass cpu:sglang-sm90}
shapes=${SHAPES:-qwen3-1.7b}
m=${M:-16}
mkdir -p "$out/before" "$out/after"

# The operands come from the `before` binary; the `after` binary must write the same bytes.
"$before" synth --shapes "$shapes" --m "$m" --seed 3 --out "$out/ops.safetensors" > /dev/null || exit 1
"$after" synth --shapes "$shapes" --m "$m" --seed 3 --out "$out/ops-after.safetensors" > /dev/null || exit 1
status=0
cmp -s "$out/ops.safetensors" "$out/ops-after.safetensors" || { echo "DIFFER: synth operands"; status=1; }

for side in before after; do
  q=${!side}
  d=$out/$side
  # The version each binary stamps (`qconform <version>`), masked where a field carries it in a string.
  "$q" --version | sed -n 's/^qconform //p' > "$d/version.txt"
  "$q" predict "$out/ops.safetensors" --out "$d/predictions.json" --quiet > "$d/predict.txt" 2>&1
  pin=$(sed -n 's/^pin: //p' "$d/predict.txt")
  "$q" verify "$out/ops.safetensors" --arms "$arms" --predictions "$d/predictions.json" --pin "$pin" \
    --json "$d/verify.json" > "$d/verify.txt" 2>&1
  echo "$side verify exit $?" >> "$d/exits.txt"
  for arm in $boundary_arms; do
    "$q" boundary --arm "$arm" --json "$d/boundary-${arm//[:\/]/_}.json" > /dev/null 2>&1
    echo "$side boundary $arm exit $?" >> "$d/exits.txt"
  done
  "$q" sweep --pair "$fp8_pair" --k 512,2048 --m 64 --n 256 --seeds 2 --json "$d/sweep.json" > /dev/null 2>&1
  echo "$side sweep exit $?" >> "$d/exits.txt"
  "$q" conform --arms "$arms" --out "$d/conform" --max-new 8 > /dev/null 2>&1
  echo "$side conform exit $?" >> "$d/exits.txt"
done

python3 - "$out" <<'PY' || status=1
import hashlib, json, pathlib, sys
out = pathlib.Path(sys.argv[1])
# Fields that name the build or measure time; everything else must be identical.
SKIP = {"qconform_version", "version", "seconds", "wall_seconds", "timings", "created", "created_at",
        "timestamp", "started", "finished", "elapsed_seconds", "duration_seconds", "seconds_parts"}
# Kinds renamed to the rule `qconform-<name>` (docs/results-schema.md): old spelling -> new. Applied
# to the `before` side only, so an `after` binary that still wrote an old spelling would differ.
KIND_RENAMES = {"qconform.transfer": "qconform-transfer"}
def strip(x, renames={}, version=None, digests={}):
    if isinstance(x, dict):
        # The digest of a JSON file this run wrote changes with the version string inside it; the
        # file itself is compared on its own (every *.json below), without those fields.
        names_json = isinstance(x.get("path"), str) and x["path"].endswith((".json", ".jsonl"))
        kept = {k: strip(v, renames, version, digests) for k, v in x.items() if k not in SKIP and not (k == "sha256" and names_json)}
        if isinstance(kept.get("kind"), str) and kept["kind"] in renames:
            kept["kind"] = renames[kept["kind"]]
        return kept
    if isinstance(x, list):
        return [strip(v, renames, version, digests) for v in x]
    if isinstance(x, str):
        if x in digests:
            return digests[x]
        if version and (x == version or x == "qconform " + version):
            return x.replace(version, "<version>")
        return x.replace(str(out / "before"), "<out>").replace(str(out / "after"), "<out>")
    return x
def first_diff(a, b, path="$"):
    if type(a) != type(b):
        return f"{path}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: present on one side only"
            d = first_diff(a[k], b[k], f"{path}.{k}")
            if d: return d
    elif isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, f"{path}[{i}]")
            if d: return d
    elif a != b:
        return f"{path}: {a!r} vs {b!r}"
    return None
bad = 0
exits = [(out / s / "exits.txt").read_text().split("\n") for s in ("before", "after")]
for x, y in zip(*exits):
    if x.split(" ", 1)[-1] != y.split(" ", 1)[-1]:
        print(f"DIFFER: {x} / {y}"); bad += 1
versions = [(out / s / "version.txt").read_text().strip() for s in ("before", "after")]
# A digest of a JSON/JSONL file this run wrote (wherever it appears, e.g. in join's field list)
# stands for the file's name: the file changes with the version inside it and is compared on its
# own below. Digests of other files (operands, ...) stay and must be equal.
digests = [{"sha256:" + hashlib.sha256(p.read_bytes()).hexdigest(): f"<sha256 of {p.relative_to(out / s)}>"
            for p in (out / s).rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl")} for s in ("before", "after")]
def load(path, side):
    # A .jsonl file (generate/replay output, prompts) is compared as the list of its lines' JSON.
    text = path.read_text()
    doc = [json.loads(l) for l in text.splitlines() if l.strip()] if path.suffix == ".jsonl" else json.loads(text)
    return strip(doc, KIND_RENAMES if side == 0 else {}, versions[side], digests[side])
files = sorted(p.relative_to(out / "before") for p in (out / "before").rglob("*.json*") if p.suffix in (".json", ".jsonl"))
for rel in files:
    a, b = out / "before" / rel, out / "after" / rel
    if not b.exists():
        print(f"DIFFER: {rel} missing after"); bad += 1; continue
    d = first_diff(load(a, 0), load(b, 1))
    print(f"{'IDENTICAL' if d is None else 'DIFFER'}: {rel}" + ("" if d is None else f" at {d}"))
    bad += d is not None
print(f"compare-outputs: {len(files)} JSON/JSONL files, {bad} differ")
sys.exit(1 if bad else 0)
PY
exit $status
