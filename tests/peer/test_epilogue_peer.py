"""Peer test of the epilogues (tests/tools/qc_epilogue.cpp) against references no one here wrote
the arithmetic of: Python's `fractions.Fraction` for the exact real value (rounded to bf16 by a
routine written here from the IEEE definition), numpy float32 arithmetic for the fp32 formulas and
ml_dtypes for the float32 -> bfloat16 conversion.

Run: QCONFORM_BUILD=$PWD/build-<name> python3 -m pytest -q tests/peer/test_epilogue_peer.py
"""
import random
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from conftest import run, tool

N_CASES = 100_000


def exact_fraction_of_f32(bits: int) -> Fraction:
    return Fraction(float(np.uint32(bits).view(np.float32)))


def round_fraction(v: Fraction, p: int, emin: int, emax: int):
    """Rounds v to a binary format with p-bit significands (RNE, subnormals below 2^emin).
    Returns the rounded Fraction, or +-inf as a float when it overflows."""
    if v == 0:
        return Fraction(0)
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    q = Fraction(2) ** (max(e, emin) - (p - 1))
    scaled = a / q
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    r = n * q
    # overflow: anything that rounds to 2^(emax+1) or beyond is inf
    if r >= Fraction(2) ** (emax + 1):
        return float("-inf") if v < 0 else float("inf")
    return -r if v < 0 else r


def bf16_bits_of(value, negative_zero=False) -> int:
    if isinstance(value, float):  # inf
        return 0xFF80 if value < 0 else 0x7F80
    if value == 0:
        return 0x8000 if negative_zero else 0x0000
    f = np.float32(float(value))  # exact: value is a bf16 number
    return int(np.array([f], dtype=np.float32).view(np.uint32)[0]) >> 16


def exact_ref(acc, sa_bits, sw_bits, bias_bits):
    sa, sw = exact_fraction_of_f32(sa_bits), exact_fraction_of_f32(sw_bits)
    v = acc * sa * sw
    neg_zero = acc == 0 and ((sa_bits >> 31) != (sw_bits >> 31))
    if bias_bits is not None:
        b = exact_fraction_of_f32(bias_bits << 16)
        prod_zero = v == 0
        v = v + b
        if v == 0:
            neg_zero = prod_zero and neg_zero and (bias_bits >> 15) == 1
    r = round_fraction(v, 8, -126, 127)
    if v < 0:  # a negative value that rounds to zero is -0
        neg_zero = True
    return bf16_bits_of(r, neg_zero)


def fma_ref(acc, sa_bits, sw_bits, bias_bits):
    """vllm-cutlass-fma with a bias: bf16(fma(sa, rn32(f32(acc)*sw), f32(bias)))."""
    sa = np.uint32(sa_bits).view(np.float32)
    sw = np.uint32(sw_bits).view(np.float32)
    t = np.float32(np.float32(acc) * sw)
    s = Fraction(float(sa)) * Fraction(float(t)) + exact_fraction_of_f32(bias_bits << 16)
    r = round_fraction(s, 24, -126, 127)
    f = np.float32(float(r)) if not isinstance(r, float) else np.float32(r)
    if r == 0:
        return None  # sign of a zero FMA result: not compared here
    return int(np.array([f]).astype(ml_dtypes.bfloat16).view(np.uint16)[0])


def make_cases(seed):
    rng = random.Random(seed)
    cases = []
    for i in range(N_CASES):
        kind = i % 5
        bias = None
        if kind == 0:  # realistic: |acc| < 2^24, scales ~ 2^-10, bias sometimes
            acc = rng.randint(-(1 << 24), 1 << 24)
            sa = np.float32(rng.uniform(2**-12, 2**-4))
            sw = np.float32(rng.uniform(2**-12, 2**-6))
        elif kind == 1:  # ties: (odd 9-bit) * 2^k exactly, pow2 scales
            acc = (2 * rng.randint(128, 255) + 1) * (1 << rng.randint(0, 20)) * rng.choice([-1, 1])
            sa = np.float32(2.0 ** rng.randint(-60, 20))
            sw = np.float32(2.0 ** rng.randint(-60, 20))
        elif kind == 2:  # subnormal outputs
            acc = rng.randint(-(1 << 30), 1 << 30)
            sa = np.float32(rng.uniform(1, 2) * 2.0 ** rng.randint(-90, -70))
            sw = np.float32(rng.uniform(1, 2) * 2.0 ** rng.randint(-90, -70))
        elif kind == 3:  # overflow region and int64 accumulators
            acc = rng.randint(-(1 << 62), 1 << 62)
            sa = np.float32(rng.uniform(1, 2) * 2.0 ** rng.randint(20, 45))
            sw = np.float32(rng.uniform(1, 2) * 2.0 ** rng.randint(20, 45))
        else:  # any finite bit patterns
            acc = rng.randint(-(1 << 63), (1 << 63) - 1) >> rng.randint(0, 63)
            while True:
                sa = np.uint32(rng.getrandbits(32)).view(np.float32)
                sw = np.uint32(rng.getrandbits(32)).view(np.float32)
                if np.isfinite(sa) and np.isfinite(sw):
                    break
        if rng.random() < 0.5:
            while True:
                bias = rng.getrandbits(16)
                if (bias & 0x7F80) != 0x7F80:
                    break
            if kind == 1 and rng.random() < 0.5:  # tiny bias next to a tie: sticky bit
                bias = rng.choice([0x0001, 0x8001, 0x0080, 0x8080])
        sa_bits = int(np.array([sa], dtype=np.float32).view(np.uint32)[0])
        sw_bits = int(np.array([sw], dtype=np.float32).view(np.uint32)[0])
        cases.append((acc, sa_bits, sw_bits, bias, rng.choice([1, 16, 17, 64, 512]), rng.choice([128, 1280, 1281, 4096])))
    return cases


@pytest.fixture(scope="module")
def evaluated():
    names = run([tool("qc_epilogue"), "--names"]).stdout.split()
    cases = make_cases(20260813)
    lines = "".join(
        f"{acc} {sa:08x} {sw:08x} {'-' if b is None else format(b, '04x')} {m} {n}\n" for acc, sa, sw, b, m, n in cases
    )
    out = run([tool("qc_epilogue")], input=lines).stdout.splitlines()
    assert len(out) == len(cases)
    rows = [dict(zip(names, line.split())) for line in out]
    return names, cases, rows


def test_names(evaluated):
    names, _, _ = evaluated
    assert names == ["vllm-cutlass", "vllm-cutlass-fma", "vllm-cutlass-muladd", "vllm-triton", "sglang-sm89",
                     "sglang-sm90", "exact"]


def test_exact_against_fraction(evaluated):
    _, cases, rows = evaluated
    bad = []
    stats = {"subnormal": 0, "inf": 0, "bias": 0}
    for (acc, sa, sw, b, _, _), row in zip(cases, rows):
        want = exact_ref(acc, sa, sw, b)
        got = int(row["exact"], 16)
        if got != want:
            bad.append(f"acc={acc} sa=0x{sa:08x} sw=0x{sw:08x} bias={b} got 0x{got:04x} want 0x{want:04x}")
        stats["subnormal"] += (got & 0x7F80) == 0 and (got & 0x7F) != 0
        stats["inf"] += (got & 0x7FFF) == 0x7F80
        stats["bias"] += b is not None
    assert not bad, f"{len(bad)} of {len(cases)} differ; first: " + "; ".join(bad[:5])
    assert stats["subnormal"] > 1000 and stats["inf"] > 1000 and stats["bias"] > 40000, stats


def test_fp32_formulas_against_numpy_and_ml_dtypes(evaluated):
    _, cases, rows = evaluated
    acc = np.array([c[0] for c in cases], dtype=np.int64)
    sa = np.array([c[1] for c in cases], dtype=np.uint32).view(np.float32)
    sw = np.array([c[2] for c in cases], dtype=np.uint32).view(np.float32)
    has_b = np.array([c[3] is not None for c in cases])
    b = np.array([0 if c[3] is None else c[3] for c in cases], dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
    m = np.array([c[4] for c in cases])
    n = np.array([c[5] for c in cases])
    with np.errstate(all="ignore"):
        fa = acc.astype(np.float32)  # int64 -> fp32, round to nearest even
        cut = sa * (fa * sw)
        tri = (fa * sa) * sw
        sm89 = fa * (sw * sa)
        swap = (m <= 16) | ((m <= 64) & (n > 1280))
        sm90 = np.where(swap, tri, cut)
        muladd = np.where(has_b, cut + b, cut)
        tri_b = np.where(has_b, tri.astype(ml_dtypes.bfloat16).astype(np.float32) + b, tri)
        sm89_b = np.where(has_b, sm89 + b, sm89)

    def bits(x):
        return x.astype(ml_dtypes.bfloat16).view(np.uint16)

    def got(name):
        return np.array([int(r[name], 16) if r[name] != "-" else -1 for r in rows])

    for name, want, mask in [
        ("vllm-cutlass", bits(cut), ~has_b),
        ("vllm-cutlass-muladd", bits(muladd), np.ones_like(has_b)),
        ("vllm-triton", bits(tri_b), np.ones_like(has_b)),
        ("sglang-sm89", bits(sm89_b), np.ones_like(has_b)),
        ("sglang-sm90", bits(sm90), ~has_b),
    ]:
        g = got(name)
        w = want.astype(np.int64)
        # NaN outputs (inf*0 from extreme random scales) compare as NaN patterns: both must be NaN
        gnan = ((g & 0x7F80) == 0x7F80) & ((g & 0x7F) != 0)
        wnan = ((w & 0x7F80) == 0x7F80) & ((w & 0x7F) != 0)
        diff = mask & ~(gnan & wnan) & (g != w)
        idx = np.flatnonzero(diff)
        assert idx.size == 0, (
            f"{name}: {idx.size} differ; first: "
            + "; ".join(f"case {i} {cases[i]} got 0x{g[i]:04x} want 0x{w[i]:04x}" for i in idx[:5])
        )
    # refusals
    assert all(r["vllm-cutlass"] == "-" and r["sglang-sm90"] == "-" for r, hb in zip(rows, has_b) if hb)


def test_fma_variant_against_fraction(evaluated):
    _, cases, rows = evaluated
    checked = bad = 0
    first = []
    for (acc, sa, sw, b, _, _), row in zip(cases, rows):
        if b is None or abs(acc) > (1 << 40):
            continue
        sa_f = np.uint32(sa).view(np.float32)
        sw_f = np.uint32(sw).view(np.float32)
        with np.errstate(all="ignore"):
            t = np.float32(np.float32(acc) * sw_f)
        if not (np.isfinite(t) and np.isfinite(sa_f)):
            continue
        want = fma_ref(acc, sa, sw, b)
        if want is None:
            continue
        checked += 1
        got = int(row["vllm-cutlass-fma"], 16)
        if got != want:
            bad += 1
            first.append(f"acc={acc} sa=0x{sa:08x} sw=0x{sw:08x} b=0x{b:04x} got 0x{got:04x} want 0x{want:04x}")
    assert checked > 20000
    assert bad == 0, "; ".join(first[:5])
