"""Peer test of the FP8 accumulation models (tests/tools/qc_fp8_model.cpp: the scalar reference and
the fast evaluation of src/accum/) against an implementation written here from the text of
../shared/reference/fp8-accumulation.md alone: ml_dtypes decodes the codes, Python's `Fraction`
does every sum exactly, and the rounding routines below follow the text (truncation toward zero to
a multiple of 2^(E-13); 13 fraction bits relative to the sum's own exponent; fp32 adds as round to
nearest even to 24 significant bits). `sequential` is checked against a numpy float32 loop.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_accumulation_peer.py
"""
import random
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from conftest import run, tool

DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
MIN_NORMAL_EXP = {"e4m3": -6, "e5m2": -14}


def value(code, fmt):
    return Fraction(float(np.array([code], dtype=np.uint8).view(DTYPES[fmt])[0]))


def finite(code, fmt):
    return bool(np.isfinite(np.array([code], dtype=np.uint8).view(DTYPES[fmt]).astype(np.float32))[0])


def flog2(x):
    """floor(log2 |x|) of a nonzero Fraction, exactly."""
    x = abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > x else e


def exponent(code, fmt):
    """e(x) of the reference: floor(log2|x|) for normal x, the minimum normal exponent for subnormal x."""
    v = value(code, fmt)
    return max(flog2(v), MIN_NORMAL_EXP[fmt])


def trunc_to_multiple(x, q):
    n = abs(x) // q  # floor of the magnitude: truncation toward zero
    return (n * q) if x >= 0 else -(n * q)


def trunc_relative(x, bits):
    if x == 0:
        return Fraction(0)
    return trunc_to_multiple(x, Fraction(2) ** (flog2(x) - bits))


def rne_relative(x, bits):
    """Round to nearest even on the grid of `bits` fraction bits relative to x's own exponent."""
    if x == 0:
        return Fraction(0)
    q = Fraction(2) ** (flog2(x) - bits)
    n, rem = divmod(abs(x), q)
    if rem * 2 > q or (rem * 2 == q and n % 2 == 1):
        n += 1
    return n * q if x > 0 else -(n * q)


def hopper_step(c, products):
    """One wgmma step: D = C + sum of products, per the five numbered rules of the reference."""
    terms = [(p, ea + eb) for p, ea, eb in products if p != 0]
    exps = [e for _, e in terms] + ([flog2(c)] if c != 0 else [])
    if not exps:
        return Fraction(0)
    big_e = max(exps)
    q = Fraction(2) ** (big_e - 13)
    s = trunc_to_multiple(c, q) + sum((trunc_to_multiple(p, q) for p, _ in terms), Fraction(0))
    return trunc_relative(s, 13)


def hopper(a, w, fa, fw, promote):
    prods = [(value(x, fa) * value(y, fw), exponent(x, fa), exponent(y, fw)) for x, y in zip(a, w)]
    steps = [prods[i:i + 32] for i in range(0, len(prods), 32)]
    if promote is None:
        c = Fraction(0)
        for st in steps:
            c = hopper_step(c, st)
        return c
    d = Fraction(0)
    for i in range(0, len(steps), promote):
        c = Fraction(0)
        for st in steps[i:i + promote]:
            c = hopper_step(c, st)
        d = rne_relative(d + c, 23)  # an fp32 add
    return d


def exact(a, w, fa, fw):
    return rne_relative(sum((value(x, fa) * value(y, fw) for x, y in zip(a, w)), Fraction(0)), 23)


def sequential(a, w, fa, fw):
    acc = np.float32(0)
    va = np.array(a, dtype=np.uint8).view(DTYPES[fa]).astype(np.float32)
    vw = np.array(w, dtype=np.uint8).view(DTYPES[fw]).astype(np.float32)
    for x, y in zip(va, vw):
        acc = np.float32(acc + np.float32(x * y))  # the product is exact in fp32
    return Fraction(float(acc))


def cublaslt_split_k(a, w, fa, fw, promote, splits):
    """cuBLASLt's split-K (docs/accumulation.md, "Split-K"): K in `splits` ranges of
    ceil(K / (128 * splits)) * 128 products (the last shorter, trailing ones possibly empty), each
    range one Hopper chain (or promoted chains), the partials added in ascending order in fp32."""
    k = len(a)
    size = -(-k // (128 * splits)) * 128
    total = Fraction(0)
    for r in range(splits):
        r0, r1 = min(r * size, k), (k if r + 1 == splits else min((r + 1) * size, k))
        total = rne_relative(total + hopper(a[r0:r1], w[r0:r1], fa, fw, promote), 23)
    return total


PEERS = {
    "hopper-fp8-chain": lambda a, w, fa, fw: hopper(a, w, fa, fw, None),
    "hopper-fp8-promote4": lambda a, w, fa, fw: hopper(a, w, fa, fw, 4),
    "exact": exact,
    "sequential": sequential,
    "hopper-fp8-chain-splitk-3": lambda a, w, fa, fw: cublaslt_split_k(a, w, fa, fw, None, 3),
    "hopper-fp8-promote4-splitk-2": lambda a, w, fa, fw: cublaslt_split_k(a, w, fa, fw, 4, 2),
}


def f32_bits(x):
    f = np.float32(float(x))
    assert Fraction(float(f)) == x, f"{x} is not an fp32 value"
    return int(np.array([f], dtype=np.float32).view(np.uint32)[0])


def make_cases(seed):
    rng = random.Random(seed)
    cases = []
    for i in range(240):
        fa, fw = rng.choice([("e4m3", "e4m3"), ("e5m2", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e5m2")])
        k = rng.choice([1, 2, 5, 31, 32, 33, 64, 100, 129, 160, 257, 520])
        kind = i % 4

        def code(fmt, j):
            while True:
                if kind == 1:  # subnormal-heavy: exponent field 0 or 1
                    c = rng.randrange(256) & (0x8F if fmt == "e4m3" else 0x87)
                elif kind == 2 and j % 2:  # cancellation: odd k negates the previous magnitude
                    c = rng.randrange(256)
                elif kind == 3:  # near the largest magnitudes
                    c = (0x7E - rng.randrange(4) if fmt == "e4m3" else 0x7B - rng.randrange(4)) | (rng.randrange(2) << 7)
                else:
                    c = rng.randrange(256)
                if finite(c, fmt):
                    return c

        a = [code(fa, j) for j in range(k)]
        w = [code(fw, j) for j in range(k)]
        if kind == 2:
            for j in range(1, k, 2):
                a[j] = a[j - 1] ^ 0x80
                w[j] = w[j - 1]
        cases.append((fa, fw, a, w))
    return cases


@pytest.fixture(scope="module")
def results():
    names = run([tool("qc_fp8_model"), "--names"]).stdout.split()
    assert {n for n in PEERS if "-splitk-" not in n} <= set(names), names
    cases = make_cases(20261201)
    lines = []
    for name in PEERS:
        for fa, fw, a, w in cases:
            lines.append(f"{name} {fa} {fw} {len(a)} {bytes(a).hex()} {bytes(w).hex()}\n")
    out = run([tool("qc_fp8_model")], input="".join(lines)).stdout.splitlines()
    assert len(out) == len(lines)
    return cases, out


@pytest.mark.parametrize("name", list(PEERS))
def test_models_against_peer(results, name):
    cases, out = results
    offset = list(PEERS).index(name) * len(cases)
    bad = []
    for i, (fa, fw, a, w) in enumerate(cases):
        ref, fast = (int(x, 16) for x in out[offset + i].split())
        want = f32_bits(PEERS[name](a, w, fa, fw))
        if ref != want or fast != want:
            bad.append(f"case {i} ({fa} x {fw}, K={len(a)}): peer {want:08x}, reference {ref:08x}, fast {fast:08x}; "
                       f"a={bytes(a[:8]).hex()}.. w={bytes(w[:8]).hex()}..")
    assert not bad, f"{len(bad)} of {len(cases)} cases differ:\n" + "\n".join(bad[:5])


def test_nonfinite_codes_are_refused():
    lines = "hopper-fp8-chain e4m3 e4m3 2 387f 3838\nexact e5m2 e4m3 1 7c 38\nexact e4m3 e5m2 1 38 7e\n"
    out = run([tool("qc_fp8_model")], input=lines).stdout.splitlines()
    assert out[0].startswith("error ") and "a[0,1] = 0x7f is a NaN encoding" in out[0], out[0]
    assert out[1].startswith("error ") and "an infinity encoding" in out[1], out[1]
    assert out[2].startswith("error ") and "w[0,0] = 0x7e is a NaN encoding" in out[2], out[2]
