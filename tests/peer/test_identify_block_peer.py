"""identify on block-scaled FP8 kernels written here (issue #30 item 3) from the reference's description
(../shared/reference/block-fp8-and-cutlass.md), in NumPy float32 with ml_dtypes decoding e4m3 and an exact
fused multiply-add (float64 product, round-to-odd sum, one rounding to float32), not by calling qconform's
block model:

- a Triton-style kernel (SGLang/vLLM `_w8a8_block_fp8_matmul`: per 128-wide K block `acc += dot * a_s * b_s`,
  the last multiply and the add contracted), a DeepGEMM-style one (sm90 1d2d: `scale = sa * sb; final +=
  scale * acc`, nvcc's FFMA) and a CUTLASS-style one (sm90 blockwise: promotion every ScalePromotionInterval
  = 4 mma steps of 32, `accum += temp * scale` with the scale product formed first, one scale of A per
  tile), each with the exact sum per block rounded once to fp32 (a float64 matmul): each identified as
  its row of the block model table with every held-out output explained, and verify on it with the
  identified model declared: predicted == observed;
- a kernel outside the table (promotion every 64 products within 128-wide scale blocks): `unexplained`
  at the per-block chain length, with the nearest candidate and the separating outputs.

The callables return their fp32 D (the block-scaled callable's signature); identify reads only the bf16
output qconform rounds it to. The same kernels as whole kernels of the INT8 signature (fn(a_q, a_scale, w_q,
w_scale, bias) -> y, y = bf16(D) rounded here with ml_dtypes) declare nothing at all (`element="e4m3",
block_size=(128, 128)`): identify measures their blocks, chain and form from y alone, and the model it
names, declared back, predicts verify.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_identify_block_peer.py
"""
import ml_dtypes
import numpy as np
import pytest

from test_python_binding import qc  # noqa: F401  (the fixture that finds or builds the extension)

F32 = np.float32


def e4m3(codes):
    return np.asarray(codes, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(F32)


def fma32(x, y, z):
    """fl32(x*y + z) with one rounding: the float64 product of two float32 is exact; the sum is rounded
    to odd in float64 (TwoSum's error decides the sticky bit), which then rounds correctly to float32."""
    p = np.asarray(x, np.float64) * np.asarray(y, np.float64)
    z = np.asarray(z, np.float64)
    s = p + z
    bb = s - p
    err = (p - (s - bb)) + (z - bb)
    even = (s.view(np.int64) & 1) == 0
    fix = (err != 0) & even
    s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(F32)


def slice_sums(a, w, k0, k1):
    """The exact sum over k0..k1-1, rounded once to float32: a float64 matmul is exact here (at most 128
    products of e4m3, each a multiple of 2^-18 below 2^18: fewer than 53 bits in all)."""
    return (a[:, k0:k1].astype(np.float64) @ w[:, k0:k1].astype(np.float64).T).astype(F32)


def block_kernel(promote, slice_k=None):
    """fn(a, w, a_scale, w_scale, block_size) -> D: per slice of `slice_k` products (default the K block of
    the scales) the exact sum rounded to fp32, promoted with its K block's scales by `promote(C, sa, sb, D)`."""

    def fn(a, w, a_scale, w_scale, block_size):
        bn, bk = int(block_size[0]), int(block_size[1])
        av, wv = e4m3(a), e4m3(w)
        m, k = av.shape
        n = wv.shape[0]
        sa = np.asarray(a_scale, F32).reshape(m, -1)
        sw = np.asarray(w_scale, F32)
        sw = sw.reshape(-1, 1) if sw.ndim == 1 else sw
        rows = np.arange(n) // bn if sw.shape[0] != n else np.arange(n)
        step = slice_k or bk
        d = np.zeros((m, n), F32)
        for k0 in range(0, k, step):
            b = k0 // bk
            c = slice_sums(av, wv, k0, min(k, k0 + step))
            ca = sa[:, min(b, sa.shape[1] - 1)][:, None]
            cb = sw[rows, min(b, sw.shape[1] - 1)][None, :]
            d = promote(c, ca, cb, d)
        return d

    return fn


def triton_promote(c, sa, sb, d):  # accumulator += tl.dot(a, b) * a_s * b_s, contracted
    return fma32((c * sa).astype(F32), sb, d)


def deepgemm_promote(c, sa, sb, d):  # scale = sa * sb; final_accum += scale * accum (FFMA)
    return fma32((sa * sb).astype(F32), c, d)


def cutlass_promote(c, sa, sb, d):  # scale = tCrSFA * tCrSFB first; accum += temp * scale (FFMA)
    return fma32(c, (sa * sb).astype(F32), d)


KERNELS = {
    "triton": (block_kernel(triton_promote), "block-triton+exact"),
    "deepgemm": (block_kernel(deepgemm_promote), "block-deepgemm+exact"),
    "cutlass": (block_kernel(cutlass_promote), "block-deepgemm+exact"),
}


def block_layers(qc):
    return qc.synth("24x160x520,24x96x256", element="e4m3", act_scale="per-token-group:128",
                    weight_scale="per-block:128x128", seed=3)



@pytest.mark.parametrize("style", sorted(KERNELS))
def test_a_block_kernel_is_identified_and_its_model_predicts_verify(qc, style):
    fn, want = KERNELS[style]
    # Declared with a deliberately wrong model: identify measures, it does not read the claim.
    arm = qc.arm(fn, name=f"peer:{style}-block", accumulation_model="block-triton-nofma")
    r = qc.identify(arm)
    assert r["verdict"] == "identified", r["printout"]
    assert r["block_model"] == want, r["printout"]
    assert r["explained"]["outputs"] > 10000
    assert r["explained"]["matching"] == r["explained"]["outputs"], r["printout"]
    assert r["block"]["k_block"] == 128 and r["block"]["n_block"] == 128
    assert r["block"]["promotion_interval"] == 128
    assert "run" in r["block"]["chain_measured_through"], r["printout"]
    # Declared as identified, verify predicts every differing element against cpu:fp8-block-triton.
    declared = qc.arm(fn, name=f"peer:{style}-block", accumulation_model=r["declaration"])
    v = qc.verify("cpu:fp8-block-triton", declared, block_layers(qc), scales="real")
    assert v["runs"], v
    assert all(run["predicted_equals_observed"] for run in v["runs"]), [run.get("predicted_equals_observed") for run in v["runs"]]


def test_promotion_every_64_products_is_unexplained_at_the_chain_length(qc):
    arm = qc.arm(block_kernel(triton_promote, slice_k=64), name="peer:triton-block-k64", accumulation_model="block-triton")
    r = qc.identify(arm)
    assert r["verdict"] == "unexplained", r["printout"]
    assert r["block"]["verdict_stage"] == "per-block chain length", r["printout"]
    assert r["block"]["promotion_interval"] == 64, r["printout"]
    assert "every 64 products" in r["reason"], r["reason"]
    assert r["nearest"] and r["nearest"][0]["separating_probes"] > 0, r["printout"]
    assert r["diagnosis"][0]["first"], r["printout"]


def as_kernel(fn):
    """The block kernel as a whole kernel of the INT8 signature: y = bf16(D), rounded to nearest even by
    ml_dtypes (not by qconform)."""

    def kernel(a_q, a_scale, w_q, w_scale, bias):
        assert bias is None
        d = fn(a_q, w_q, a_scale, w_scale, [128, 128])
        return np.asarray(d, F32).astype(ml_dtypes.bfloat16)

    return kernel


@pytest.mark.parametrize("style", sorted(KERNELS))
def test_an_undeclared_block_kernel_is_identified_from_its_bf16_output(qc, style):
    fn, want = KERNELS[style]
    arm = qc.arm(as_kernel(fn), name=f"peer:{style}-block-kernel", element="e4m3", block_size=(128, 128))
    info = arm.info
    assert info["accumulation_model"] == "" and info["fp8"] and info["block_scaled"], info
    r = qc.identify(arm)
    assert r["verdict"] == "identified", r["printout"]
    assert r["block_model"] == want, r["printout"]
    assert r["explained"]["outputs"] > 10000
    assert r["explained"]["matching"] == r["explained"]["outputs"], r["printout"]
    # Declared back (element="e4m3" keeps the kernel's signature), verify predicts every differing element.
    declared = qc.arm(as_kernel(fn), name=f"peer:{style}-block-kernel", element="e4m3", block_size=(128, 128),
                      accumulation_model=r["declaration"])
    v = qc.verify("cpu:fp8-block-triton", declared, block_layers(qc), scales="real")
    assert v["runs"], v
    assert all(run["predicted_equals_observed"] for run in v["runs"]), [run.get("predicted_equals_observed") for run in v["runs"]]
    # Undeclared, verify runs it and predicts nothing: its differences are not predicted (null, never "pass").
    u = qc.verify("cpu:fp8-block-triton", arm, block_layers(qc), scales="real")
    assert u["runs"] and all(run["predicted_equals_observed"] is None for run in u["runs"]), u["runs"][0]
