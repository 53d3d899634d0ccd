#!/usr/bin/env python3
"""No include crosses a layer upward (docs/architecture.md, "The layers").

Every `#include "..."` of a source file under src/ and of a public header under include/qconform/
is read; the file's layer and the included file's layer come from LAYERS below (a directory of
src/, or a public header by the layer that implements it). An include of a higher layer, or of a
layer at the same height other than its own, is a violation: each is printed as
`file:line: <layer> includes <header> (<layer>)`, and the exit status is 1. Exit 0 prints the count
of includes checked.

  scripts/check-layers.py [REPO]      (ctest: layers_include_down)
"""
import pathlib
import re
import sys

# Height of each layer, lowest first. Layers of one height are independent of one another.
LAYERS = {
    "core": 0,
    "accum": 1, "compare": 1, "stats": 1, "dist": 1,
    "epilogue": 2,
    "arms": 3, "synth": 3,
    "manifest": 4, "model": 4,
    "checks": 5,
    "report": 6,
    "orchestrate": 7,
    "cli": 8, "python": 8,
}

# The public headers (include/qconform/), each in the layer that implements it.
PUBLIC = {
    "numerics.hpp": "core", "error.hpp": "core", "operands.hpp": "core", "check.hpp": "core",
    "accumulation.hpp": "accum",
    "compare.hpp": "compare",
    "epilogue.hpp": "epilogue", "epilogue_formula.hpp": "epilogue",
    "arm.hpp": "arms", "arm_abi.h": "arms",
    "manifest.hpp": "manifest",
    "report.hpp": "report",
}

SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".cu", ".cuh", ".inc"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of_include(name):
    parts = name.split("/")
    if parts[0] == "qconform" and len(parts) == 2:
        return PUBLIC.get(parts[1])
    return parts[0] if parts[0] in LAYERS else None


def main():
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    files = []
    for p in sorted((repo / "src").rglob("*")):
        if p.suffix in SOURCE_SUFFIXES and p.is_file():
            layer = p.relative_to(repo / "src").parts[0]
            files.append((p, layer))
    for p in sorted((repo / "include" / "qconform").glob("*")):
        if p.name in PUBLIC:
            files.append((p, PUBLIC[p.name]))
    for p in sorted((repo / "python").rglob("*")):
        if p.suffix in SOURCE_SUFFIXES and p.is_file():
            files.append((p, "python"))
    unknown_public = sorted(p.name for p in (repo / "include" / "qconform").glob("*") if p.name not in PUBLIC)
    violations, checked = [], 0
    for name in unknown_public:
        violations.append(f"include/qconform/{name}: a public header with no layer in scripts/check-layers.py PUBLIC")
    for path, layer in files:
        if layer not in LAYERS:
            violations.append(f"{path.relative_to(repo)}: directory `{layer}` has no layer in scripts/check-layers.py")
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = layer_of_include(m.group(1))
            if target is None:
                continue  # a header beside the file ("cuda.hpp"), generated, or third-party
            checked += 1
            if target == layer or LAYERS[target] < LAYERS[layer]:
                continue
            violations.append(f"{path.relative_to(repo)}:{number}: {layer} (height {LAYERS[layer]}) includes "
                              f"{m.group(1)} ({target}, height {LAYERS[target]})")
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} include(s) cross a layer upward or sideways (docs/architecture.md, \"The layers\")")
        return 1
    print(f"layers: {checked} includes between layers checked, none upward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
