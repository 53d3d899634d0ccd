"""The operands' two digests against Python's hashlib: `predict` records the file's plain SHA-256 and its
tree digest (docs/formats.md, "Tree digest": SHA-256 of each 4 KiB leaf, then of a fixed header, the leaf
size, the file size and the leaves' digests), recomputed here from that definition, and from the earlier
definition (64 MiB pieces) for predictions written before it; a pinned `verify` of a byte-identical copy
reports the copy's plain digest (also from predictions with an earlier tree digest), and of a file one byte
apart refuses the predictions naming the tree digest."""
import hashlib
import json
import os
import shutil
import struct

from conftest import run, tool

LEAF = 4096


def tree_digest(data, leaf=LEAF, version=b"v2"):
    pieces = [data[i:i + leaf] for i in range(0, max(len(data), 1), leaf)] or [b""]
    header = b"qconform sha256-tree " + version + b"\0" + struct.pack("<QQ", leaf, len(data))
    return "sha256-tree:" + hashlib.sha256(header + b"".join(hashlib.sha256(p).digest() for p in pieces)).hexdigest()


def test_predict_records_both_digests_and_verify_carries_the_plain_one(tmp_path):
    ops = tmp_path / "ops.safetensors"
    run([tool("qconform"), "synth", "--shapes", "64x8192x8200", "--seed", "2", "--out", ops])
    data = ops.read_bytes()
    assert len(data) % LEAF != 0 and len(data) > (64 << 20), len(data)  # the last leaf short; two earlier pieces
    pred = tmp_path / "p.json"
    out = run([tool("qconform"), "predict", ops, "--out", pred, "--quiet"]).stdout
    pin = next(line.split()[1] for line in out.splitlines() if line.startswith("pin: "))
    recorded = json.loads(pred.read_text())["operands"]
    assert recorded["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert recorded["sha256_tree"] == tree_digest(data)
    assert tree_digest(b"") == "sha256-tree:" + hashlib.sha256(
        b"qconform sha256-tree v2\0" + struct.pack("<QQ", LEAF, 0) + hashlib.sha256(b"").digest()).hexdigest()

    copy = tmp_path / "copy.safetensors"
    shutil.copyfile(ops, copy)
    result = tmp_path / "v.json"
    run([tool("qconform"), "verify", copy, "--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--predictions", pred,
         "--pin", pin, "--json", result])
    assert json.loads(result.read_text())["operands"]["sha256"] == "sha256:" + hashlib.sha256(copy.read_bytes()).hexdigest()

    # Predictions written under the earlier tree definition (64 MiB pieces): their tree digest is no file's
    # today, so the plain SHA-256 decides, and it is the copy's.
    old = json.loads(pred.read_text())
    old["operands"]["sha256_tree"] = tree_digest(data, 64 << 20, b"v1")
    assert old["operands"]["sha256_tree"] != recorded["sha256_tree"]
    old_pred = tmp_path / "p_v1.json"
    old_pred.write_text(json.dumps(old))
    old_pin = "sha256:" + hashlib.sha256(old_pred.read_bytes()).hexdigest()
    result_old = tmp_path / "v_old.json"
    out = run([tool("qconform"), "verify", copy, "--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--predictions",
               old_pred, "--pin", old_pin, "--json", result_old, "--timings"]).stdout
    assert "their tree digest is not the predictions'" in out, out
    assert json.loads(result_old.read_text())["operands"]["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()

    changed = bytearray(data)
    changed[-1] ^= 0x01  # the last weight code: still a valid file, one byte apart
    other = tmp_path / "other.safetensors"
    other.write_bytes(bytes(changed))
    p = run([tool("qconform"), "verify", other, "--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--predictions", pred,
             "--pin", pin, "--json", tmp_path / "v2.json"], check=False)
    assert p.returncode == 2, p.stderr
    assert "field `operands.sha256_tree`: expected " + tree_digest(bytes(changed)) in p.stderr, p.stderr
    assert "predictions were made from other operands (field `operands.sha256`: expected " in p.stderr
    assert not (tmp_path / "v2.json").exists()


def test_digest_record_gives_verify_the_plain_digest_of_the_same_bytes(tmp_path):
    """docs/formats.md, "Digest record": the first verify reads both digests and records the pair under the
    tree digest; the second finds it there (its --timings say so) and reports the same plain digest, hashlib's;
    a file one byte apart misses the record and reports its own."""
    ops = tmp_path / "ops.safetensors"
    run([tool("qconform"), "synth", "--shapes", "64x8192x8200", "--seed", "3", "--out", ops])
    data = ops.read_bytes()
    record = tmp_path / "record"
    env = dict(os.environ, QC_DIGEST_RECORD=str(record))
    arms = ["--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--timings"]

    def verify(path, name):
        out = run([tool("qconform"), "verify", path, *arms, "--json", tmp_path / name], env=env).stdout
        return out, json.loads((tmp_path / name).read_text())

    first, j1 = verify(ops, "v1.json")
    assert "found in the digest record" not in first
    assert (record / tree_digest(data).split(":")[1]).read_text() == "sha256:" + hashlib.sha256(data).hexdigest() + "\n"
    second, j2 = verify(ops, "v2.json")
    assert "its tree digest found in the digest record" in second, second
    for j in (j1, j2):
        j.pop("seconds", None)
        j.pop("wall_seconds", None)
    assert j1 == j2
    assert j2["operands"]["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()

    changed = bytearray(data)
    changed[-1] ^= 0x01
    other = tmp_path / "other.safetensors"
    other.write_bytes(bytes(changed))
    third, j3 = verify(other, "v3.json")
    assert "found in the digest record" not in third
    assert j3["operands"]["sha256"] == "sha256:" + hashlib.sha256(bytes(changed)).hexdigest()
