"""`qconform.identify` on kernels people run, written here as NumPy callables with every rounding
explicit (ml_dtypes for e4m3, bf16; float32 arithmetic one operation at a time), none of them
declaring anything:

- PyTorch's eager W8A8 (torchao `int_scaled_matmul`: an int32 GEMM times bf16 scales): PyTorch's type
  promotion converts the int32 to bf16 through a float (two roundings), and every product is computed
  in float32 and stored in bf16;
- an FP8 kernel with the INT8 signature (e4m3 codes and scales in, bf16 out) whose epilogue is
  CUTLASS-style, the weight scale first (PyTorch's rowwise path with the scales swapped), over a
  sequential float32 sum; alone, and with its unscaled GEMM offered as `accumulate=`.

Each is identified with every held-out output explained; declared back, verify predicts it.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_identify_fp8_peer.py
"""
import ml_dtypes
import numpy as np
import pytest

from test_python_binding import qc  # noqa: F401  (the fixture that finds or builds the extension)


def bf16(x):
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def bits(x):
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16)).view(np.uint16)


def bias_value(bias):
    return (np.asarray(bias, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def torch_eager_w8a8(a_q, a_scale, w_q, w_scale, bias):
    """c = int32 GEMM; y = (c * bf16(sa)) * bf16(sw) (+ bias), every tensor bf16 as torch computes it."""
    acc = a_q.astype(np.int64) @ w_q.astype(np.int64).T           # exact (K small)
    c = bf16(acc.astype(np.float32))                               # int32 -> float (RNE) -> bf16 (RNE)
    y = bf16(c * bf16(a_scale)[:, None])                           # bf16 * bf16: float32 product, stored bf16
    y = bf16(y * bf16(w_scale)[None, :])
    if bias is not None:
        y = bf16(y + bias_value(bias)[None, :])                    # bf16 + bf16
    return bits(y)


def e4m3(codes):
    return np.ascontiguousarray(codes).view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def sequential_gemm(a, w):
    """d = sum over k in order, one float32 rounding per add (the products of e4m3 values are exact)."""
    av, wv = e4m3(a), e4m3(w)
    d = np.zeros((av.shape[0], wv.shape[0]), dtype=np.float32)
    for k in range(av.shape[1]):
        d = (d + av[:, k, None] * wv[None, :, k]).astype(np.float32)
    return d


def fp8_cutlass_order(a_q, a_scale, w_q, w_scale, bias):
    """bf16(rn32(rn32(d * sw) * sa)) over the sequential sum; no bias."""
    if bias is not None:
        import qconform
        raise qconform.InputError("this kernel takes no bias")
    d = sequential_gemm(a_q, w_q)
    t = (d * w_scale.astype(np.float32)[None, :]).astype(np.float32)
    return bits((t * a_scale.astype(np.float32)[:, None]).astype(np.float32))


def test_the_pytorch_two_step_conversion_is_identified(qc):
    r = qc.identify(torch_eager_w8a8)
    assert r["verdict"] == "identified", r["printout"]
    assert r["explained"]["outputs"] > 10000
    assert r["explained"]["matching"] == r["explained"]["outputs"], r["printout"]
    assert "bf16(f32(acc))" in r["formula"], r["formula"]
    layers = qc.synth("tiny", m=16, seed=12, bias=True)
    v = qc.verify(qc.arm(torch_eager_w8a8, epilogue=r["formula"]), "cpu:vllm-cutlass-muladd", layers, scales="real")
    assert all(run["formula_mismatch"][0] == 0 for run in v["runs"]), [run["formula_mismatch"] for run in v["runs"]]


@pytest.mark.parametrize("with_gemm", [False, True])
def test_an_undeclared_fp8_kernel_is_identified_as_model_and_epilogue(qc, with_gemm):
    arm = qc.arm(fp8_cutlass_order, element="e4m3", accumulate=sequential_gemm if with_gemm else None)
    info = arm.info
    assert info["accumulation_model"] == "" and info["epilogue"] == ""
    r = qc.identify(arm)
    assert r["verdict"] == "identified", r["printout"]
    assert r["named"] == ["sequential"], r["printout"]
    assert r["explained"]["matching"] == r["explained"]["outputs"] > 10000, r["printout"]
    assert ("fp8_accumulate" if with_gemm else "run") in r["fp8_accumulation"]["observed_through"]
    # The epilogue computes the function it was written from (compare outputs, not strings).
    d = np.array([[1.5, -3.0], [1234.5, 0.0625]], dtype=np.float32)
    rng = np.random.default_rng(5)
    sa = rng.random(2, dtype=np.float32) + 0.1
    sw = rng.random(2, dtype=np.float32) + 0.1
    want = bits(((d * sw[None, :]).astype(np.float32) * sa[:, None]).astype(np.float32))
    got = qc.apply_epilogue(r["fp8_epilogue"]["formula"], d, sa, sw)
    assert np.array_equal(got, want), (got, want)
    # The printout speaks Python: its advice is a call, not a command line.
    assert "qconform.boundary(arm)" in r["printout"] and "qconform.arm(fn, element=" in r["printout"], r["printout"]
    # Declared back, verify holds the kernel to the model and epilogue bit for bit and predicts the
    # differences from cpu:fp8-sequential (which applies the other scale order).
    declared = qc.arm(fp8_cutlass_order, element="e4m3", accumulation_model=r["accumulation_model"],
                      epilogue=r["fp8_epilogue"]["formula"])
    layers = qc.synth("tiny", m=16, seed=7, element="e4m3")
    v = qc.verify("cpu:fp8-sequential", declared, layers, scales="real")
    assert v["runs"] and all(run["formula_mismatch"][1] == 0 for run in v["runs"]), [run["formula_mismatch"] for run in v["runs"]]


def test_a_two_argument_callable_is_told_how_to_be_an_fp8_arm(qc):
    with pytest.raises(qc.InputError, match="element='e4m3'"):
        qc.arm(sequential_gemm)
    # With element= it is an unscaled FP8 GEMM whose model identify measures.
    arm = qc.arm(sequential_gemm, element="e4m3")
    assert arm.info["epilogue"] == "fp8-scaled" and arm.info["accumulation_model"] == ""
    r = qc.identify(arm)
    assert r["verdict"] == "identified" and r["named"] == ["sequential"], r["printout"]
    assert r["fp8_epilogue"]["named"] == ["fp8-scaled"], r["printout"]
