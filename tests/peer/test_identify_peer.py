"""`qconform.identify` on NumPy callables written from formulas outside the formula table, with every
rounding explicit (ml_dtypes for bf16 and float16, integer arithmetic for round-toward-zero): each is
identified exactly, with 100% of the held-out outputs explained, and the formula string it returns,
declared with `qconform.arm(fn, epilogue=...)`, makes verify predict its outputs bit for bit.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_identify_peer.py
(needs the extension: a build with -DQCONFORM_BUILD_PYTHON=ON, see test_python_binding.py)
"""
import ml_dtypes
import numpy as np
import pytest

from test_python_binding import qc  # noqa: F401  (the fixture that finds or builds the extension)


def acc_of(a_q, w_q):
    return a_q.astype(np.int64) @ w_q.astype(np.int64).T


def f32_rz(acc):
    """int64 -> float32 rounded toward zero: the RNE cast, stepped back where it grew."""
    f = acc.astype(np.float32)
    grew = np.abs(f.astype(np.float64)) > np.abs(acc.astype(np.float64))
    # float64 holds these |acc| < 2^53 exactly; step one float32 toward zero where RNE went up.
    f[grew] = np.nextafter(f[grew], np.float32(0))
    return f


def to_bf16(x):
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16)


def bf16_value(x):
    return to_bf16(x).astype(np.float32)


def bits(x):
    return np.ascontiguousarray(x).view(np.uint16)


def rz_bias_bf16sa(a_q, a_scale, w_q, w_scale, bias):
    """RZ conversion, the activation scale cast to bf16, Triton order, bias in fp32, bf16 output (RNE)."""
    x = f32_rz(acc_of(a_q, w_q))
    t = (x * bf16_value(a_scale)[:, None]).astype(np.float32)
    y = (t * w_scale.astype(np.float32)[None, :]).astype(np.float32)
    if bias is not None:
        y = (y + (np.asarray(bias, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)[None, :]).astype(np.float32)
    return bits(to_bf16(y))


def fp16_everything(a_q, a_scale, w_q, w_scale, bias):
    """Scales cast to float16, their product first (fp32, then rounded to float16), fp16 output."""
    if bias is not None:
        import qconform  # the package the fixture found; refusing is raising its InputError
        raise qconform.InputError("this kernel takes no bias")
    acc = acc_of(a_q, w_q).astype(np.float32)
    s = (w_scale.astype(np.float16).astype(np.float32)[None, :] * a_scale.astype(np.float16).astype(np.float32)[:, None])
    s = s.astype(np.float32).astype(np.float16).astype(np.float32)
    with np.errstate(over="ignore"):
        return bits((acc * s).astype(np.float32).astype(np.float16))


@pytest.mark.parametrize("fn,expected", [
    (rz_bias_bf16sa, "bf16(rn32(rn32(rn32(f32_rz(acc) * bf16(sa)) * sw) + f32(bias)))"),
    (fp16_everything, "f16(rn32(f32(acc) * f16(rn32(f16(sw) * f16(sa)))))"),
])
def test_numpy_formulas_outside_the_table_are_identified_exactly(qc, fn, expected):
    r = qc.identify(fn)
    assert r["verdict"] == "identified", r["printout"]
    assert r["named"] == [], r["printout"]
    assert r["explained"]["outputs"] > 10000
    assert r["explained"]["matching"] == r["explained"]["outputs"], r["printout"]
    # The identified formula and the one the callable was written from give the same bits
    # (the class may print another member; compare the functions, not the strings).
    rng = np.random.default_rng(3)
    acc = rng.integers(-(1 << 20), 1 << 20, size=(64, 48)).astype(np.int32)
    sa = (rng.random(64, dtype=np.float32) * 0.05 + 1e-3).astype(np.float32)
    sw = (rng.random(48, dtype=np.float32) * 0.005 + 1e-4).astype(np.float32)
    b = bits(to_bf16(rng.standard_normal(48).astype(np.float32))) if "bias" in expected else None
    assert np.array_equal(qc.apply_epilogue(r["formula"], acc, sa, sw, b), qc.apply_epilogue(expected, acc, sa, sw, b))
    # Declared with that formula, verify predicts the callable's every output.
    layers = qc.synth("tiny", m=16, seed=11, bias="bias" in expected)
    v = qc.verify(qc.arm(fn, epilogue=r["formula"]), "cpu:vllm-cutlass" if "bias" not in expected else "cpu:vllm-cutlass-muladd",
                  layers, scales="real")
    mismatches = [run["formula_mismatch"][0] for run in v["runs"]]
    assert mismatches and all(x == 0 for x in mismatches), mismatches


def test_identify_named_and_unexplained(qc):
    r = qc.identify("cpu:vllm-triton")
    assert r["verdict"] == "identified" and r["named"] == ["vllm-triton"], r["printout"]
    m = qc.identify("mutant:wrong-scale")
    assert m["verdict"] == "unexplained", m["printout"]
    assert any(d["kind"] == "scale" for d in m["diagnosis"]), m["printout"]


def test_identify_fp8_arms_names_their_accumulation_model(qc):
    # FP8 arms: the accumulation part is the model `boundary` measures through fp8_accumulate
    # (docs/accumulation.md), the epilogue the declared fp8-scaled; the held-out outputs are the
    # measurement's confirmation on random operands.
    for model in ("hopper-fp8-chain", "hopper-fp8-promote4"):
        r = qc.identify(f"cpu:fp8-{model}")
        assert r["verdict"] == "identified" and r["named"] == [model], r["printout"]
        assert r["explained"]["outputs"] > 0 and r["explained"]["matching"] == r["explained"]["outputs"], r["printout"]
        assert r["fp8_accumulation"]["verdict"] == "matches declaration", r["printout"]
        assert "fp8-scaled" in r["formula"], r["formula"]
    b = qc.boundary("cpu:fp8-hopper-fp8-promote4")
    assert b["kind"] == "qconform-boundary" and b["check"]["verdict"] == "pass", b["check"]
    assert b["fp8_accumulation"]["named"] == "hopper-fp8-promote4"
    assert b["fp8_accumulation"]["measured"]["promote_steps"] == 4
