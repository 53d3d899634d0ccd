"""Peer test of the FP8 quantizers (src/epilogue/quantize.cpp, through tests/tools/qc_quantize.cpp)
against numpy float32 arithmetic written here from the sources' formulas, with ml_dtypes doing every
FP8 and bf16 rounding:

- vLLM's dynamic FP8 activation path (csrc/quantization/w8a8/fp8/common.cu and common.cuh):
  per token `scale = fmax(absmax / FP8_MAX, 1 / (FP8_MAX * 512))`, `q = cast(fmax(-MAX, fmin(x /
  scale, MAX)))`; per tensor `scale = absmax / FP8_MAX` and `q = cast(clamp(x * (1 / scale)))`.
- compressed-tensors' "float-quantized" weights: `scale = absmax / 448` (per channel or per tensor),
  a zero scale replaced by the dtype's epsilon, `q = clamp(w / scale, -MAX, MAX).to(fp8)`.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_fp8_quantize_peer.py
"""
import ml_dtypes
import numpy as np
import pytest

from conftest import run, tool

F32 = np.float32
DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
MAX = {"e4m3": F32(448.0), "e5m2": F32(57344.0)}


def cast(v, fmt):
    """vLLM's `scaled_fp8_conversion` after the scale: clamp with fmin/fmax (NaN -> +MAX), then RNE."""
    r = np.fmax(-MAX[fmt], np.fmin(v.astype(F32), MAX[fmt]))
    return r.astype(DTYPES[fmt]).view(np.uint8)


def peer_act(x, fmt, scaling):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        absmax = np.fmax.reduce(np.abs(x), axis=1, initial=F32(0)).astype(F32)
        if scaling == "per-tensor":
            s = F32(np.fmax.reduce(absmax, initial=F32(0)) / MAX[fmt])
            inv = F32(F32(1) / s)
            return cast(x * inv, fmt), np.full(x.shape[0], s, dtype=F32)
        min_sf = F32(F32(1) / (MAX[fmt] * F32(512)))
        s = np.fmax(absmax / MAX[fmt], min_sf).astype(F32)
        return cast(x / s[:, None], fmt), s


def peer_weight(w, fmt, scaling, dtype):
    bf = ml_dtypes.bfloat16
    model = (lambda v: v.astype(bf).astype(F32)) if dtype == "bf16" else (lambda v: v.astype(F32))
    wm = model(w)
    absmax = np.abs(wm).max(axis=1)
    if scaling == "per-tensor":
        absmax = np.full_like(absmax, absmax.max())
    s = model(absmax / MAX[fmt])
    s[s == 0] = F32(2.0**-7) if dtype == "bf16" else F32(2.0**-23)
    return cast(model(wm / s[:, None]), fmt), s


def midpoints(fmt):
    """Every value exactly halfway between two neighbouring positive finite codes (ties)."""
    codes = np.arange(0x00, 0x7F if fmt == "e4m3" else 0x7C, dtype=np.uint8)
    v = codes.view(DTYPES[fmt]).astype(np.float64)
    return ((v[:-1] + v[1:]) / 2).astype(F32)  # exact: one more bit than the format


def division_sensitive_rows(fmt, rng, rows, k, same_absmax=False):
    """Rows whose codes depend on dividing by the scale rather than multiplying by its reciprocal:
    each row's absmax `a` fixes `scale = a / MAX` (one fp32 rounding, above the floor), and the other
    elements are fp32 values next to `midpoint * scale` for which `x / scale` and `x * (1 / scale)`
    round to different codes (a midpoint hit exactly by one of the two and missed by the other).
    `same_absmax`: every row gets the same `a` (a per-tensor tile)."""
    mids = midpoints(fmt)
    mids = mids[mids > mids.max() / 64]  # normal range, away from the floor
    out = []
    a = None
    with np.errstate(over="ignore"):
        while len(out) < rows:
            if a is None or not same_absmax:
                a = F32(rng.uniform(1, 1000))
            scale = F32(a / MAX[fmt])
            inv = F32(F32(1) / scale)
            x = (rng.choice(mids, 20000).astype(np.float64) * np.float64(scale)).astype(F32)
            cands = [x]
            for direction in (np.inf, -np.inf):
                y = x
                for _ in range(2):
                    y = np.nextafter(y, F32(direction), dtype=F32)
                    cands.append(y)
            c = np.concatenate(cands)
            c = c[cast(c / scale, fmt) != cast(c * inv, fmt)]
            if len(c) < k - 1:
                if not (same_absmax and out):
                    a = None  # this scale's reciprocal is too kind: another absmax
                continue
            row = np.empty(k, dtype=F32)
            row[0] = a
            row[1:] = c[:k - 1] * np.where(rng.random(k - 1) < 0.5, F32(-1), F32(1))
            out.append(row)
    return np.stack(out)


def activation_rows(fmt, rng):
    k = 257
    rows = []
    # Realistic rows: Gaussian with a few heavy outlier channels, at several magnitudes.
    gain = np.where(rng.random(k) < 0.01, 30.0, 1.0)
    for mag in [1e-3, 0.05, 1.0, 17.0, 3000.0]:
        rows += [(rng.standard_normal(k) * gain * mag).astype(F32) for _ in range(40)]
    # Ties: absmax = MAX gives scale MAX/MAX = 1 exactly, so x / scale = x hits every midpoint.
    mids = midpoints(fmt)
    for start in range(0, len(mids), k - 1):
        chunk = mids[start:start + k - 1]
        signs = np.where(rng.random(len(chunk)) < 0.5, -1, 1).astype(F32)
        row = np.zeros(k, dtype=F32)
        row[0] = MAX[fmt]
        row[1:1 + len(chunk)] = chunk * signs
        rows.append(row)
    # Division versus multiplication by the reciprocal: codes that tell vLLM's two formulas apart.
    rows += list(division_sensitive_rows(fmt, rng, 8, k))
    # Saturation: x / scale lands just above MAX when the rounded scale is below absmax / MAX.
    for a in rng.uniform(1, 2, 50).astype(F32):
        row = rng.uniform(-1, 1, k).astype(F32) * a
        row[3], row[4] = a, -a
        rows.append(row)
    # Zeros, signed zeros, an all-zero row, an all -0 row, fp32 subnormals, tiny rows below the floor.
    rows.append(np.zeros(k, dtype=F32))
    rows.append(np.full(k, -0.0, dtype=F32))
    z = rng.standard_normal(k).astype(F32)
    z[::3] = 0.0
    z[1::3] = -0.0
    rows.append(z)
    rows.append((rng.standard_normal(k) * 1e-40).astype(F32))  # fp32 subnormals: the floor scale acts
    rows.append((rng.standard_normal(k) * 1e-7).astype(F32))
    sub = rng.standard_normal(k).astype(F32) * F32(2.0**-12)  # FP8 subnormals after a scale of 1
    sub[0] = MAX[fmt]
    rows.append(sub)
    # Non-finite inputs follow the kernel's fmax/fmin: NaN ignored by absmax and clamped to +MAX.
    nanrow = rng.standard_normal(k).astype(F32)
    nanrow[5] = np.nan
    rows.append(nanrow)
    infrow = rng.standard_normal(k).astype(F32)
    infrow[7] = -np.inf
    rows.append(infrow)
    return np.stack(rows)


def run_act(tmp_path, x, fmt, scaling):
    xp, qp, sp = tmp_path / "x.npy", tmp_path / "q.npy", tmp_path / "s.npy"
    np.save(xp, x)
    run([tool("qc_quantize"), "act", fmt, scaling, xp, qp, sp])
    return np.load(qp), np.load(sp)


def assert_same(q, s, wq, ws, what):
    sb, wsb = s.view(np.uint32), ws.view(np.uint32)
    bad_s = np.nonzero(sb != wsb)[0]
    assert bad_s.size == 0, (f"{what}: {bad_s.size} of {s.size} scales differ; first row {bad_s[0]}: "
                             f"ours {s[bad_s[0]]!r} ({sb[bad_s[0]]:08x}), peer {ws[bad_s[0]]!r} ({wsb[bad_s[0]]:08x})")
    bad = np.argwhere(q != wq)
    assert bad.size == 0, (f"{what}: {len(bad)} of {q.size} codes differ; first at {tuple(bad[0])}: "
                           f"ours 0x{q[tuple(bad[0])]:02x}, peer 0x{wq[tuple(bad[0])]:02x}")


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_per_token_activations_match_vllm_formula(tmp_path, fmt):
    x = activation_rows(fmt, np.random.default_rng(14))
    q, s = run_act(tmp_path, x, fmt, "per-token")
    wq, ws = peer_act(x, fmt, "per-token")
    assert_same(q, s, wq, ws, f"per-token {fmt}")
    # The rows can tell the formulas apart: multiplying by 1/scale instead would change codes.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        alt = cast(x * (F32(1) / s)[:, None], fmt)
    assert (alt != q).sum() > 50, "no code depends on x / scale versus x * (1 / scale)"
    # The cases really occurred: ties at both parities, saturated codes, the floor, signed zeros.
    assert (q == (0x7E if fmt == "e4m3" else 0x7B)).sum() > 100
    zero_row = x.shape[0] - 8
    assert s[zero_row] == F32(1) / (MAX[fmt] * F32(512))  # an all-zero row gets min_scaling_factor
    assert (q[zero_row] == 0).all() and (q[zero_row + 1] == 0x80).all()  # +0 -> 0x00, -0 -> 0x80


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_per_token_ties_round_to_even(tmp_path, fmt):
    mids = midpoints(fmt)[:200]
    x = np.zeros((1, len(mids) + 1), dtype=F32)
    x[0, 0] = MAX[fmt]
    x[0, 1:] = mids
    q, s = run_act(tmp_path, x, fmt, "per-token")
    assert s[0] == 1.0
    assert ((q[0, 1:] & 1) == 0).all(), "every midpoint rounds to the even code"
    lo = np.arange(len(mids), dtype=np.uint8)
    assert (q[0, 1:] == np.where(lo % 2 == 0, lo, lo + 1)).all()


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_per_tensor_activations_match_vllm_formula(tmp_path, fmt):
    rng = np.random.default_rng(2)
    for name, x in [("gaussian", (rng.standard_normal((64, 130)) * 3).astype(F32)),
                    ("ties", activation_rows(fmt, rng)[200:210]),
                    ("division-sensitive", division_sensitive_rows(fmt, rng, 6, 129, same_absmax=True)),
                    ("all-zero", np.zeros((4, 33), dtype=F32))]:
        q, s = run_act(tmp_path, x, fmt, "per-tensor")
        wq, ws = peer_act(x, fmt, "per-tensor")
        assert_same(q, s, wq, ws, f"per-tensor {fmt} {name}")
        if name == "division-sensitive":  # per tensor vLLM multiplies by 1/scale: dividing would differ
            alt = cast(x / s[:, None], fmt)
            assert (alt != q).sum() > 50, "no code depends on x * (1 / scale) versus x / scale"
    # vLLM's per-tensor scale of an all-zero tile is 0, and 0 * (1/0) = NaN clamps to +MAX.
    assert (s == 0).all() and (q == (0x7E if fmt == "e4m3" else 0x7B)).all()


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("scaling", ["per-channel", "per-tensor"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_weights_match_compressed_tensors_formula(tmp_path, fmt, scaling, dtype):
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((96, 200)) * 0.02).astype(F32)
    w[5] = 0.0  # an all-zero channel
    w[6, ::2] = -0.0
    w[7] *= 1e-30  # tiny channel: subnormal codes
    w[8, 0] = 3.0  # one heavy weight: per tensor, most codes of the others are small or subnormal
    wp, qp, sp = tmp_path / "w.npy", tmp_path / "q.npy", tmp_path / "s.npy"
    np.save(wp, w)
    run([tool("qc_quantize"), "weight", fmt, scaling, dtype, wp, qp, sp])
    q, s = np.load(qp), np.load(sp)
    wq, ws = peer_weight(w, fmt, scaling, dtype)
    assert_same(q, s, wq, ws, f"weights {fmt} {scaling} {dtype}")
    if scaling == "per-tensor":
        assert (s == s[0]).all(), "a per-tensor scale is stored as N equal entries"
    else:
        assert s[5] == (F32(2.0**-7) if dtype == "bf16" else F32(2.0**-23)) and (q[5] == 0).all()


def test_bad_input_is_refused(tmp_path):
    xp = tmp_path / "x.npy"
    np.save(xp, np.zeros((2, 2), dtype=np.float64))
    r = run([tool("qc_quantize"), "act", "e4m3", "per-token", xp, tmp_path / "q.npy", tmp_path / "s.npy"], check=False)
    assert r.returncode == 2 and "expected a 2-D float32 array" in r.stderr, r.stderr
    w = np.ones((2, 2), dtype=F32)
    w[1, 1] = np.inf
    np.save(xp, w)
    r = run([tool("qc_quantize"), "weight", "e4m3", "per-channel", "f32", xp, tmp_path / "q.npy", tmp_path / "s.npy"],
            check=False)
    assert r.returncode == 2 and "w[1,1]" in r.stderr and "expected finite" in r.stderr, r.stderr
