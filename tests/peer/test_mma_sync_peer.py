"""The chain `sm90-mma-sync-e4m3` (mma.sync.m16n8k32 e4m3 on sm_90, docs/accumulation.md) against a peer
written here from the hardware's description, not from qconform's model text: per 32-K instruction the
codes are widened to float16 (ml_dtypes), the first HMMA takes the k with k mod 4 in {0, 1} from zero,
the second the rest from the first's result, each HMMA aligning its 16 products and C to their largest
float16 exponent sum, truncating every term 25 bits below it and the sum to float32 (toward zero), then
one float32 add (NumPy, round to nearest even) into the block's accumulator; blocks of 128 added in
float32. Python's exact rationals do the HMMA sums. The peer uses the f16 exponents (an e4m3 subnormal
is an f16 normal); the model the Hopper rule (its minimum normal exponent): for e4m3 with 25 term bits
the two give the same grid wherever a term has bits below it (docs/accumulation.md), which this checks.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_mma_sync_peer.py
"""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from test_python_binding import qc  # noqa: F401  (the fixture that finds or builds the extension)

E4M3 = ml_dtypes.float8_e4m3fn


def f16_exponent(x):
    """floor(log2|x|) of a nonzero float16 value (every e4m3 value is a normal float16)."""
    return math.frexp(float(x))[1] - 1


def trunc_to(x, quantum):
    """x (a Fraction) truncated toward zero to a multiple of quantum."""
    q = abs(x) // quantum * quantum
    return q if x >= 0 else -q


def exponent(x):
    """floor(log2|x|) of a nonzero Fraction, exactly."""
    e = x.numerator.bit_length() - x.denominator.bit_length() if x > 0 else exponent(-x)
    while Fraction(2) ** e > abs(x):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(x):
        e += 1
    return e


def rz_fp32(x):
    """x (a Fraction) truncated toward zero to 24 significant bits (no fp32 subnormal or overflow here)."""
    return x if x == 0 else trunc_to(x, Fraction(2) ** (exponent(x) - 23))


def hmma(a16, w16, c):
    """One HMMA.16816.F32 output: 16 products and C aligned to the largest exponent, 25 bits kept."""
    exps = [f16_exponent(x) + f16_exponent(y) for x, y in zip(a16, w16) if x != 0 and y != 0]
    if c != 0:
        exps.append(exponent(c))
    if not exps:
        return Fraction(0)
    quantum = Fraction(2) ** (max(exps) - 25)
    s = trunc_to(c, quantum)
    for x, y in zip(a16, w16):
        s += trunc_to(Fraction(float(x)) * Fraction(float(y)), quantum)
    return rz_fp32(s)


def peer_d(a_codes, w_codes):
    """D of unit-scale blocks of 128 (the block form's promotion with scales 1 is D + C in fp32)."""
    a16 = a_codes.view(E4M3).astype(np.float16)
    w16 = w_codes.view(E4M3).astype(np.float16)
    m, k = a16.shape
    n = w16.shape[0]
    d = np.zeros((m, n), np.float32)
    for i in range(m):
        for j in range(n):
            total = np.float32(0)
            for b0 in range(0, k, 128):
                acc = np.float32(0)
                for i0 in range(b0, min(b0 + 128, k), 32):
                    idx = np.arange(i0, i0 + 32)
                    idx = idx[idx < min(b0 + 128, k)]
                    lo, hi = idx[(idx - i0) % 4 < 2], idx[(idx - i0) % 4 >= 2]
                    t = hmma(a16[i, lo], w16[j, lo], Fraction(0))
                    t = hmma(a16[i, hi], w16[j, hi], t)
                    acc = np.float32(acc + np.float32(t))  # exact: t has 24 bits
                total = np.float32(total + acc)
            d[i, j] = total
    return d


def codes(x):
    return np.clip(np.asarray(x, np.float32), -448, 448).astype(E4M3).view(np.uint8)


def heavy(rng, shape, lo, hi):
    e = rng.integers(lo, hi, size=shape).astype(np.float64)
    mant = rng.choice([1.0, 1.125, 1.25, 1.5, 1.75], size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape)
    return codes(np.where(rng.random(shape) < 0.3, 0.0, mant * 2.0 ** e * sign))


def block_layer(a, w):
    m, k = a.shape
    n = w.shape[0]
    kb = -(-k // 128)
    return {"name": "mma_sync_peer", "a_q": a, "a_type": "e4m3", "w_q": w, "w_type": "e4m3",
            "a_scale": np.ones((m, kb), np.float32), "w_scale": np.ones((-(-n // 128), kb), np.float32),
            "act_scale": "per-token-group:128", "weight_scale": "per-block:128x128"}


@pytest.mark.parametrize("k,lo,hi", [(128, -9, 9), (200, -9, 9), (256, -9, -3), (72, -3, 9)])
def test_model_equals_the_hmma_peer(qc, k, lo, hi):
    rng = np.random.default_rng(k * 31 + hi)
    a, w = heavy(rng, (12, k), lo, hi), heavy(rng, (9, k), lo, hi)
    got = np.asarray(qc.run("cpu:fp8-block-triton+sm90-mma-sync-e4m3", block_layer(a, w))["d"], np.float32)
    want = peer_d(a, w)
    off = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
    assert off.size == 0, "; ".join(
        f"d[{i},{j}]: model {got[i, j]!r} ({got.view(np.uint32)[i, j]:#010x}), peer {want[i, j]!r} "
        f"({want.view(np.uint32)[i, j]:#010x})" for i, j in off[:5]) + f" ({len(off)} of {got.size} differ)"
    # The order matters on these operands: the same steps in K order are off somewhere (a check that can fail).
    k_order = np.asarray(qc.run("cpu:fp8-block-triton+fp8-model(step_k=16,term_bits=25,term_rounding=rz,"
                                "result_bits=23,result_rounding=rz,promote_steps=2)", block_layer(a, w))["d"], np.float32)
    if lo < -3 and hi > 3:
        assert (k_order.view(np.uint32) != want.view(np.uint32)).any()


def test_designed_triples(qc):
    # +-2^8 at two positions and one small term: the small one survives only in a step without them.
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(48):
        p, p2, q = rng.choice(128, size=3, replace=False)
        r = np.zeros(128, np.float32)
        r[p], r[p2], r[q] = 256.0, -256.0, rng.choice([2.0 ** -6, 2.0 ** -9, 1.5 * 2.0 ** -6])
        rows.append(r)
    a = codes(np.array(rows))
    w = codes(np.where(rng.random((6, 128)) < 0.5, 256.0, 2.0 ** -6))
    got = np.asarray(qc.run("cpu:fp8-block-triton+sm90-mma-sync-e4m3", block_layer(a, w))["d"], np.float32)
    want = peer_d(a, w)
    assert (got.view(np.uint32) == want.view(np.uint32)).all(), np.argwhere(got != want)[:5]
