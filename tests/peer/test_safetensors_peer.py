"""qconform's safetensors and .npy I/O against the real peers: the Python `safetensors` library
(Rust core) and numpy (with ml_dtypes for bf16/fp8).

Our side is driven through `build/tests/qc_safetensors` (tests/tools/qc_safetensors.cpp):
`dump FILE` prints per-tensor dtype, shape and sha256 of the bytes; `copy IN OUT` reads and
rewrites; `pattern OUT` / `pattern-npy DIR` write tensors whose bytes follow a formula that this
file re-implements independently.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_safetensors_peer.py
"""
import hashlib
import io
import json
import pathlib
import random
import struct

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as stnp

from conftest import REPO, run, tool

# numpy dtype -> safetensors name, for every dtype qconform supports (our short name in the comment).
DTYPES = [
    (np.uint8, "U8"),  # u8
    (np.int8, "I8"),  # i8
    (np.int16, "I16"),  # i16
    (np.int32, "I32"),  # i32
    (np.int64, "I64"),  # i64
    (np.uint16, "U16"),  # u16
    (np.uint32, "U32"),  # u32
    (np.uint64, "U64"),  # u64
    (np.float16, "F16"),  # f16
    (ml_dtypes.bfloat16, "BF16"),  # bf16
    (np.float32, "F32"),  # f32
    (np.float64, "F64"),  # f64
    (ml_dtypes.float8_e4m3fn, "F8_E4M3"),  # e4m3
    (ml_dtypes.float8_e5m2, "F8_E5M2"),  # e5m2
    (np.bool_, "BOOL"),  # bool
]
OPAQUE = {"BF16": "bf16", "F8_E4M3": "e4m3", "F8_E5M2": "e5m2"}


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def random_array(rng, dtype, shape):
    """Random bit patterns (NaNs, infinities and subnormals included for float types)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8).tobytes()
    return np.frombuffer(raw, dtype=dt).reshape(shape).copy()


def dump(path, *extra):
    out = run([tool("qc_safetensors"), "dump", path, *extra])
    return json.loads(out.stdout)


def raw_tensors(path):
    """The library's own view of a file: name -> (dtype, shape, bytes), no numpy conversion."""
    with open(path, "rb") as f:
        return {name: (v["dtype"], list(v["shape"]), bytes(v["data"])) for name, v in safetensors.deserialize(f.read())}


def python_file(tmp_path, rng, metadata):
    tensors = {}
    for i, (dtype, st_name) in enumerate(DTYPES):
        tensors[f"t{i:02d}.{st_name.lower()}"] = random_array(rng, dtype, (5, 7))
    tensors["scalar.f32"] = random_array(rng, np.float32, ())
    tensors["empty.bf16"] = random_array(rng, ml_dtypes.bfloat16, (0, 3))
    tensors["vector.i8"] = random_array(rng, np.int8, (33,))
    tensors["layer0.w_q"] = random_array(rng, np.int8, (16, 64))
    path = tmp_path / "python.safetensors"
    stnp.save_file(tensors, str(path), metadata=metadata)
    return path, tensors


# ------------------------------------------------------------------------- safetensors

def test_python_written_files_read_bit_exactly(tmp_path):
    rng = np.random.default_rng(20240501)
    meta = {"source": "peer test é \"quoted\"\n"}
    path, tensors = python_file(tmp_path, rng, meta)
    got = dump(path)
    assert got["format"] == "safetensors"
    assert got["metadata"] == meta
    by_name = {t["name"]: t for t in got["tensors"]}
    assert sorted(by_name) == sorted(tensors)
    st_names = dict((np.dtype(d).name, s) for d, s in DTYPES)
    for name, arr in tensors.items():
        t = by_name[name]
        assert t["dtype"] == st_names[arr.dtype.name], name
        assert t["shape"] == list(arr.shape), name
        assert t["nbytes"] == arr.nbytes, name
        assert t["sha256"] == sha(arr.tobytes()), f"{name}: bytes differ"
    # File order is offset order, which the library's writer chose.
    offsets = json.loads(path.read_bytes()[8:8 + struct.unpack("<Q", path.read_bytes()[:8])[0]])
    offsets.pop("__metadata__", None)
    expected_order = sorted(offsets, key=lambda k: (offsets[k]["data_offsets"], k))
    assert [t["name"] for t in got["tensors"]] == expected_order


def test_qconform_rewrite_is_byte_identical_to_python(tmp_path):
    rng = np.random.default_rng(7)
    for meta in (None, {"source": "one key"}):
        path, _ = python_file(tmp_path, rng, meta)
        out = tmp_path / "copy.safetensors"
        run([tool("qc_safetensors"), "copy", path, out])
        assert out.read_bytes() == path.read_bytes(), f"metadata={meta}: our writer differs from the library's"


def test_qconform_rewrite_with_several_metadata_keys(tmp_path):
    # The library writes `__metadata__` in Rust HashMap order (random per process); we sort the
    # keys. Everything else is byte-identical; the library reads our file back exactly.
    rng = np.random.default_rng(8)
    meta = {"b": "2", "a": "1", "c": "3", "zz": ""}
    path, tensors = python_file(tmp_path, rng, meta)
    out = tmp_path / "copy.safetensors"
    run([tool("qc_safetensors"), "copy", path, out])
    ours, theirs = out.read_bytes(), path.read_bytes()
    assert len(ours) == len(theirs)
    n = struct.unpack("<Q", theirs[:8])[0]
    assert ours[:8] == theirs[:8]
    assert json.loads(ours[8:8 + n]) == json.loads(theirs[8:8 + n])
    assert ours[8 + n:] == theirs[8 + n:]
    with safetensors.safe_open(str(out), "numpy") as f:
        assert f.metadata() == meta
    assert raw_tensors(out) == raw_tensors(path)
    for name, arr in tensors.items():
        assert raw_tensors(out)[name][2] == arr.tobytes()


def pattern_bytes(k, st_name, itemsize):
    """Independent re-implementation of `qc_safetensors pattern`: byte i = (7 i + 13 k) mod 256."""
    i = np.arange(17 * 3 * itemsize, dtype=np.int64)
    v = ((7 * i + 13 * k) % 256).astype(np.uint8)
    if st_name == "BOOL":
        v = v % 2
    return v.tobytes()


# The order of qc::kAllDTypes (src/core/tensor.hpp), which the pattern formula uses.
ALL_DTYPES_ORDER = ["U8", "I8", "I16", "I32", "I64", "F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "BOOL",
                    "U16", "U32", "U64"]
SHORT = {"U8": "u8", "I8": "i8", "I16": "i16", "I32": "i32", "I64": "i64", "F16": "f16", "BF16": "bf16",
         "F32": "f32", "F64": "f64", "F8_E4M3": "e4m3", "F8_E5M2": "e5m2", "BOOL": "bool", "U16": "u16",
         "U32": "u32", "U64": "u64"}
NP_OF = {s: d for d, s in DTYPES}


def test_qconform_written_files_read_by_python(tmp_path):
    path = tmp_path / "pattern.safetensors"
    run([tool("qc_safetensors"), "pattern", path])
    got = raw_tensors(path)
    with safetensors.safe_open(str(path), "numpy") as f:
        assert f.metadata() == {"writer": "qconform", "note": "every dtype, \"quoted\"\n"}
    assert len(got) == len(ALL_DTYPES_ORDER) + 2
    for k, st_name in enumerate(ALL_DTYPES_ORDER):
        dtype, shape, data = got[f"pattern.{SHORT[st_name]}"]
        assert dtype == st_name and shape == [17, 3]
        assert data == pattern_bytes(k, st_name, np.dtype(NP_OF[st_name]).itemsize), st_name
    dtype, shape, data = got["all.bf16"]
    assert (dtype, shape) == ("BF16", [256, 256])
    assert data == np.arange(65536, dtype="<u2").tobytes()
    dtype, shape, data = got["all.e4m3"]
    assert (dtype, shape) == ("F8_E4M3", [256])
    assert data == bytes(range(256))
    # Every dtype numpy understands natively also loads through the high-level API (bf16 and fp8
    # make the library's numpy loader raise, so they are checked through the raw bytes above).
    with safetensors.safe_open(str(path), "numpy") as f:
        for k, st_name in enumerate(ALL_DTYPES_ORDER):
            if st_name in OPAQUE:
                continue
            arr = f.get_tensor(f"pattern.{SHORT[st_name]}")
            assert arr.dtype == np.dtype(NP_OF[st_name])
            assert arr.tobytes() == pattern_bytes(k, st_name, arr.dtype.itemsize)
    # And the library re-serializes what it read to exactly our bytes (metadata aside, see above).
    ours = path.read_bytes()
    n = struct.unpack("<Q", ours[:8])[0]
    again = stnp.save({k: np.frombuffer(v[2], dtype=NP_OF[v[0]]).reshape(v[1]) for k, v in got.items()})
    m = struct.unpack("<Q", again[:8])[0]
    header = json.loads(ours[8:8 + n])
    header.pop("__metadata__")
    assert json.loads(again[8:8 + m]) == header
    assert ours[8 + n:] == bytes(again[8 + m:])


# ------------------------------------------------------------------------- malformed files

def st_file(header: str, data: bytes = b"", pad: bool = True) -> bytes:
    h = header.encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


HAND_CASES = {
    "valid": st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(8)),
    "trailing byte": st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(9)),
    "short data": st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(7)),
    "gap": st_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}', bytes(12)),
    "start not 0": st_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', bytes(8)),
    "overlap": st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', bytes(8)),
    "unsorted entries": st_file('{"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', bytes(8)),
    "leading whitespace": st_file(' \n{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(8)),
    "no padding": st_file('{"a":{"dtype":"I8","shape":[3],"data_offsets":[0,3]}}', bytes(3), pad=False),
    "nul padding": struct.pack("<Q", 8) + b"{}\0\0\0\0\0\0",
    "scalar": st_file('{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}', bytes(4)),
    "zero size": st_file('{"a":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]}}'),
    "extra field": st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}', bytes(8)),
    "missing offsets": st_file('{"a":{"dtype":"F32","shape":[2]}}', bytes(8)),
    "metadata int": st_file('{"__metadata__":{"k":1}}'),
    "metadata null": st_file('{"__metadata__":null}'),
    "metadata nested": st_file('{"__metadata__":{"k":{"a":"b"}}}'),
    "empty": st_file("{}"),
    "shape float": st_file('{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}', bytes(8)),
    "shape negative": st_file('{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', bytes(8)),
    "three offsets": st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}}', bytes(8)),
    "lowercase dtype": st_file('{"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}', bytes(8)),
    "array header": st_file("[]"),
    "invalid utf8": struct.pack("<Q", 8) + b'{"\xff":1}  ',
    "header length 0": struct.pack("<Q", 0),
    "7 bytes": bytes(7),
    "huge header length": struct.pack("<Q", 100_000_001) + b"{}",
    "header past eof": struct.pack("<Q", 1000) + b"{}",
    "trailing json": st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}x', bytes(8)),
    "shape overflow": st_file('{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}'),
    "size mismatch": st_file('{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}', bytes(20)),
    "offsets out of range": st_file('{"a":{"dtype":"I8","shape":[16],"data_offsets":[0,16]}}', bytes(8)),
    "begin after end": st_file('{"a":{"dtype":"I8","shape":[0],"data_offsets":[4,2]}}', bytes(4)),
    "metadata-only dtype key": st_file('{"__metadata__":{"dtype":"F32"}}'),
    "empty name": st_file('{"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(8)),
    "unsupported C64": st_file('{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}', bytes(8)),
    "duplicate tensor": st_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', bytes(4)),
    "duplicate metadata key": st_file('{"__metadata__":{"k":"1","k":"2"}}'),
}

# Where qconform is deliberately stricter than the library: it reads fewer dtypes, and it refuses
# duplicate JSON keys (the library silently keeps the last one: an ambiguous operands file).
ALLOWED_STRICTER = ("does not support", "unique keys")


def python_verdict(data: bytes):
    try:
        return True, {k: (v["dtype"], list(v["shape"]), sha(bytes(v["data"]))) for k, v in safetensors.deserialize(data)}
    except Exception as e:  # noqa: BLE001 - any library error is a rejection
        return False, str(e)


def qconform_verdict(path: pathlib.Path):
    out = run([tool("qc_safetensors"), "dump", path], check=False)
    if out.returncode == 0:
        return True, {t["name"]: (t["dtype"], t["shape"], t["sha256"]) for t in json.loads(out.stdout)["tensors"]}
    assert out.returncode == 2, f"{path.name}: exit {out.returncode} (expected 0 or 2): {out.stderr}"
    return False, out.stderr


def compare_verdicts(label, data, tmp_path):
    path = tmp_path / "case.safetensors"
    path.write_bytes(data)
    ok_py, py = python_verdict(data)
    ok_qc, qc = qconform_verdict(path)
    if ok_py and ok_qc:
        assert py == qc, f"{label}: both accept but read different tensors"
    elif ok_py and not ok_qc:
        assert any(s in qc for s in ALLOWED_STRICTER), f"{label}: library accepts, qconform rejects: {qc}"
    else:
        assert ok_py == ok_qc, f"{label}: library {'accepts' if ok_py else 'rejects: ' + py}, qconform " + (
            "accepts" if ok_qc else "rejects")
    return ok_py, ok_qc


def test_malformed_files_accepted_and_rejected_like_the_library(tmp_path):
    verdicts = {label: compare_verdicts(label, data, tmp_path) for label, data in HAND_CASES.items()}
    # The cases where we are stricter are really exercised.
    assert verdicts["duplicate tensor"] == (True, False)
    assert verdicts["unsupported C64"] == (True, False)
    assert verdicts["gap"] == (False, False) and verdicts["trailing byte"] == (False, False)


def test_mutated_files_accepted_and_rejected_like_the_library(tmp_path):
    rng = np.random.default_rng(3)
    path, _ = python_file(tmp_path, rng, {"source": "mutation seed"})
    seed_bytes = path.read_bytes()
    n = struct.unpack("<Q", seed_bytes[:8])[0]
    header_end = 8 + n
    r = random.Random(12345)
    accepted = rejected = 0
    for i in range(250):
        b = bytearray(seed_bytes)
        kind = i % 5
        if kind == 0:  # flip a header byte to a JSON-significant character
            pos = r.randrange(8, header_end)
            b[pos] = ord(r.choice('0123456789,:[]{}" -eE.'))
        elif kind == 1:  # change a digit inside the header (offsets and shapes)
            digits = [j for j in range(8, header_end) if chr(b[j]).isdigit()]
            b[r.choice(digits)] = ord(str(r.randrange(10)))
        elif kind == 2:  # truncate or extend
            cut = r.randrange(0, len(b) + 16)
            b = b[:cut] if cut <= len(b) else b + bytes(cut - len(b))
        elif kind == 3:  # corrupt the length field
            b[r.randrange(0, 8)] = r.randrange(256)
        else:  # random byte anywhere in the header
            b[r.randrange(8, header_end)] = r.randrange(256)
        ok_py, ok_qc = compare_verdicts(f"mutation {i} (kind {kind})", bytes(b), tmp_path)
        accepted += ok_qc
        rejected += not ok_qc
    assert accepted > 10 and rejected > 100, (accepted, rejected)


def test_fuzz_corpus_seeds_agree_with_the_library(tmp_path):
    corpus = sorted((REPO / "tests" / "fuzz" / "corpus").glob("*.safetensors"))
    assert corpus, "tests/fuzz/corpus is empty"
    for seed in corpus:
        compare_verdicts(f"corpus {seed.name}", seed.read_bytes(), tmp_path)


# ------------------------------------------------------------------------- .npy

def npy_bytes(arr, **kw):
    f = io.BytesIO()
    np.save(f, arr, **kw)
    return f.getvalue()


def test_numpy_written_npy_read_bit_exactly(tmp_path):
    rng = np.random.default_rng(11)
    for dtype, st_name in DTYPES:
        for shape in [(4, 6), (), (0, 2), (3,), (2, 1, 3)]:
            arr = random_array(rng, dtype, shape)
            path = tmp_path / "a.npy"
            path.write_bytes(npy_bytes(arr))
            extra = ["--opaque", OPAQUE[st_name]] if st_name in OPAQUE else []
            t = dump(path, *extra)["tensors"][0]
            assert (t["dtype"], t["shape"], t["sha256"]) == (st_name, list(shape), sha(arr.tobytes())), (st_name, shape)
            # qconform's writer produces exactly np.save's bytes.
            out = tmp_path / "b.npy"
            run([tool("qc_safetensors"), "copy", path, out, *extra])
            expected = path.read_bytes()
            if st_name == "F8_E5M2":
                # Named difference: np.save writes ml_dtypes float8_e5m2 as `<f1`, which np.load
                # rejects; we write `<V1` (as np.save does for float8_e4m3fn) so numpy can load it.
                expected = expected.replace(b"'descr': '<f1'", b"'descr': '<V1'", 1)
            assert out.read_bytes() == expected, (st_name, shape)


def test_npy_fortran_order_big_endian_and_versions(tmp_path):
    rng = np.random.default_rng(12)
    base = random_array(rng, np.int32, (3, 4, 5))
    cases = {
        "fortran": np.asfortranarray(base),
        "big endian": base.astype(">i4"),
        "big endian fortran": np.asfortranarray(base.astype(">i4")),
    }
    for label, arr in cases.items():
        path = tmp_path / "f.npy"
        path.write_bytes(npy_bytes(arr))
        t = dump(path)["tensors"][0]
        assert (t["dtype"], t["shape"]) == ("I32", [3, 4, 5]), label
        assert t["sha256"] == sha(np.ascontiguousarray(base).astype("<i4").tobytes()), label
    for version in [(1, 0), (2, 0), (3, 0)]:
        f = io.BytesIO()
        np.lib.format.write_array(f, base, version=version)
        path = tmp_path / "v.npy"
        path.write_bytes(f.getvalue())
        assert dump(path)["tensors"][0]["sha256"] == sha(base.tobytes()), version


def test_qconform_written_npy_read_by_numpy(tmp_path):
    run([tool("qc_safetensors"), "pattern-npy", tmp_path])
    for k, st_name in enumerate(ALL_DTYPES_ORDER):
        path = tmp_path / f"pattern.{SHORT[st_name]}.npy"
        arr = np.load(path)
        if st_name in OPAQUE:
            assert arr.dtype.kind == "V" and arr.dtype.itemsize == np.dtype(NP_OF[st_name]).itemsize
            arr = arr.view(NP_OF[st_name])
        else:
            assert arr.dtype == np.dtype(NP_OF[st_name]), st_name
        assert arr.shape == (17, 3)
        assert arr.tobytes() == pattern_bytes(k, st_name, arr.dtype.itemsize), st_name
        # Byte-identical to what np.save writes for the same array (e5m2: for the same bytes viewed
        # as float8_e4m3fn, see the named difference above).
        same = arr.view(ml_dtypes.float8_e4m3fn) if st_name == "F8_E5M2" else arr
        assert path.read_bytes() == npy_bytes(same), st_name
    bf16 = np.load(tmp_path / "all.bf16.npy").view(ml_dtypes.bfloat16)
    assert bf16.view(np.uint16).ravel().tolist() == list(range(65536))


def test_npy_rejections(tmp_path):
    path = tmp_path / "bad.npy"
    good = npy_bytes(np.arange(6, dtype=np.float32))
    for label, data, fragment in [
        ("truncated data", good[:-1], "expected 24 bytes"),
        ("trailing data", good + b"\0", "expected 24 bytes"),
        ("complex", npy_bytes(np.zeros(2, np.complex64)), "descr"),
        ("structured", npy_bytes(np.zeros(2, dtype=[("a", "<f4")])), "descr"),
        ("bf16 without dtype", npy_bytes(np.zeros(2, ml_dtypes.bfloat16)), "opaque"),
    ]:
        path.write_bytes(data)
        out = run([tool("qc_safetensors"), "dump", path], check=False)
        assert out.returncode == 2, label
        assert fragment in out.stderr and "bad.npy" in out.stderr, (label, out.stderr)


# ------------------------------------------------------------------------- CLI

def test_inspect_verb(tmp_path):
    rng = np.random.default_rng(5)
    arrays = {"l0.a_q": random_array(rng, np.int8, (4, 8)), "l0.a_scale": np.full(4, 0.5, np.float32)}
    path = tmp_path / "ops.safetensors"
    stnp.save_file(arrays, str(path), metadata={"source": "synth seed=5"})
    out = run([tool("qconform"), "inspect", path])
    assert "l0.a_q" in out.stdout and "i8" in out.stdout and "[4, 8]" in out.stdout
    assert "synth seed=5" in out.stdout
    assert sha(arrays["l0.a_q"].tobytes())[:12] in out.stdout
    report = tmp_path / "inspect.json"
    run([tool("qconform"), "inspect", path, "--json", report])
    j = json.loads(report.read_text())
    assert {t["name"]: t["sha256"] for t in j["tensors"]} == {k: "sha256:" + sha(v.tobytes()) for k, v in arrays.items()}
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(HAND_CASES["overlap"])
    out = run([tool("qconform"), "inspect", bad], check=False)
    assert out.returncode == 2
    assert "bad.safetensors" in out.stderr and "tensor `b`" in out.stderr and "overlapping" in out.stderr
    npy = tmp_path / "x.npy"
    npy.write_bytes(npy_bytes(np.arange(10, dtype=np.int16)))
    out = run([tool("qconform"), "inspect", npy])
    assert "i16" in out.stdout and "[10]" in out.stdout
