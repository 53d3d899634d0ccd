"""Block-scaled FP8 (issue #28) against peers written here from the sources' formulas, with NumPy
float32 arithmetic, Python's exact rationals and ml_dtypes doing every FP8 and bf16 rounding:

- the per-token-group activation quantizers (vLLM csrc/quantization/8bit/fp8/per_token_group_quant.cu,
  SGLang sgl-kernel/csrc/gemm/per_token_group_quant_8bit.cu, DeepGEMM deep_gemm/utils/math.py
  `per_token_cast_to_fp8`) and the block weight quantizers (DeepGEMM `per_block_cast_to_fp8`,
  compressed-tensors' block strategy), through tests/tools/qc_quantize.cpp, on designed rows: ties,
  saturation, all-zero groups, subnormal codes, partial groups and blocks, UE8M0 scales (rounded up with
  a float64 log2 here, bit arithmetic there);
- the independent check of the issue: a composition, written here, of qconform's own chain model (each K
  block's columns through `fp8_accumulate` of cpu:fp8-<chain>) with each promotion form, in exact
  rational arithmetic rounded to fp32 (RNE) at each step the form rounds, equals the matching
  cpu:fp8-block-* arm's D bit for bit and its bf16 outputs are RNE(D);
- a NumPy block kernel as a Python callable (`qconform.arm(fn, accumulation_model="block-triton")`)
  verified against cpu:fp8-block-triton; `qconform verify` on two CPU block arms of different forms:
  predicted == observed in every run; UE8M0 operands: 0 differences; the operand file read by the
  safetensors library.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_block_peer.py
"""
import json
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open

from conftest import run, tool
from test_python_binding import qc  # noqa: F401  (the fixture that finds or builds the extension)

F32 = np.float32
E4M3 = ml_dtypes.float8_e4m3fn
MAX = F32(448.0)


def cast(v):
    """Clamp with fmin/fmax, then round to nearest even to e4m3fn (ml_dtypes)."""
    return np.fmax(-MAX, np.fmin(np.asarray(v, dtype=F32), MAX)).astype(E4M3).view(np.uint8)


def ceil_pow2(s):
    """2^ceil(log2 s) in float64 (vLLM's exp2f(ceilf(log2f(s))) without the fp32 log2)."""
    return np.exp2(np.ceil(np.log2(np.asarray(s, dtype=np.float64)))).astype(F32)


def peer_group(x, quantizer, ue8m0, g):
    m, k = x.shape
    cols = -(-k // g)
    q = np.zeros((m, k), np.uint8)
    s = np.zeros((m, cols), F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for c in range(cols):
            v = x[:, c * g:(c + 1) * g].astype(F32)
            floor = F32(1e-4) if quantizer == "deepgemm" else F32(1e-10)
            a = np.fmax.reduce(np.abs(v), axis=1, initial=floor).astype(F32)
            if quantizer == "vllm":
                sc = (a / MAX).astype(F32)
                if ue8m0:
                    sc = ceil_pow2(np.fmax(sc, F32(1e-10)))
                codes = cast(v / sc[:, None])
            elif quantizer == "sglang":
                sc = (a * (F32(1) / MAX)).astype(F32)
                mult = (MAX / a).astype(F32)
                if ue8m0:
                    sc = ceil_pow2(sc)
                    mult = (F32(1) / sc).astype(F32)
                codes = cast(v * mult[:, None])
            else:
                sc = (a / MAX).astype(F32)
                if ue8m0:
                    sc = ceil_pow2(sc)
                codes = cast(v * (F32(1) / sc)[:, None])
            q[:, c * g:(c + 1) * g] = codes
            s[:, c] = sc
    return q, s


def peer_block(w, quantizer, ue8m0, bn, bk, dtype):
    bf = ml_dtypes.bfloat16
    model = (lambda v: np.asarray(v, F32).astype(bf).astype(F32)) if dtype == "bf16" else (lambda v: np.asarray(v, F32))
    n, k = w.shape
    rows, cols = -(-n // bn), -(-k // bk)
    q = np.zeros((n, k), np.uint8)
    s = np.zeros((rows, cols), F32)
    for r in range(rows):
        for c in range(cols):
            blk = model(w[r * bn:(r + 1) * bn, c * bk:(c + 1) * bk])
            if quantizer == "deepgemm":
                a = max(F32(np.abs(blk).max()), F32(1e-4))
                sc = F32(F32(a) / MAX)
                if ue8m0:
                    sc = ceil_pow2(sc)
                codes = cast(blk * F32(F32(1) / sc))
            else:
                sc = F32(model(F32(np.abs(blk).max()) / MAX))
                if sc == 0:
                    sc = F32(2.0**-7) if dtype == "bf16" else F32(2.0**-23)
                codes = cast(model(blk / sc))
            q[r * bn:(r + 1) * bn, c * bk:(c + 1) * bk] = codes
            s[r, c] = sc
    return q, s


def designed_rows(g):
    """Rows of 3 groups of g (the last partial): ties, saturation, all-zero, subnormal, tiny, random."""
    rng = np.random.default_rng(28)
    k = 2 * g + g // 3
    codes = np.arange(0x00, 0x7F, dtype=np.uint8).view(E4M3).astype(np.float64)
    mids = ((codes[:-1] + codes[1:]) / 2).astype(F32)  # every e4m3 tie (scale 1: absmax 448)
    rows = []
    tie = np.zeros(k, F32)
    tie[: len(mids)] = mids[:k][: len(mids)]
    tie[0] = 448.0
    tie[g] = 448.0
    tie[g + 1:g + 1 + min(len(mids), g - 1)] = -mids[: min(len(mids), g - 1)]
    rows.append(tie)
    sat = (rng.standard_normal(k) * 3).astype(F32)
    sat[::7] *= 1000  # the absmax element of each group maps to 448; the multiplier's rounding may push past it
    rows.append(sat)
    zero = np.zeros(k, F32)
    zero[g:2 * g] = rng.standard_normal(g).astype(F32)  # groups 0 and 2 all zero (a -0.0 too)
    zero[1] = -0.0
    rows.append(zero)
    sub = np.full(k, F32(0))
    sub[0::g] = 448.0  # scale 1: the rest are e4m3 subnormals and their ties (multiples of 2^-10)
    sub[1:g] = (np.arange(1, g) % 17).astype(F32) * F32(2.0**-10)
    rows.append(sub)
    tiny = (rng.standard_normal(k) * 1e-12).astype(F32)  # below vLLM's and DeepGEMM's absmax floors
    rows.append(tiny)
    for scale in (0.01, 1.0, 37.0):
        rows.append((rng.standard_normal(k) * scale).astype(F32))
    return np.stack(rows)


@pytest.mark.parametrize("quantizer", ["vllm", "sglang", "deepgemm"])
@pytest.mark.parametrize("ue8m0", [False, True])
def test_group_quantizers_match_numpy(tmp_path, quantizer, ue8m0):
    g = 64
    x = designed_rows(g)
    np.save(tmp_path / "x.npy", x)
    run([tool("qc_quantize"), "group", quantizer, "1" if ue8m0 else "0", g, tmp_path / "x.npy", tmp_path / "q.npy",
         tmp_path / "s.npy"])
    q, s = np.load(tmp_path / "q.npy"), np.load(tmp_path / "s.npy")
    pq, ps = peer_group(x, quantizer, ue8m0, g)
    assert s.shape == ps.shape == (x.shape[0], 3)
    bad = np.argwhere(s.view(np.uint32) != ps.view(np.uint32))
    assert bad.size == 0, f"scales differ at {bad[:5].tolist()}: {s[tuple(bad[0])]} vs {ps[tuple(bad[0])]}"
    bad = np.argwhere(q != pq)
    assert bad.size == 0, (f"codes differ at {bad[:5].tolist()}: qconform 0x{q[tuple(bad[0])]:02x}, "
                           f"peer 0x{pq[tuple(bad[0])]:02x}, x {x[tuple(bad[0])]!r}")
    if ue8m0:
        assert np.all((s.view(np.uint32) & 0x7FFFFF) == 0)


@pytest.mark.parametrize("quantizer,ue8m0,dtype", [("deepgemm", False, "f32"), ("deepgemm", True, "f32"),
                                                    ("deepgemm", False, "bf16"), ("compressed-tensors", False, "f32"),
                                                    ("compressed-tensors", False, "bf16")])
def test_block_weight_quantizers_match_numpy(tmp_path, quantizer, ue8m0, dtype):
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((70, 200)) * 0.02).astype(F32)  # partial blocks at both edges (blocks of 32x64)
    w[32:64, 64:128] = 0  # an all-zero block
    w[0, 0] = 3.0  # an outlier: saturation of its block's neighbours is impossible, its own maps to 448
    w[40, 130:140] = 1e-6  # tiny magnitudes in an otherwise normal block: subnormal codes
    np.save(tmp_path / "w.npy", w)
    run([tool("qc_quantize"), "block", quantizer, "1" if ue8m0 else "0", 32, 64, dtype, tmp_path / "w.npy",
         tmp_path / "q.npy", tmp_path / "s.npy"])
    q, s = np.load(tmp_path / "q.npy"), np.load(tmp_path / "s.npy")
    pq, ps = peer_block(w, quantizer, ue8m0, 32, 64, dtype)
    assert s.shape == ps.shape == (3, 4)
    assert np.array_equal(s.view(np.uint32), ps.view(np.uint32)), (s, ps)
    bad = np.argwhere(q != pq)
    assert bad.size == 0, f"codes differ at {bad[:5].tolist()}"


# ---- the block models: a composition of qconform's chain with each form ----------------------------

def rn32(v: Fraction) -> Fraction:
    """v rounded to the nearest fp32 (ties to even); v inside fp32's normal range or 0."""
    if v == 0:
        return Fraction(0)
    sign = -1 if v < 0 else 1
    v = abs(v)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    scaled = v / Fraction(2) ** (e - 23)  # in [2^23, 2^24)
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    assert -126 <= e <= 127, v
    return sign * Fraction(n) * Fraction(2) ** (e - 23)


def promote(form, c, sa, sb, d):
    c, sa, sb = Fraction(float(c)), Fraction(float(sa)), Fraction(float(sb))
    if form == "triton":
        return rn32(rn32(c * sa) * sb + d)
    if form == "triton-nofma":
        return rn32(d + rn32(rn32(c * sa) * sb))
    if form == "deepgemm":
        return rn32(rn32(sa * sb) * c + d)
    assert form == "deepgemm-nofma"
    return rn32(d + rn32(rn32(sa * sb) * c))


def composed_d(qc, layer, form, chain="hopper-fp8-chain", bk=128, bn=None):
    """D of block-<form>+<chain> composed here: the chain of each K block through qconform's own chain
    arm (its fp8_accumulate), then the form, from D = 0, in exact rationals rounded where the form rounds."""
    a, w, sa, sw = layer["a_q"], layer["w_q"], layer["a_scale"], layer["w_scale"]
    m, k = a.shape
    n = w.shape[0]
    d = [[Fraction(0)] * n for _ in range(m)]
    for b, k0 in enumerate(range(0, k, bk)):
        c = qc.fp8_accumulate(f"cpu:fp8-{chain}", np.ascontiguousarray(a[:, k0:k0 + bk]),
                              np.ascontiguousarray(w[:, k0:k0 + bk]))["d"]
        for i in range(m):
            for j in range(n):
                d[i][j] = promote(form, c[i, j], sa[i, b], sw[j // bn, b], d[i][j])
    return np.array([[float(x) for x in row] for row in d], dtype=F32)


@pytest.fixture(scope="module")
def block_layer(qc):
    return qc.synth("12x40x328", element="e4m3", act_scale="per-token-group:128", weight_scale="per-block:16x128")[0]


@pytest.mark.parametrize("form", ["triton", "triton-nofma", "deepgemm", "deepgemm-nofma"])
def test_numpy_composition_equals_each_cpu_block_arm(qc, block_layer, form):
    want = composed_d(qc, block_layer, form, bn=16)
    out = qc.run(f"cpu:fp8-block-{form}", block_layer)
    got = out["d"]
    bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, (f"{form}: {len(bad)} of {got.size} differ; first {bad[0].tolist()}: arm {got[tuple(bad[0])]!r} "
                           f"(0x{got.view(np.uint32)[tuple(bad[0])]:08x}), composition {want[tuple(bad[0])]!r}")
    assert np.array_equal(out["y"], want.astype(ml_dtypes.bfloat16).view(np.uint16))
    assert out["record"]["extra"]["accumulation_model"] == f"block-{form}"


def test_numpy_composition_with_another_chain(qc, block_layer):
    want = composed_d(qc, block_layer, "deepgemm", chain="sequential", bn=16)
    got = qc.run("cpu:fp8-block-deepgemm+sequential", block_layer)["d"]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_forms_differ_on_real_scales_and_agree_under_ue8m0(qc):
    real = qc.synth("16x48x512", element="e4m3", act_scale="per-token-group:128", weight_scale="per-block:16x128")[0]
    pow2 = qc.synth("16x48x512", element="e4m3", act_scale="per-token-group:128", weight_scale="per-block:16x128",
                    ue8m0=True)[0]
    assert pow2["ue8m0"] and np.all((pow2["a_scale"].view(np.uint32) & 0x7FFFFF) == 0)
    d = {f: qc.run(f"cpu:fp8-block-{f}", real)["d"].view(np.uint32) for f in ("triton", "deepgemm")}
    assert np.count_nonzero(d["triton"] != d["deepgemm"]) > 0
    e = {f: qc.run(f"cpu:fp8-block-{f}", pow2)["d"].view(np.uint32) for f in ("triton", "triton-nofma", "deepgemm")}
    assert np.array_equal(e["triton"], e["deepgemm"]) and np.array_equal(e["triton"], e["triton-nofma"])


def test_python_block_callable_verified_against_the_cpu_arm(qc, block_layer):
    calls = []

    def triton_numpy(a, w, a_scale, w_scale, block_size):
        calls.append(list(block_size))
        layer = dict(block_layer, a_q=a, w_q=w, a_scale=a_scale, w_scale=w_scale)
        return composed_d(qc, layer, "triton", bk=block_size[1], bn=block_size[0])

    mine = qc.arm(triton_numpy, accumulation_model="block-triton", block_size=(16, 128))
    assert mine.info["block_size"] == (16, 128)
    r = qc.verify(mine, "cpu:fp8-block-triton", [block_layer], scales="real,pow2-channel", reference="cpu")
    assert calls and calls[0] == [16, 128]
    for x in r["runs"]:
        assert x["block_scaled"] and x["acc_mismatch"] == [0, 0] and x["formula_mismatch"] == [0, 0], x
        assert x["bitwise_diff"] == 0 and x["predicted_equals_observed"]
    # A layer of another block is refused before the callable runs.
    other = qc.synth("4x32x256", element="e4m3", act_scale="per-token-group:64", weight_scale="per-block:16x64")[0]
    with pytest.raises(qc.InputError, match="takes K blocks of 128 products"):
        qc.run(mine, other)


def checks_of(doc):
    return {c["id"]: c for c in doc["checks"]}


def test_verify_two_cpu_block_arms_of_different_forms(tmp_path):
    ops = tmp_path / "ops.safetensors"
    run([tool("qconform"), "synth", "--shapes", "32x160x520,32x96x384", "--element", "e4m3", "--act-scale",
         "per-token-group:128", "--weight-scale", "per-block:128x128", "--out", ops])
    with safe_open(str(ops), framework="numpy") as f:  # the safetensors library reads what synth wrote
        assert f.metadata()["weight_scale"] == "per-block:128x128"
        assert f.get_tensor("layer0.a_scale").shape == (32, 5) and f.get_tensor("layer0.w_scale").shape == (2, 5)
    out = tmp_path / "v.json"
    r = run([tool("qconform"), "verify", ops, "--arms", "cpu:fp8-block-triton,cpu:fp8-block-deepgemm-nofma",
             "--json", out, "--reference", "cpu"], check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert len(doc["runs"]) == 6
    assert all(x["predicted_equals_observed"] for x in doc["runs"])
    assert sum(x["model_acc_diff"] for x in doc["runs"] if x["scales"] == "real") > 0  # the forms' D differ
    assert all(x["bitwise_diff"] == 0 for x in doc["runs"] if x["scales"] != "real")  # the UE8M0 alibi
    c = checks_of(doc)
    assert c["C2"]["verdict"] == "not-applicable" and "block-scaled" in c["C2"]["summary"]
    assert all(c[i]["verdict"] == "pass" for i in ("C3", "C4", "C5", "C6")), {i: c[i]["summary"] for i in c}


def test_verify_ue8m0_operands_zero_differences(tmp_path):
    ops = tmp_path / "ops.safetensors"
    run([tool("qconform"), "synth", "--shapes", "24x130x300", "--element", "e4m3", "--act-scale",
         "per-token-group:128", "--weight-scale", "per-block:128x128", "--ue8m0", "--out", ops])
    with open(ops, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(f.read(n))["__metadata__"]
    assert meta["scale_fmt"] == "ue8m0" and meta["act_scale"] == "per-token-group:128"
    out = tmp_path / "v.json"
    r = run([tool("qconform"), "verify", ops, "--arms", "cpu:fp8-block-triton,cpu:fp8-block-deepgemm", "--json", out,
             "--reference", "cpu"], check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert all(x["bitwise_diff"] == 0 and x["predicted_diff"] == 0 for x in doc["runs"])


# ---- block-scaled checkpoints, read by the safetensors library ------------------------------------

def raw_tensors(path):
    """name -> (dtype, shape, bytes) from the file's header (the library's numpy reader has no float8)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


@pytest.mark.parametrize("fmt,quantizer,scale_key", [("hf-fp8", "deepgemm", "weight_scale_inv"),
                                                     ("compressed-tensors-fp8-block", "compressed-tensors", "weight_scale")])
def test_synth_model_block_checkpoints_match_numpy(tmp_path, fmt, quantizer, scale_key):
    for f in ("hf", fmt):
        args = [tool("qconform"), "synth-model", "--config", "tiny-qwen3", "--seed", "5", "--out", tmp_path / f,
                "--format", f]
        if f != "hf":
            args += ["--weight-scale", "per-block:32x32"]
        run(args)
    config = json.loads((tmp_path / fmt / "config.json").read_text())["quantization_config"]
    if fmt == "hf-fp8":
        assert config == {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [32, 32]}
    else:
        g = config["config_groups"]["group_0"]
        assert g["weights"]["strategy"] == "block" and g["weights"]["block_structure"] == [32, 32]
        assert g["input_activations"]["strategy"] == "group" and g["input_activations"]["group_size"] == 32
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), framework="numpy") as f:
        fp32 = {k: f.get_tensor(k) for k in f.keys() if k.endswith("_proj.weight")}
    with safe_open(str(tmp_path / fmt / "model.safetensors"), framework="numpy") as f:
        scales = {k: f.get_tensor(k) for k in f.keys() if k.endswith(scale_key)}
    raw = raw_tensors(tmp_path / fmt / "model.safetensors")
    assert len(fp32) == len(scales) > 0
    for name, w in fp32.items():
        dtype, shape, data = raw[name]
        assert dtype == "F8_E4M3" and shape == list(w.shape)
        q = np.frombuffer(data, np.uint8).reshape(shape)
        pq, ps = peer_block(w, quantizer, False, 32, 32, "f32")
        s = scales[name[:-len("weight")] + scale_key]
        assert s.dtype == np.float32 and s.shape == ps.shape, (name, s.shape, ps.shape)
        assert np.array_equal(s.view(np.uint32), ps.view(np.uint32)), name
        assert np.array_equal(q, pq), name
