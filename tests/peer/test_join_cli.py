"""`qconform join` end to end, on manifests written here by a second, independent writer (Python,
digests from hashlib): a clean pair passes (exit 0); each tampering is refused with exit 1 and the
offending field named with both values; `--allow-unverified` exits 0 and records the violations;
bad usage exits 2. The layout is docs/identity-contract.md's."""
import copy
import hashlib
import json

import pytest

from conftest import run, tool


def digest(path):
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(files, arm, kernel, epilogue):
    return {
        "format": "qconform-manifest",
        "schema_version": 1,
        "kind": "verify",
        "created": "2025-01-31T12:00:00Z",
        "project_version": "v0.1.0",
        "inputs": {role: {"path": str(p), "sha256": digest(p)} for role, p in files.items()},
        "arm": arm,
        "treatment": {"arm": arm, "kernel": kernel, "epilogue": epilogue, "device": "cpu: test",
                      "library": "qconform v0.1.0", "build": "gcc -ffp-contract=off", "extra": {}},
        "platform": {"cpu": "test cpu", "compiler": "gcc", "mxcsr": {"ftz": False, "daz": False}},
        "selection_env": {"VLLM_DISABLED_KERNELS": "Triton" if "cutlass" in arm else "Cutlass"},
        "config": {"scale_mode": "real", "decoding": {"greedy": True}},
        "allow_unverified": False,
        "unverified_joins": [],
    }


@pytest.fixture
def pair(tmp_path):
    files = {}
    for role, content in [("operands", b"\x01" * 2048), ("model", b"weights"), ("prompts", b"a\nb\n"),
                          ("tokenizer", b"tok"), ("quantization_config", b"{}")]:
        p = tmp_path / f"{role}.bin"
        p.write_bytes(content)
        files[role] = p
    a = manifest(files, "cpu:vllm-cutlass", "cutlass-like kernel", "vllm-cutlass")
    b = manifest(files, "cpu:vllm-triton", "triton-like kernel", "vllm-triton")
    return tmp_path, files, a, b


def join(tmp_path, a, b, *extra):
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    out = tmp_path / "join.json"
    p = run([tool("qconform"), "join", pa, pb, "--json", out, *extra], check=False)
    result = json.loads(out.read_text()) if out.exists() else None
    if out.exists():
        out.unlink()
    return p, result


def test_clean_pair_passes(pair):
    tmp, files, a, b = pair
    p, r = join(tmp, a, b)
    assert p.returncode == 0, p.stdout + p.stderr
    assert r["verified"] is True and r["unverified"] is False and r["violations"] == []
    assert r["check"]["id"] == "C0" and r["check"]["verdict"] == "pass"
    assert sum(f["status"] == "rehashed" for f in r["fields"]) == 2 * len(files)


def refused(p, r, field, status, *values):
    assert p.returncode == 1, f"exit {p.returncode}, expected 1\n{p.stdout}{p.stderr}"
    lines = [l for l in p.stdout.splitlines() if l.startswith("VIOLATION")]
    hit = [l for l in lines if f" {field}: {status}:" in l]
    assert hit, f"no violation {field}: {status} in\n" + "\n".join(lines)
    for v in values:
        assert any(v in l for l in hit), f"{v!r} not named in {hit}"
    assert r["verified"] is False and r["check"]["verdict"] == "fail"
    assert field in r["check"]["summary"]


def test_one_byte_of_the_operands_changed(pair):
    tmp, files, a, b = pair
    data = bytearray(files["operands"].read_bytes())
    data[1000] ^= 0x01
    files["operands"].write_bytes(bytes(data))
    p, r = join(tmp, a, b)
    refused(p, r, "inputs.operands.sha256", "changed on disk", str(files["operands"]), digest(files["operands"]))
    # Without re-hashing the recorded digests agree: re-hashing is what catches it.
    p, r = join(tmp, a, b, "--no-rehash")
    assert p.returncode == 0, p.stdout


@pytest.mark.parametrize("path,value", [
    (("inputs", "model", "sha256"), "sha256:" + "0" * 64),
    (("inputs", "prompts", "sha256"), "sha256:" + "1" * 64),
    (("project_version",), "v9.9.9"),
    (("config", "scale_mode"), "pow2-channel"),
    (("platform", "mxcsr", "ftz"), True),
])
def test_one_manifest_field_changed(pair, path, value):
    tmp, files, a, b = pair
    node = b
    for key in path[:-1]:
        node = node[key]
    old = node[path[-1]]
    node[path[-1]] = value
    p, r = join(tmp, a, b, "--no-rehash")
    refused(p, r, ".".join(path), "mismatch", json.dumps(old), json.dumps(value))


def test_kernel_evidence_dropped(pair):
    tmp, files, a, b = pair
    for mutate in (lambda m: m.pop("treatment"), lambda m: m.update(treatment=None),
                   lambda m: m["treatment"].update(kernel="")):
        bb = copy.deepcopy(b)
        mutate(bb)
        p, r = join(tmp, a, bb)
        refused(p, r, "treatment.kernel", "no kernel evidence")


def test_arm_label_swapped(pair):
    tmp, files, a, b = pair
    p, r = join(tmp, a, copy.deepcopy(a))
    refused(p, r, "arm", "treatment identical")
    bb = copy.deepcopy(b)
    bb["arm"] = a["arm"]  # the label says cutlass, the arm that ran says triton
    p, r = join(tmp, a, bb)
    refused(p, r, "treatment.arm", "inconsistent")


@pytest.mark.parametrize("bad", ["sha256:" + "A" * 64, "sha256:" + "0" * 63, "0" * 64, "md5:" + "0" * 32, 7])
def test_malformed_digest(pair, bad):
    tmp, files, a, b = pair
    b["inputs"]["model"]["sha256"] = bad
    p, r = join(tmp, a, b, "--no-rehash")
    refused(p, r, "inputs.model.sha256", "malformed")


def test_allow_unverified_proceeds_and_records(pair):
    tmp, files, a, b = pair
    b["inputs"]["model"]["sha256"] = "sha256:" + "0" * 64
    p, r = join(tmp, a, b, "--allow-unverified")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "--allow-unverified" in p.stdout and "VIOLATION" in p.stdout
    assert r["unverified"] is True and r["allow_unverified"] is True
    assert any(v.startswith("inputs.model.sha256: mismatch") for v in r["violations"]), r["violations"]
    assert r["check"]["verdict"] == "fail"  # the verdict stays honest


def test_bad_usage_exits_2(pair):
    tmp, files, a, b = pair
    p, _ = join(tmp, a, b, "--treatment", "created")
    assert p.returncode == 2, p.stdout + p.stderr
    (tmp / "broken.json").write_text("{ not json")
    p = run([tool("qconform"), "join", tmp / "broken.json", tmp / "broken.json"], check=False)
    assert p.returncode == 2 and "broken.json" in p.stderr, p.stderr
