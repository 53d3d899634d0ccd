"""The Python binding (`python/`): results equal the CLI's and independent NumPy implementations,
a NumPy callable arm equals `cpu:vllm-triton` bit for bit, errors are `qconform.Error` with the
C++ message, and no bad input crashes the process.

Where the extension comes from, in order:
1. `QCONFORM_PYTHON_BUILD`: a directory containing the `qconform` package with its built module;
2. `$QCONFORM_BUILD/python` (a build configured with -DQCONFORM_BUILD_PYTHON=ON);
3. otherwise `pip install --no-build-isolation --target` into `$QCONFORM_BUILD/python-pip`
   (compiles the core once; needs `nanobind` and `scikit-build-core`, else SKIPPED with the reason).

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_python_binding.py
"""
import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from conftest import BUILD, REPO, run, tool


def _module_dirs():
    env = os.environ.get("QCONFORM_PYTHON_BUILD")
    if env:
        return [pathlib.Path(env)], True
    return [BUILD / "python", BUILD / "python-pip"], False


def _has_module(d: pathlib.Path) -> bool:
    return any((d / "qconform").glob("_qconform*.so")) or any((d / "qconform").glob("_qconform*.pyd"))


def _pip_build(target: pathlib.Path) -> None:
    for mod, pip_name in (("nanobind", "nanobind"), ("scikit_build_core", "scikit-build-core")):
        try:
            importlib.import_module(mod)
        except ImportError:
            pytest.skip(f"the Python extension is not built and {pip_name} is not installed: "
                        f"`python3 -m pip install nanobind scikit-build-core` (scripts/install-deps.sh should), "
                        f"or build with -DQCONFORM_BUILD_PYTHON=ON")
    env = dict(os.environ)
    if shutil.which("ccache"):
        env.setdefault("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
        env.setdefault("CMAKE_C_COMPILER_LAUNCHER", "ccache")
    cmd = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--upgrade", "--target",
           str(target), "-C", f"build-dir={BUILD / 'python-pip-build'}",
           "-C", "cmake.define.QCONFORM_WITH_CUDA=OFF", str(REPO / "python")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        pytest.fail(f"building the extension failed ({' '.join(cmd)}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")


@pytest.fixture(scope="session")
def qc():
    dirs, explicit = _module_dirs()
    found = next((d for d in dirs if _has_module(d)), None)
    if found is None:
        if explicit:
            pytest.fail(f"QCONFORM_PYTHON_BUILD={dirs[0]} has no qconform/_qconform*.so")
        found = BUILD / "python-pip"
        _pip_build(found)
    sys.path.insert(0, str(found))
    import qconform

    assert pathlib.Path(qconform.__file__).parent == found / "qconform", qconform.__file__
    return qconform


# ---- independent NumPy implementations ------------------------------------------------------------

def bf16_bits(x):
    """float32 -> bf16 bit patterns with RNE, integer arithmetic (no ml_dtypes, no qconform)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def vllm_triton_numpy(a_q, a_scale, w_q, w_scale, bias):
    """vLLM triton_scaled_mm order with every fp32 rounding explicit."""
    acc = a_q.astype(np.int64) @ w_q.astype(np.int64).T
    t = acc.astype(np.float32) * a_scale.astype(np.float32)[:, None]
    with np.errstate(over="ignore"):  # the boundary suite probes overflow on purpose
        t = t * w_scale.astype(np.float32)[None, :]
    y = bf16_bits(t)
    if bias is not None:
        y = bf16_bits(bits_to_f32(y) + bits_to_f32(bias)[None, :])
    return y


def ordered(bits):
    """bf16 bit patterns mapped to a monotone integer line (for ulp distances)."""
    b = np.asarray(bits, dtype=np.uint16).astype(np.int64)
    return np.where(b & 0x8000, -(b & 0x7FFF), b)


def make_layer(rng, name, m, n, k, bias=False, extreme=False):
    a_q = rng.integers(-127, 128, size=(m, k), dtype=np.int8)
    w_q = rng.integers(-127, 128, size=(n, k), dtype=np.int8)
    if extreme:
        a_q[0, :] = -128
        w_q[0, :] = -128
    layer = {"name": name, "a_q": a_q,
             "a_scale": (rng.random(m, dtype=np.float32) * 0.02 + 1e-3).astype(np.float32),
             "w_q": w_q,
             "w_scale": (rng.random(n, dtype=np.float32) * 0.002 + 1e-4).astype(np.float32)}
    if bias:
        layer["bias"] = bf16_bits(rng.standard_normal(n).astype(np.float32))
    return layer


def describe_first_diff(y, ref):
    idx = np.argwhere(y != ref)
    if idx.size == 0:
        return "no difference"
    r, c = idx[0]
    return (f"{len(idx)} differ; first at [{r},{c}]: got 0x{int(y[r, c]):04x} ({bits_to_f32(y[r, c])}), "
            f"want 0x{int(ref[r, c]):04x} ({bits_to_f32(ref[r, c])})")


# ---- the core on arrays ------------------------------------------------------------------------------

def test_arm_info_names_the_declared_accumulation_model(qc):
    # FP8 arms declare their accumulation model (docs/accumulation.md); INT8 arms declare none.
    fp8 = [label for label in qc.arms() if label.startswith("cpu:fp8-")]
    assert "cpu:fp8-hopper-fp8-chain" in fp8 and "cpu:fp8-hopper-fp8-promote4" in fp8, fp8
    for label in fp8:
        assert qc.arm(label).info["accumulation_model"] == label.removeprefix("cpu:fp8-")
    assert qc.arm("cpu:vllm-cutlass").info["accumulation_model"] == ""


# ---- FP8 callables that declare an accumulation model (docs/python.md, docs/accumulation.md) --------

def e4m3_codes(rng, shape):
    """e4m3fn codes (uint8) of N(0, 2²) values, rounded by ml_dtypes (not by qconform)."""
    return (rng.standard_normal(shape) * 2).astype(np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def exact_numpy(a, w):
    """The `exact` model independently: e4m3 products and sums are exact in fp64 (multiples of
    2^-18 below 2^35 for K <= 2^17, whatever order BLAS uses), then one RNE rounding to fp32."""
    fa = a.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    fw = w.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return (fa @ fw.T).astype(np.float32)


def sequential_numpy(a, w):
    """The `sequential` model: d = ((p0 + p1) + p2) + ... in fp32 from +0 (products exact in fp32)."""
    fa = a.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    fw = w.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    d = np.zeros((a.shape[0], w.shape[0]), dtype=np.float32)
    for k in range(a.shape[1]):
        d = d + np.outer(fa[:, k], fw[:, k]).astype(np.float32)
    return d


def test_fp8_callables_declaring_a_model_equal_the_cpu_model_bit_for_bit(qc):
    rng = np.random.default_rng(14)
    fp8_epilogue = qc.arm("cpu:fp8-exact").info["epilogue"]
    for model, fn, k in [("exact", exact_numpy, 2048), ("sequential", sequential_numpy, 256)]:
        a, w = e4m3_codes(rng, (8, k)), e4m3_codes(rng, (24, k))
        seen = []

        def kernel(a_in, w_in, fn=fn, seen=seen):
            seen.append((a_in.dtype, a_in.shape, w_in.dtype, w_in.shape))
            return fn(a_in, w_in)

        arm = qc.arm(kernel, accumulation_model=model, name=f"numpy:fp8-{model}")
        assert arm.info["accumulation_model"] == model and arm.info["epilogue"] == fp8_epilogue, arm.info
        got = qc.fp8_accumulate(arm, a, w)
        want = qc.fp8_accumulate(f"cpu:fp8-{model}", a, w)["d"]
        assert seen[-1] == (np.uint8, (8, k), np.uint8, (24, k)), seen
        assert got["d"].dtype == np.float32 and got["d"].shape == (8, 24)
        diff = np.argwhere(got["d"].view(np.uint32) != want.view(np.uint32))
        assert diff.size == 0, (f"{model}: {len(diff)} outputs differ, first d{tuple(diff[0])}: callable "
                                f"{got['d'][tuple(diff[0])]!r}, cpu:fp8-{model} {want[tuple(diff[0])]!r}")
        assert got["record"]["accumulation_model"] == model and got["record"]["arm"] == f"numpy:fp8-{model}"
        # The comparison can fail: the Hopper chain model differs from this one on these operands.
        chain = qc.fp8_accumulate("cpu:fp8-hopper-fp8-chain", a, w)["d"]
        assert not np.array_equal(chain.view(np.uint32), want.view(np.uint32)), model
        # ml_dtypes FP8 arrays are read as their codes.
        again = qc.fp8_accumulate(arm, a.view(ml_dtypes.float8_e4m3fn), w.view(ml_dtypes.float8_e4m3fn))["d"]
        assert np.array_equal(again.view(np.uint32), want.view(np.uint32))

    # run(): an INT8 layer whose codes are e4m3 values goes through the callable, then the FP8 epilogue.
    layer = {"name": "fp8ish", "a_q": rng.integers(-16, 17, size=(5, 300), dtype=np.int8),
             "a_scale": (rng.random(5, dtype=np.float32) * 0.02 + 1e-3).astype(np.float32),
             "w_q": rng.integers(-16, 17, size=(7, 300), dtype=np.int8),
             "w_scale": (rng.random(7, dtype=np.float32) * 0.002 + 1e-4).astype(np.float32)}
    arm = qc.arm(exact_numpy, accumulation_model="exact")
    out = qc.run(arm, layer)
    ref = qc.run("cpu:fp8-exact", layer)
    assert np.array_equal(out["y"], ref["y"]), describe_first_diff(out["y"], ref["y"])
    assert out["record"]["extra"]["accumulation_model"] == "exact"
    assert out["acc"] is None


def test_fp8_callable_declarations_and_outputs_are_checked(qc):
    rng = np.random.default_rng(15)
    a, w = e4m3_codes(rng, (3, 64)), e4m3_codes(rng, (4, 64))
    with pytest.raises(qc.InputError, match="unknown accumulation model `hopper-fp9`"):
        qc.arm(exact_numpy, accumulation_model="hopper-fp9")
    with pytest.raises(qc.InputError, match="epilogue"):
        qc.arm(exact_numpy, accumulation_model="exact", epilogue="vllm-triton")
    with pytest.raises(qc.InputError, match="exposes_accumulator"):
        qc.arm(exact_numpy, accumulation_model="exact", exposes_accumulator=True)
    wrong_dtype = qc.arm(lambda a, w: exact_numpy(a, w).astype(np.float64), accumulation_model="exact")
    with pytest.raises(qc.InputError, match=r"output d .*expected dtype float32, found float64"):
        qc.fp8_accumulate(wrong_dtype, a, w)
    wrong_shape = qc.arm(lambda a, w: exact_numpy(a, w).T.copy(), accumulation_model="exact")
    with pytest.raises(qc.InputError, match=r"expected shape \[3,4\]"):
        qc.fp8_accumulate(wrong_shape, a, w)

    def refuses(a, w):
        raise qc.InputError("K must be a multiple of 128")

    with pytest.raises(qc.InputError, match="refuses FP8 GEMM 3x4x64: K must be a multiple of 128"):
        qc.fp8_accumulate(qc.arm(refuses, accumulation_model="exact"), a, w)
    with pytest.raises(qc.InputError, match="not an FP8 arm"):
        qc.fp8_accumulate("cpu:vllm-cutlass", a, w)
    with pytest.raises(qc.InputError, match="not an FP8 arm"):
        qc.fp8_accumulate(qc.arm(vllm_triton_numpy), a, w)
    bad = a.copy()
    bad[1, 2] = 0x7F  # e4m3fn NaN
    with pytest.raises(qc.InputError, match=r"a\[1,2\] = 0x7f"):
        qc.fp8_accumulate("cpu:fp8-exact", bad, w)
    with pytest.raises(qc.InputError, match="expected dtype uint8"):
        qc.fp8_accumulate("cpu:fp8-exact", a.astype(np.int8), w)


def test_exact_accumulate_equals_numpy_int64(qc):
    rng = np.random.default_rng(1)
    for m, n, k in [(1, 1, 1), (3, 5, 7), (17, 33, 1000), (64, 48, 4096)]:
        a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
        w = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
        ref = a.astype(np.int64) @ w.astype(np.int64).T
        acc = qc.exact_accumulate(a, w)
        assert acc.dtype == np.int32 and acc.shape == (m, n)
        assert np.array_equal(acc, ref), f"{m}x{n}x{k}: {np.argwhere(acc != ref)[:3]}"
        wide = qc.exact_accumulate(a, w, wide=True)
        assert wide.dtype == np.int64 and np.array_equal(wide, ref)
    # All-extreme operands: every product is (-128)(-128) = 2^14.
    k = 32768
    a = np.full((2, k), -128, dtype=np.int8)
    acc = qc.exact_accumulate(a, a)
    assert int(acc[0, 0]) == k * 16384 == 2**29
    # Beyond the INT32 proof K is accumulated in int64 automatically.
    k = 131072
    a = np.full((1, k), -128, dtype=np.int8)
    wide = qc.exact_accumulate(a, a)
    assert wide.dtype == np.int64 and int(wide[0, 0]) == 2**31
    with pytest.raises(qc.InputError, match="131071"):
        qc.exact_accumulate(a, a, wide=False)


def test_exact_accumulate_zero_copy_views_and_strided_inputs(qc):
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, size=(8, 64), dtype=np.int8)
    w = rng.integers(-128, 128, size=(64, 16), dtype=np.int8)  # stored [K,N]: w.T is a strided [N,K]
    ref = a.astype(np.int64) @ w.astype(np.int64)
    assert np.array_equal(qc.exact_accumulate(a, w.T), ref)
    assert np.array_equal(qc.exact_accumulate(a[:, ::2], np.ascontiguousarray(w.T)[:, ::2]),
                          a[:, ::2].astype(np.int64) @ w.T[:, ::2].astype(np.int64).T)
    ro = a.copy()
    ro.setflags(write=False)
    assert np.array_equal(qc.exact_accumulate(ro, w.T), ref)


def test_apply_epilogue_equals_numpy(qc):
    rng = np.random.default_rng(3)
    layer = make_layer(rng, "l", 32, 40, 256, bias=True)
    acc = layer["a_q"].astype(np.int64) @ layer["w_q"].astype(np.int64).T
    y = qc.apply_epilogue("vllm-triton", acc.astype(np.int32), layer["a_scale"], layer["w_scale"], layer["bias"])
    ref = vllm_triton_numpy(layer["a_q"], layer["a_scale"], layer["w_q"], layer["w_scale"], layer["bias"])
    assert y.dtype == np.uint16 and np.array_equal(y, ref), describe_first_diff(y, ref)
    y64 = qc.apply_epilogue("vllm-triton", acc, layer["a_scale"], layer["w_scale"], layer["bias"])
    assert np.array_equal(y64, ref)
    names = [e["name"] for e in qc.epilogues()]
    assert {"vllm-cutlass", "vllm-triton", "exact"} <= set(names)


def test_compare_equals_numpy_counts(qc):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((50, 60)).astype(np.float32)
    a = bf16_bits(x)
    b = a.copy()
    flat = b.reshape(-1)
    picks = rng.choice(flat.size, size=37, replace=False)
    flat[picks[:30]] += 1                          # one ulp (away from zero for positives, towards for negatives)
    flat[picks[30:35]] += 3                        # three ulps
    flat[picks[35]] = 0x7FC0                       # NaN
    flat[picks[36]] ^= 0x8000                      # sign flip
    c = qc.compare(a, b)
    diff = a != b
    assert c["total"] == a.size and c["bitwise_diff"] == int(diff.sum())
    finite = ~np.isnan(bits_to_f32(a)) & ~np.isnan(bits_to_f32(b))
    assert c["nan"] == [0, 1] and c["nonfinite_pairs"] == 1
    assert c["finite_pairs"] == int(finite.sum())
    dist = np.abs(ordered(a) - ordered(b))[finite]
    assert c["max_ulp"] == int(dist.max()), (c["max_ulp"], int(dist.max()))
    hist = {int(k): int(v) for k, v in zip(*np.unique(dist, return_counts=True))}
    assert {int(k): v for k, v in c["ulp_histogram"].items()} == hist
    # ml_dtypes bfloat16 arrays are read as the same bits, without a copy.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    c2 = qc.compare(a.view(ml_dtypes.bfloat16), b.view(ml_dtypes.bfloat16))
    assert c2 == c


# ---- operands ------------------------------------------------------------------------------------------

def test_save_operands_read_by_safetensors_and_back(qc, tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(5)
    layers = [make_layer(rng, "layers.0.q", 8, 24, 64, bias=True), make_layer(rng, "layers.1.q", 8, 16, 64)]
    path = tmp_path / "ops.safetensors"
    qc.save_operands(path, layers, {"source": "test"})
    tensors = safetensors_numpy.load_file(str(path))
    for l in layers:
        for key in ("a_q", "a_scale", "w_q", "w_scale"):
            assert np.array_equal(tensors[f"{l['name']}.{key}"].reshape(l[key].shape), l[key]), key
    assert np.array_equal(tensors["layers.0.q.bias"].view(np.uint16), layers[0]["bias"])
    back = qc.load_operands(path)
    assert [l["name"] for l in back] == ["layers.0.q", "layers.1.q"]
    assert back.sha256.startswith("sha256:") and back.metadata.get("source") == "test"
    for l, r in zip(layers, back):
        for key in ("a_q", "a_scale", "w_q", "w_scale"):
            assert np.array_equal(r[key], l[key]) and not r[key].flags.writeable
    assert np.array_equal(back[0]["bias"], layers[0]["bias"]) and back[1]["bias"] is None


def test_synth_equals_cli_synth(qc, tmp_path):
    path = tmp_path / "synth.safetensors"
    run([tool("qconform"), "synth", "--shapes", "tiny", "--m", "16", "--seed", "3", "--out", path])
    from_cli = qc.load_operands(path)
    ours = qc.synth("tiny", m=16, seed=3)
    assert len(ours) == len(from_cli)
    for x, y in zip(ours, from_cli):
        assert x["name"] == y["name"]
        for key in ("a_q", "a_scale", "w_q", "w_scale"):
            assert np.array_equal(x[key], y[key]), (x["name"], key)


# ---- verify: equal to the CLI ---------------------------------------------------------------------------

def _strip_volatile(doc):
    """Fields that legitimately differ between two processes built from different checkouts, and timings."""
    doc = json.loads(json.dumps(doc))
    for key in ("seconds", "wall_seconds"):
        doc.pop(key, None)
    for a in doc["arms"]:
        for key in ("library", "build"):
            a["record"].pop(key, None)
    return doc


def test_verify_equals_cli(qc, tmp_path):
    rng = np.random.default_rng(6)
    layers = [make_layer(rng, f"layers.{i}.proj", 24, 40, 512) for i in range(3)]
    path = tmp_path / "ops.safetensors"
    qc.save_operands(path, layers)
    out = tmp_path / "verify.json"
    r = run([tool("qconform"), "verify", path, "--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--m-sweep", "1,16,24",
             "--json", out], check=False)
    assert r.returncode in (0, 1), r.stderr
    cli = json.loads(out.read_text())
    ours = qc.verify("cpu:vllm-cutlass", "cpu:vllm-triton", path, m_sweep=[1, 16, 24])
    assert _strip_volatile(ours) == _strip_volatile(cli)
    # The same operands given as in-memory arrays: identical checks and runs (only the path differs).
    mem = qc.verify("cpu:vllm-cutlass", "cpu:vllm-triton", layers, m_sweep=[1, 16, 24])
    assert mem["checks"] == cli["checks"] and mem["runs"] == cli["runs"] and mem["total_real"] == cli["total_real"]
    assert mem["operands"]["path"] == "<python>"
    # The reference on the CPU explicitly: the same results; a GPU reference without a GPU is an input error.
    cpu = qc.verify("cpu:vllm-cutlass", "cpu:vllm-triton", layers, m_sweep=[1, 16, 24], reference="cpu")
    assert cpu["checks"] == cli["checks"] and cpu["runs"] == cli["runs"] and "host" in cpu["reference"]
    with pytest.raises(qc.InputError, match="reference"):
        qc.verify("cpu:vllm-cutlass", "cpu:vllm-triton", layers, reference="tpu")
    if "CUDA cores" not in cli["reference"]:  # no usable GPU here: asking for one is an input error
        r = run([tool("qconform"), "verify", path, "--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--reference", "gpu"],
                check=False)
        assert r.returncode == 2 and "--reference gpu: no usable CUDA device" in r.stderr, r.stderr


def test_predict_equals_cli(qc, tmp_path):
    rng = np.random.default_rng(7)
    layers = [make_layer(rng, "a", 16, 32, 2048, extreme=True), make_layer(rng, "b", 16, 32, 128)]
    path = tmp_path / "ops.safetensors"
    qc.save_operands(path, layers)
    out = tmp_path / "pred.json"
    run([tool("qconform"), "predict", path, "--out", out, "--quiet"])
    assert qc.predict(path) == json.loads(out.read_text())
    # max|acc| of the extreme layer: row 0 of a and w are all -128.
    p = qc.predict(layers)
    ref = np.abs(layers[0]["a_q"].astype(np.int64) @ layers[0]["w_q"].astype(np.int64).T).max()
    assert json.dumps(p).count(str(int(ref))) >= 1


# ---- Python callables as arms -----------------------------------------------------------------------------

def test_numpy_callable_equals_cpu_vllm_triton_bit_for_bit(qc):
    rng = np.random.default_rng(8)
    for bias in (False, True):
        layer = make_layer(rng, "l", 33, 72, 1024, bias=bias)
        cpu = qc.run("cpu:vllm-triton", layer)
        ours = qc.run(qc.arm(vllm_triton_numpy, epilogue="vllm-triton"), layer)
        ref = vllm_triton_numpy(**{k: layer.get(k) for k in ("a_q", "a_scale", "w_q", "w_scale", "bias")})
        assert np.array_equal(cpu["y"], ref), describe_first_diff(cpu["y"], ref)
        assert np.array_equal(ours["y"], ref)
        assert ours["acc"] is None and ours["record"]["kernel"].endswith("vllm_triton_numpy")
        assert ours["record"]["arm"] == "python:test_python_binding.vllm_triton_numpy"
        assert ours["record"]["epilogue"] == "vllm-triton"
    layers = [make_layer(rng, f"l{i}", 40, 64, 768, bias=i == 1) for i in range(2)]
    r = qc.verify("cpu:vllm-triton", qc.arm(vllm_triton_numpy, epilogue="vllm-triton"), layers, m_sweep=[1, 16, 40])
    assert all(run_["bitwise_diff"] == 0 and run_["formula_mismatch"] == [0, 0] for run_ in r["runs"]), r["runs"]
    verdicts = {c["id"]: c["verdict"] for c in r["checks"]}
    assert verdicts["C5"] == "pass" and verdicts["C6"] == "pass" and verdicts["C3"] == "pass", r["checks"]
    assert r["arms"][1]["label"] == "python:test_python_binding.vllm_triton_numpy"


def test_callable_output_forms_and_exposed_accumulator(qc):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(9)
    layer = make_layer(rng, "l", 16, 32, 256)
    ref = vllm_triton_numpy(layer["a_q"], layer["a_scale"], layer["w_q"], layer["w_scale"], None)

    def as_ml_dtypes(*args):
        return vllm_triton_numpy(*args).view(ml_dtypes.bfloat16)

    def transposed(*args):  # a non-contiguous result (a swap-AB kernel's y.T) is read through its strides
        return np.ascontiguousarray(vllm_triton_numpy(*args).T).T

    for fn in (as_ml_dtypes, transposed):
        assert np.array_equal(qc.run(fn, layer)["y"], ref), fn.__name__

    def with_acc(a_q, a_scale, w_q, w_scale, bias):
        acc = (a_q.astype(np.int64) @ w_q.astype(np.int64).T).astype(np.int32)
        return vllm_triton_numpy(a_q, a_scale, w_q, w_scale, bias), acc

    def with_wrong_acc(a_q, a_scale, w_q, w_scale, bias):
        y, acc = with_acc(a_q, a_scale, w_q, w_scale, bias)
        acc[0, 0] += 1
        return y, acc

    good = qc.verify("cpu:vllm-triton", qc.arm(with_acc, exposes_accumulator=True), [layer], scales="real")
    assert {c["id"]: c["verdict"] for c in good["checks"]}["C4"] == "pass"
    bad = qc.verify("cpu:vllm-triton", qc.arm(with_wrong_acc, exposes_accumulator=True, name="mine:acc-off-by-one"),
                    [layer], scales="real")
    c4 = next(c for c in bad["checks"] if c["id"] == "C4")
    assert c4["verdict"] == "fail" and c4["evidence"]["mismatched_elements"] == 1, c4
    assert bad["arms"][1]["label"] == "mine:acc-off-by-one"


def test_declared_formula_mismatch_is_reported(qc):
    """A callable that truncates instead of rounding is caught against its declared formula."""
    rng = np.random.default_rng(10)
    layer = make_layer(rng, "l", 32, 64, 512)

    def truncating(a_q, a_scale, w_q, w_scale, bias):
        acc = a_q.astype(np.int64) @ w_q.astype(np.int64).T
        t = (acc.astype(np.float32) * a_scale[:, None]) * w_scale[None, :]
        return (t.view(np.uint32) >> 16).astype(np.uint16)

    r = qc.verify("cpu:vllm-triton", qc.arm(truncating, epilogue="vllm-triton"), [layer])
    assert sum(run_["formula_mismatch"][1] for run_ in r["runs"]) > 0
    assert {c["id"]: c["verdict"] for c in r["checks"]}["C6"] == "fail"


def test_boundary_of_python_arm_matches_cpu_arm(qc):
    cpu = qc.boundary("cpu:vllm-triton", max_k=2048, overflow_probe=False)
    py = qc.boundary(qc.arm(vllm_triton_numpy, epilogue="vllm-triton"), max_k=2048, overflow_probe=False)
    assert py["check"]["verdict"] == cpu["check"]["verdict"] == "pass", (py["check"], cpu["check"])
    assert py["conversion_mode"] == cpu["conversion_mode"] == "RNE"
    assert [(c["id"], c["verdict"]) for c in py["cases"]] == [(c["id"], c["verdict"]) for c in cpu["cases"]]


# ---- errors: qconform.Error with the C++ message, and no crash ----------------------------------------

def test_errors_carry_the_cpp_message(qc, tmp_path):
    missing = tmp_path / "missing.safetensors"
    r = run([tool("qconform"), "predict", missing, "--out", tmp_path / "p.json"], check=False)
    assert r.returncode == 2
    cli_message = r.stderr.strip().removeprefix("qconform: error: ")
    with pytest.raises(qc.InputError) as e:
        qc.load_operands(missing)
    assert str(e.value) == cli_message
    assert isinstance(e.value, qc.Error) and isinstance(e.value, ValueError)
    assert e.value.kind == "input" and e.value.file.endswith(".cpp") and e.value.line > 0
    with pytest.raises(qc.InputError, match="unknown backend `nope`"):
        qc.arm("nope:x")
    with pytest.raises(qc.InputError, match="unknown epilogue"):
        qc.arm(vllm_triton_numpy, epilogue="no-such-formula")
    with pytest.raises(qc.InputError, match="unknown scale regime `pow3`"):
        qc.verify("cpu:vllm-triton", "cpu:vllm-triton", qc.synth("tiny", m=2), scales=["pow3"])
    assert issubclass(qc.InternalError, RuntimeError) and issubclass(qc.InternalError, qc.Error)


@pytest.mark.parametrize("case", ["float-a", "wrong-k", "int32-w", "3d-a", "scale-len", "bias-len", "bad-scale",
                                  "missing-key", "unknown-key", "list", "not-dict"])
def test_bad_operands_raise_input_error(qc, case):
    rng = np.random.default_rng(11)
    layer = make_layer(rng, "l", 4, 8, 16)
    expect = {"float-a": "a_q: expected dtype int8, found float32", "wrong-k": "w_q: expected shape [N,16]",
              "int32-w": "w_q: expected dtype int8, found int32", "3d-a": "a_q: expected a 2-D array, found 3-D",
              "scale-len": "a_scale: expected shape [4]", "bias-len": "bias: expected shape [8]",
              "bad-scale": "a_scale", "missing-key": "key `w_scale` is missing", "unknown-key": "unknown key `w_scales`",
              "list": "expected an array", "not-dict": "expected a dict"}[case]
    if case == "float-a":
        layer["a_q"] = layer["a_q"].astype(np.float32)
    elif case == "wrong-k":
        layer["w_q"] = layer["w_q"][:, :15]
    elif case == "int32-w":
        layer["w_q"] = layer["w_q"].astype(np.int32)
    elif case == "3d-a":
        layer["a_q"] = layer["a_q"][None]
    elif case == "scale-len":
        layer["a_scale"] = layer["a_scale"][:3]
    elif case == "bias-len":
        layer["bias"] = np.zeros(7, dtype=np.uint16)
    elif case == "bad-scale":
        layer["a_scale"] = layer["a_scale"].copy()
        layer["a_scale"][1] = np.nan
    elif case == "missing-key":
        del layer["w_scale"]
    elif case == "unknown-key":
        layer["w_scales"] = layer.pop("w_scale")
    elif case == "list":
        layer["a_q"] = layer["a_q"].tolist()
    with pytest.raises(qc.InputError) as e:
        if case == "not-dict":
            qc.predict([layer["a_q"]])
        else:
            qc.verify("cpu:vllm-triton", "cpu:vllm-cutlass", [layer])
    assert expect in str(e.value), str(e.value)


def test_bad_callables_raise_and_leave_the_process_alive(qc):
    rng = np.random.default_rng(12)
    layer = make_layer(rng, "l", 4, 8, 16)

    class Boom(Exception):
        pass

    def raising(*args):
        raise Boom("kernel failed")

    with pytest.raises(Boom, match="kernel failed") as e:
        qc.verify("cpu:vllm-triton", raising, [layer])
    assert any("qconform arm `python:" in n for n in getattr(e.value, "__notes__", [])), e.value
    with pytest.raises(Boom):  # also through boundary (another C++ caller)
        qc.boundary(raising, max_k=512, overflow_probe=False)

    def writes_inputs(a_q, a_scale, w_q, w_scale, bias):
        a_q[0, 0] = 1  # the operands are read-only views: an arm cannot corrupt the other arm's input
        return vllm_triton_numpy(a_q, a_scale, w_q, w_scale, bias)

    before = layer["a_q"].copy()
    with pytest.raises(ValueError, match="read-only"):
        qc.run(writes_inputs, layer)
    assert np.array_equal(layer["a_q"], before)

    outputs = {
        "wrong-shape": (lambda *a: np.zeros((4, 7), dtype=np.uint16), "expected shape [4,8] (M,N), found [4,7]"),
        "transposed-shape": (lambda *a: np.zeros((8, 4), dtype=np.uint16), "found [8,4]"),
        "float32": (lambda *a: np.zeros((4, 8), dtype=np.float32), "expected dtype bfloat16"),
        "int64": (lambda *a: np.zeros((4, 8), dtype=np.int64), "found int64"),
        "none": (lambda *a: None, "found NoneType"),
        "1-d": (lambda *a: np.zeros(32, dtype=np.uint16), "expected a 2-D array, found 1-D"),
        "not-a-tuple": (lambda *a: np.zeros((4, 8), dtype=np.uint16), "must return a tuple (y, acc)"),
    }
    for case, (fn, message) in outputs.items():
        a = qc.arm(fn, name=f"bad:{case}", exposes_accumulator=case == "not-a-tuple")
        with pytest.raises(qc.InputError) as e:
            qc.verify("cpu:vllm-triton", a, [layer])
        assert message in str(e.value) and f"bad:{case}" in str(e.value), (case, str(e.value))
    with pytest.raises(qc.InputError, match="expected a label"):
        qc.arm(42)
    # Still alive and correct after all of that.
    assert np.array_equal(qc.run(vllm_triton_numpy, layer)["y"], qc.run("cpu:vllm-triton", layer)["y"])


# ---- transfer -------------------------------------------------------------------------------------------

def _write_replay(path, flips, margins):
    lines = [json.dumps({"kind": "header", "arm": path.stem, "mode": "replay"})]
    for p in range(4):
        for pos in range(40):
            i = p * 40 + pos
            top1 = 1 if i not in flips else 2
            lines.append(json.dumps({"prompt": f"p{p}", "position": pos, "token": 5, "top1_id": top1,
                                     "top1_logit": 10.0 + margins[i], "top2_id": 3, "top2_logit": 10.0}))
    path.write_text("\n".join(lines) + "\n")


def test_transfer_equals_cli(qc, tmp_path):
    rng = np.random.default_rng(13)
    margins = rng.random(160) * 4
    flips = set(int(i) for i in np.argsort(margins)[:12])
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write_replay(a, set(), margins)
    _write_replay(b, flips, margins)
    out = tmp_path / "t.json"
    run([tool("qconform"), "transfer", a, b, "--replay", "--bootstrap", "200", "--json", out])
    ours = qc.transfer(a, b, replay=True, bootstrap=200)
    assert ours == json.loads(out.read_text())
    assert ours["replay"]["flips"] == 12 and ours["replay"]["positions"] == 160


# ---- GPU arms: import works everywhere, calling needs a GPU ------------------------------------------

def test_gpu_arms_fail_clearly_without_a_gpu(qc):
    from qconform import torch_arms, triton_arm

    try:
        import torch  # noqa: F401

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        pytest.skip("a CUDA device is present: examples/gpu_python_arms.py checks the GPU arms")
    with pytest.raises(triton_arm.GpuUnavailableError, match="qconform.triton_arm needs"):
        triton_arm.arm()
    with pytest.raises(torch_arms.GpuUnavailableError, match="qconform.torch_arms needs"):
        torch_arms.int_mm_arm()


def test_triton_tiles_follow_vllms_heuristic(qc):
    """The Triton arm's tiles are vLLM's triton_scaled_mm buckets (transcribed from its source, not from
    ours): every tile has at least 64 rows, below which an e4m3 tl.dot is an mma.sync on f16 (docs/gpu.md)."""
    from qconform.triton_arm import kernel_config

    def vllm(m, n):  # vllm/.../compressed_tensors/triton_scaled_mm.py, the branch on next_power_of_2(M)
        p = max(32, 1 << (m - 1).bit_length())
        if p <= 32:
            return (64, 64, 256) if n < 8192 else (64, 128, 256)
        return (64, 64, 256) if p <= 64 else (64, 128, 128) if p <= 128 else (128, 128, 128)

    for m in list(range(1, 300)) + [511, 512, 513, 4096]:
        for n in (256, 8191, 8192, 151936):
            c = kernel_config(m, n)
            assert (c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]) == vllm(m, n), (m, n, c)
            assert c["BLOCK_M"] >= 64 and c["num_warps"] == 4 and c["num_stages"] == 3


def test_torch_cpu_tensors_and_int_mm_cpu_arm(qc):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional peer)")
    rng = np.random.default_rng(14)
    layer = make_layer(rng, "l", 24, 32, 256, bias=True)
    ref = vllm_triton_numpy(**{k: layer[k] for k in ("a_q", "a_scale", "w_q", "w_scale", "bias")})
    t_layer = {k: (torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if k == "bias" else
                   torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in layer.items()}
    assert np.array_equal(qc.run("cpu:vllm-triton", t_layer)["y"], ref)
    acc = qc.exact_accumulate(t_layer["a_q"], t_layer["w_q"])
    assert np.array_equal(acc, layer["a_q"].astype(np.int64) @ layer["w_q"].astype(np.int64).T)

    def torch_kernel(a_q, a_scale, w_q, w_scale, bias):  # returns torch.bfloat16
        acc = torch.from_numpy(a_q.astype(np.int32)) @ torch.from_numpy(w_q.astype(np.int32)).T
        y = ((acc.to(torch.float32) * torch.from_numpy(a_scale.copy())[:, None])
             * torch.from_numpy(w_scale.copy())[None, :]).to(torch.bfloat16)
        b = torch.from_numpy(bias.view(np.int16).copy()).view(torch.bfloat16)
        return (y.to(torch.float32) + b.to(torch.float32)[None, :]).to(torch.bfloat16)

    assert np.array_equal(qc.run(torch_kernel, layer)["y"], ref)
    if hasattr(torch, "_int_mm"):
        from qconform import torch_arms

        try:
            out = qc.run(torch_arms.int_mm_arm(device="cpu"), layer)
        except RuntimeError as e:  # older CPU builds have no _int_mm kernel
            pytest.skip(f"torch._int_mm on the CPU is unavailable here: {e}")
        assert np.array_equal(out["y"], ref) and out["acc"] is not None


# ---- activation quantizers against NumPy written from the engines' formulas --------------------

def _numpy_quantize(x, quantizer):
    """vLLM: scale = absmax/127, codes rne(x * (127/absmax)) (cvt.rni.sat: NaN -> 0);
    SGLang: absmax floored at 1e-10, codes round-half-away(x * (127/absmax));
    reciprocal: codes rne(x * (1/(absmax/127))). fp32 arithmetic via numpy float32."""
    x = np.asarray(x, dtype=np.float32)
    absmax = np.max(np.abs(x), axis=1).astype(np.float32)
    if quantizer == "sglang":
        absmax = np.maximum(absmax, np.float32(1e-10))
    scale = (absmax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        if quantizer == "reciprocal":
            inv = (np.float32(1) / scale).astype(np.float32)
        else:
            inv = (np.float32(127) / absmax).astype(np.float32)
            if quantizer == "vllm":
                inv = np.where(absmax == 0, np.float32(0), inv).astype(np.float32)
        t = (x * inv[:, None]).astype(np.float32).astype(np.float64)
    if quantizer == "sglang":
        r = np.sign(t) * np.floor(np.abs(t) + 0.5)  # exact in float64 for float32 t
    else:
        r = np.round(t)  # half to even
    r = np.where(np.isnan(r), 0, np.clip(r, -128, 127))
    return r.astype(np.int8), scale


@pytest.mark.parametrize("quantizer", ["vllm", "sglang", "reciprocal"])
def test_quantize_activations_equals_numpy(qc, quantizer):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((64, 300)) * 3).astype(np.float32)
    x[3, :] = 0                                   # all-zero row
    x[5, :4] = [127, 2.5, -2.5, 0.5]              # exact halves (absmax 127: multiplier 1)
    x[5, 4:] = 0
    q, s = qc.quantize_activations(x, quantizer)
    wq, ws = _numpy_quantize(x, quantizer)
    np.testing.assert_array_equal(s.view(np.uint32), ws.view(np.uint32))
    np.testing.assert_array_equal(q, wq)
    assert q[5, 1] == (3 if quantizer == "sglang" else 2)  # the halves really were exercised
    # bf16 input: the same codes as the exactly converted float32 values
    xb = x.astype(ml_dtypes.bfloat16)
    qb, sb = qc.quantize_activations(xb, quantizer)
    qf, sf = qc.quantize_activations(xb.astype(np.float32), quantizer)
    np.testing.assert_array_equal(qb, qf)
    np.testing.assert_array_equal(sb, sf)
    with pytest.raises(qc.InputError, match="quantizer"):
        qc.quantize_activations(x, "nope")


# ---- FP8 layers: element types in layer dicts ----------------------------------------------------------

def test_fp8_layers_carry_their_element_types(qc, tmp_path):
    path = tmp_path / "fp8.safetensors"
    run([tool("qconform"), "synth", "--shapes", "tiny", "--m", "8", "--seed", "4", "--layers", "2",
         "--element", "e5m2-e4m3", "--out", path])
    from_cli = qc.load_operands(path)
    ours = qc.synth("tiny", m=8, seed=4, element="e5m2-e4m3")[:2]
    for x, y in zip(ours, from_cli):
        assert (x["a_type"], x["w_type"]) == ("e5m2", "e4m3") == (y["a_type"], y["w_type"])
        assert x["a_q"].dtype == np.uint8 and x["w_q"].dtype == np.uint8
        for key in ("a_q", "a_scale", "w_q", "w_scale"):
            assert np.array_equal(x[key], y[key]), (x["name"], key)
    layer = ours[0]
    y_bits = qc.run("cpu:fp8-hopper-fp8-promote4", layer)["y"]
    # The same codes as ml_dtypes float8 arrays name their own element types.
    typed = {k: v for k, v in layer.items() if k not in ("a_type", "w_type")}
    typed["a_q"] = layer["a_q"].view(ml_dtypes.float8_e5m2)
    typed["w_q"] = layer["w_q"].view(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(qc.run("cpu:fp8-hopper-fp8-promote4", typed)["y"], y_bits)
    # uint8 codes without a type are not int8 codes; a type contradicting the dtype is refused.
    untyped = {k: v for k, v in layer.items() if k not in ("a_type", "w_type")}
    with pytest.raises(qc.InputError, match="expected dtype int8, found uint8"):
        qc.run("cpu:fp8-hopper-fp8-promote4", untyped)
    with pytest.raises(qc.InputError, match="a_type is 'e4m3' but a_q is a e5m2 array"):
        qc.run("cpu:fp8-hopper-fp8-promote4", dict(typed, a_type="e4m3"))
    with pytest.raises(qc.InputError, match="expected int8, e4m3 or e5m2, found `fp8`"):
        qc.run("cpu:fp8-hopper-fp8-promote4", dict(layer, a_type="fp8"))
    # INT8 arms, built-in or Python callables, refuse an FP8 layer before running anything.
    with pytest.raises(qc.InputError, match=r"arm `cpu:vllm-cutlass` is an INT8 arm .*e5m2 activations x e4m3 weights"):
        qc.run("cpu:vllm-cutlass", layer)
    calls = []

    def never(a_q, a_scale, w_q, w_scale, bias):
        calls.append(1)
        return np.zeros((a_q.shape[0], w_q.shape[0]), dtype=np.uint16)

    with pytest.raises(qc.InputError, match="is an INT8 arm"):
        qc.run(never, layer)
    assert not calls
