"""Peer tests: qconform's scalar conversions (driven through tests/tools/qc_convert.cpp) against
ml_dtypes (bf16, e4m3fn, e5m2) and numpy (fp16, int8 rounding), bit for bit, on more than 10^7
float32 inputs that include every rounding-tie class, NaN, ±0, subnormals and overflow.

Where qconform and the peer differ *by design*, the test names the mode and checks the documented
behaviour instead (see docs/numerics.md):
  * bf16, NaN inputs: ml_dtypes returns the canonical quiet NaN (sign kept, payload dropped);
    qconform keeps the top payload bits and sets the quiet bit.
  * fp16, signalling-NaN inputs: numpy keeps the NaN signalling; qconform quiets it (F16C).
  * e4m3-sat / e5m2-sat: ml_dtypes' astype is non-saturating; the saturating mode (PTX
    `.satfinite`) is checked against ml_dtypes applied to np.clip(x, -max, max).

    QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_numerics_peer.py
"""
import importlib.util

import numpy as np
import ml_dtypes
import pytest

from conftest import REPO, run, tool

BF16, E4M3, E5M2 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
F32_INF_BITS = 0x7F800000


def _finite_grid(dtype, nbits):
    """All finite non-negative values of a narrow dtype, sorted, plus the next grid point past max."""
    pats = np.arange(2 ** (nbits - 1), dtype=np.uint8 if nbits == 8 else np.uint16)
    vals = pats.view(dtype).astype(np.float64)
    vals = np.unique(vals[np.isfinite(vals)])
    return np.append(vals, vals[-1] + (vals[-1] - vals[-2]))


def _around(x32):
    """x and its two fp32 neighbours, both signs."""
    x32 = x32.astype(np.float32)
    up = np.nextafter(x32, np.float32(np.inf))
    down = np.nextafter(x32, np.float32(0))
    both = np.concatenate([x32, up, down])
    return np.concatenate([both, -both])


def make_inputs():
    rng = np.random.default_rng(20240611)
    parts = []
    # 1. Uniform over all 2^32 bit patterns: every class in proportion (about 0.4% NaN).
    parts.append(rng.integers(0, 2 ** 32, size=5_000_000, dtype=np.uint64).astype(np.uint32))
    # 2. bf16 tie classes for every upper half: exact tie (kept bit even and odd), tie ± 1 ulp,
    #    exact bf16 values, the largest truncation.
    hi = np.arange(2 ** 16, dtype=np.uint32) << 16
    for low in (0x0000, 0x7FFF, 0x8000, 0x8001, 0xFFFF):
        parts.append(hi | np.uint32(low))
    # 3. fp16 ties of every normal binade and their neighbours: low 13 bits 0x0FFF/0x1000/0x1001.
    hi13 = np.arange(2 ** 19, dtype=np.uint32) << 13
    for low in (0x0FFF, 0x1000, 0x1001):
        parts.append(hi13 | np.uint32(low))
    as_bits = [p.view(np.uint32) for p in parts]
    floats = [np.concatenate(as_bits).view(np.float32)]
    # 4. Every midpoint of the fp16, e4m3fn and e5m2 grids (subnormal ties, the tie above max),
    #    with fp32 neighbours and both signs.
    for dtype, nbits in ((np.float16, 16), (E4M3, 8), (E5M2, 8)):
        g = _finite_grid(dtype, nbits)
        floats.append(_around((g[:-1] + g[1:]) / 2))
        floats.append(_around(g))
    # 5. Log-uniform magnitudes across and beyond each format's range (subnormal to overflow).
    for lo, hi_e in ((-140, 128), (-26, 17), (-12, 10), (-18, 17)):
        e = rng.uniform(lo, hi_e, size=1_000_000)
        sign = rng.choice([-1.0, 1.0], size=e.size)
        floats.append((sign * np.exp2(e)).astype(np.float32))
    # 6. int8 rounding: half-integers, integers and their neighbours over [-200, 200].
    halves = np.arange(-400, 401, dtype=np.float32) / 2
    floats.append(_around(halves))
    floats.append(rng.uniform(-200, 200, size=500_000).astype(np.float32))
    # 7. Specials: ±0, ±inf, fp32 subnormals, fp32 max, NaNs (quiet, signalling, payloads, signs).
    nan_bits = np.array([0x7FC00000, 0x7F800001, 0x7FA00000, 0x7FFFFFFF, 0x7FC00001, 0x7F80FFFF,
                         0x7FBFFFFF, 0x7FE12345, 0x7F812345], dtype=np.uint32)
    specials = np.concatenate([nan_bits, nan_bits | np.uint32(0x80000000),
                               np.array([0, 0x80000000, F32_INF_BITS, 0xFF800000, 1, 0x807FFFFF,
                                         0x7F7FFFFF, 0xFF7FFFFF], dtype=np.uint32),
                               rng.integers(1, 0x00800000, size=200_000, dtype=np.uint32)])
    floats.append(specials.view(np.float32))
    return np.ascontiguousarray(np.concatenate(floats), dtype=np.float32)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    x = make_inputs()
    assert x.size >= 10_000_000, x.size
    path = tmp_path_factory.mktemp("numerics") / "in.f32"
    x.tofile(path)
    return x, path


def convert(mode, in_path, out_dtype, tmp_path):
    out = tmp_path / f"{mode}.out"
    run([tool("qc_convert"), mode, in_path, out])
    return np.fromfile(out, dtype=out_dtype)


def assert_bits_equal(x, got, want, what, width):
    bad = np.nonzero(got != want)[0]
    if bad.size:
        rows = [f"x={x[i]!r} (0x{x.view(np.uint32)[i]:08x}): qconform 0x{int(got[i]):0{width}x} "
                f"peer 0x{int(want[i]):0{width}x}" for i in bad[:10]]
        pytest.fail(f"{what}: {bad.size} of {x.size} differ; first:\n  " + "\n  ".join(rows))


def test_input_set_covers_every_class(inputs):
    x, _ = inputs
    bits = x.view(np.uint32)
    low16 = bits & 0xFFFF
    assert np.count_nonzero(np.isnan(x)) > 10_000
    assert np.count_nonzero(np.isinf(x)) >= 2
    assert np.count_nonzero((bits & 0x7FFFFFFF) == 0) >= 2
    assert np.count_nonzero(((bits & 0x7F800000) == 0) & ((bits & 0x7FFFFF) != 0)) > 100_000  # subnormals
    ties = (low16 == 0x8000) & ~np.isnan(x)
    assert np.count_nonzero(ties & (((bits >> 16) & 1) == 0)) > 30_000  # bf16 ties, kept bit even
    assert np.count_nonzero(ties & (((bits >> 16) & 1) == 1)) > 30_000  # and odd
    assert np.count_nonzero(np.abs(x) > 57344) > 100_000  # overflow for both fp8 formats


def test_bf16_rne_matches_ml_dtypes(inputs, tmp_path):
    x, path = inputs
    got = convert("bf16", path, np.uint16, tmp_path)
    with np.errstate(invalid="ignore"):
        want = x.astype(BF16).view(np.uint16)
    nan = np.isnan(x)
    assert_bits_equal(x[~nan], got[~nan], want[~nan], "fp32->bf16 RNE (non-NaN)", 4)
    # By design: NaN keeps sign and top payload bits and becomes quiet; ml_dtypes canonicalises.
    xn = x[nan].view(np.uint32)
    assert np.all(np.isnan(got[nan].view(BF16).astype(np.float32)))
    assert_bits_equal(x[nan], got[nan], ((xn >> 16) | 0x0040).astype(np.uint16), "bf16 NaN policy", 4)
    assert np.array_equal(got[nan] >> 15, want[nan] >> 15)  # same sign as ml_dtypes


def test_python_bf16_rounding_equals_the_core(inputs, tmp_path):
    """The Python package's fp32 -> bf16 (python/qconform/_arrays.py, NumPy integer arithmetic: Python
    cannot include the C++ core) is pinned to the core's `f32_to_bf16` (qc_convert) bit for bit on the
    whole input set, NaN payloads included."""
    spec = importlib.util.spec_from_file_location("qconform_arrays", REPO / "python" / "qconform" / "_arrays.py")
    arrays = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(arrays)
    x, path = inputs
    core = convert("bf16", path, np.uint16, tmp_path)
    with np.errstate(invalid="ignore", over="ignore"):
        py = arrays.float32_to_bf16_bits(x)
    assert py.dtype == np.uint16
    assert_bits_equal(x, py, core, "python float32_to_bf16_bits vs the core", 4)
    back = arrays.bf16_bits_to_float32(core)
    assert np.array_equal(back.view(np.uint32), core.astype(np.uint32) << 16)  # exact widening


def test_bf16_rz_matches_ml_dtypes_stepped_toward_zero(inputs, tmp_path):
    """Truncation, derived from ml_dtypes' RNE: if RNE moved away from zero, step one bf16 back."""
    x, path = inputs
    got = convert("bf16-rz", path, np.uint16, tmp_path)
    with np.errstate(invalid="ignore"):
        rne = x.astype(BF16)
        away = np.abs(rne.astype(np.float64)) > np.abs(x.astype(np.float64))
    want = rne.view(np.uint16) - away.astype(np.uint16)  # sign-magnitude: magnitude - 1
    ok = ~np.isnan(x)
    assert_bits_equal(x[ok], got[ok], want[ok], "fp32->bf16 RZ (non-NaN)", 4)


def test_f16_matches_numpy(inputs, tmp_path):
    x, path = inputs
    got = convert("f16", path, np.uint16, tmp_path)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    bits = x.view(np.uint32)
    signalling = np.isnan(x) & ((bits & 0x00400000) == 0)
    assert_bits_equal(x[~signalling], got[~signalling], want[~signalling], "fp32->fp16 (non-signalling)", 4)
    # By design: a signalling NaN becomes quiet (x86 F16C does the same); numpy keeps it signalling.
    g = got[signalling]
    assert np.all(((g & 0x7C00) == 0x7C00) & ((g & 0x0200) != 0))
    assert np.array_equal(g >> 15, want[signalling] >> 15)


@pytest.mark.parametrize("fmt,dtype,max_value", [("e4m3", E4M3, 448.0), ("e5m2", E5M2, 57344.0)])
def test_fp8_non_saturating_matches_ml_dtypes(inputs, tmp_path, fmt, dtype, max_value):
    """Mode `saturate=false` is ml_dtypes' astype: overflow -> NaN (e4m3fn) or inf (e5m2)."""
    x, path = inputs
    got = convert(fmt, path, np.uint8, tmp_path)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(dtype).view(np.uint8)
    assert_bits_equal(x, got, want, f"fp32->{fmt} non-saturating (incl. NaN)", 2)


@pytest.mark.parametrize("fmt,dtype,max_value", [("e4m3", E4M3, 448.0), ("e5m2", E5M2, 57344.0)])
def test_fp8_saturating_matches_clip_then_ml_dtypes(inputs, tmp_path, fmt, dtype, max_value):
    """Mode `saturate=true` (PTX `.satfinite`): ±inf and overflow give ±max; NaN stays NaN.
    Peer: ml_dtypes applied to np.clip(x, -max, max) (clip keeps NaN)."""
    x, path = inputs
    got = convert(f"{fmt}-sat", path, np.uint8, tmp_path)
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.clip(x, np.float32(-max_value), np.float32(max_value)).astype(dtype).view(np.uint8)
        plain = x.astype(dtype).view(np.uint8)
    assert_bits_equal(x, got, want, f"fp32->{fmt} saturating", 2)
    # Where the modes differ, the non-saturating one gave NaN/inf and the saturating one ±max.
    differ = got != plain
    assert np.count_nonzero(differ) > 100_000
    assert np.all(np.isin(got[differ] & 0x7F, [0x7E if fmt == "e4m3" else 0x7B]))


def test_s8_rni_sat_matches_numpy_rint_clip(inputs, tmp_path):
    """PTX cvt.rni.sat.s8.f32: round half even (numpy rint), saturate to [-128, 127], NaN -> 0."""
    x, path = inputs
    got = convert("s8", path, np.int8, tmp_path)
    with np.errstate(invalid="ignore"):
        r = np.clip(np.rint(x.astype(np.float64)), -128, 127)
    want = np.where(np.isnan(x), 0, r).astype(np.int8)
    assert_bits_equal(x, got.view(np.uint8), want.view(np.uint8), "fp32->s8 rni sat", 2)


@pytest.mark.parametrize("fmt,dtype,nbits", [("bf16", BF16, 16), ("f16", np.float16, 16),
                                             ("e4m3", E4M3, 8), ("e5m2", E5M2, 8),
                                             ("e8m0", getattr(ml_dtypes, "float8_e8m0fnu", None), 8),
                                             ("e2m1", getattr(ml_dtypes, "float4_e2m1fn", None), 4)])
def test_decode_every_pattern_matches_peer(tmp_path, fmt, dtype, nbits):
    """Every pattern of every row the core decodes (e8m0 and e2m1: the MX rows, decoded but not
    encoded yet) against ml_dtypes' decoding."""
    if dtype is None:
        pytest.skip(f"SKIPPED: ml_dtypes {ml_dtypes.__version__} has no {fmt} dtype (0.5 or later has)")
    pats = np.arange(2 ** nbits, dtype=np.uint16 if nbits == 16 else np.uint8)
    path = tmp_path / f"{fmt}.bits"
    pats.tofile(path)
    got = convert(f"dec-{fmt}", path, np.float32, tmp_path)
    want = pats.view(dtype).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{fmt}: NaN patterns differ"
    assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    g, w = got[~nan].view(np.uint32), want[~nan].view(np.uint32)
    bad = np.nonzero(g != w)[0]
    assert bad.size == 0, f"{fmt}: {bad.size} decodes differ, first pattern 0x{int(pats[~nan][bad[0]]):x}"
    if nbits == 16:  # widening keeps NaN payloads exactly (a shift), like both peers
        assert np.array_equal(got[nan].view(np.uint32), want[nan].view(np.uint32))
