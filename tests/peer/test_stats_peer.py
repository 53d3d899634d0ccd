"""Peer tests: qconform's statistics against scikit-learn on randomized data with ties.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_stats_peer.py
Our side is driven through tests/tools/qc_stats.cpp (full-precision JSON); the peer side is
scikit-learn, which no one here wrote. Tolerance 1e-12 absolute, NaN never passes.
"""
import json
import math

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from conftest import run, tool

TOL = 1e-12
N_CASES = 60


def qc_stats(requests):
    out = run([tool("qc_stats")], input=json.dumps(requests)).stdout
    results = json.loads(out)
    assert len(results) == len(requests)
    return results


def close(ours, theirs, what):
    """Fails on NaN/None and names the case, both values and the difference."""
    assert ours is not None, f"{what}: ours is null/NaN, sklearn {theirs!r}"
    assert math.isfinite(ours) and math.isfinite(theirs), f"{what}: non-finite ours={ours!r} sklearn={theirs!r}"
    assert abs(ours - theirs) <= TOL, f"{what}: ours={ours!r} sklearn={theirs!r} diff={ours - theirs:.3e}"


def tied_scores(rng, n):
    """Scores with heavy ties: a few distinct values, or values rounded coarsely, or mixed."""
    kind = rng.integers(3)
    if kind == 0:
        return rng.integers(0, rng.integers(2, 8), n).astype(float)
    if kind == 1:
        return np.round(rng.normal(size=n), 1)
    return np.where(rng.random(n) < 0.5, np.round(rng.exponential(size=n), 2), 0.0)


def binary_cases(seed):
    rng = np.random.default_rng(seed)
    cases = []
    for c in range(N_CASES):
        n = int(rng.integers(2, 400))
        s = tied_scores(rng, n)
        # Labels correlated with the score so that AUC is not always ~0.5.
        p = 1 / (1 + np.exp(-(s - s.mean()) * rng.uniform(0, 3)))
        y = (rng.random(n) < p).astype(int)
        if y.min() == y.max():
            y[0] = 1 - y[0]
        w = rng.integers(1, 5, n).astype(float) if c % 2 else None
        if c % 4 == 3:
            w = rng.uniform(0.1, 3.0, n)
        cases.append((s, y, w))
    return cases


@pytest.mark.parametrize("metric", ["roc_auc", "average_precision"])
def test_ranking_metrics_match_sklearn(metric):
    cases = binary_cases(7 if metric == "roc_auc" else 8)
    reqs = []
    for s, y, w in cases:
        r = {"op": metric, "y": y.tolist(), "score": s.tolist()}
        if w is not None:
            r["w"] = w.tolist()
        reqs.append(r)
    peer = roc_auc_score if metric == "roc_auc" else average_precision_score
    for i, ((s, y, w), res) in enumerate(zip(cases, qc_stats(reqs))):
        assert "error" not in res, res
        close(res["value"], float(peer(y, s, sample_weight=w)), f"{metric} case {i} n={len(y)} weighted={w is not None}")


def test_small_margin_predicts_flip_convention():
    """score = -margin: the flips with the smallest margins rank first."""
    margin = np.array([0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 3.0])
    flip = np.array([1, 0, 1, 0, 1, 0, 0])
    res = qc_stats([{"op": "roc_auc", "y": flip.tolist(), "score": (-margin).tolist()}])[0]
    close(res["value"], roc_auc_score(flip, -margin), "auc(-margin)")


def test_undefined_metrics_are_null_not_numbers():
    res = qc_stats([
        {"op": "roc_auc", "y": [1, 1, 1], "score": [1, 2, 3]},
        {"op": "roc_auc", "y": [0, 0], "score": [1, 2]},
        {"op": "average_precision", "y": [0, 0], "score": [1, 2]},
    ])
    assert all(r["value"] is None for r in res), res


@pytest.mark.parametrize("weighted", [False, True])
def test_isotonic_decreasing_matches_sklearn(weighted):
    rng = np.random.default_rng(11 + weighted)
    reqs, cases = [], []
    for c in range(N_CASES):
        n = int(rng.integers(1, 300))
        x = tied_scores(rng, n)
        if c % 3 == 0:  # binary targets, as in the margin -> flip calibration
            y = (rng.random(n) < np.exp(-np.abs(x))).astype(float)
        else:
            y = -0.5 * x + rng.normal(size=n)
            if c % 3 == 2:
                y = np.round(y, 1)
        w = rng.uniform(0.05, 4.0, n) if weighted else None
        if weighted and c % 2:
            w = rng.integers(1, 6, n).astype(float)
        r = {"op": "isotonic", "x": x.tolist(), "y": y.tolist()}
        if w is not None:
            r["w"] = w.tolist()
        reqs.append(r)
        cases.append((x, y, w))
    for i, ((x, y, w), res) in enumerate(zip(cases, qc_stats(reqs))):
        assert "error" not in res, res
        theirs = IsotonicRegression(increasing=False).fit(x, y, sample_weight=w).predict(x)
        ours = np.array([np.nan if v is None else v for v in res["fitted"]], dtype=float)
        assert not np.isnan(ours).any(), f"case {i}: NaN in our fit"
        diff = np.abs(ours - theirs)
        k = int(np.argmax(diff))
        assert diff[k] <= TOL, (f"isotonic case {i} n={len(x)} weighted={w is not None}: worst at index {k} "
                                f"x={x[k]!r} ours={ours[k]!r} sklearn={theirs[k]!r}; {int((diff > TOL).sum())} over tol")
        assert np.all(np.diff(ours[np.argsort(x, kind='stable')]) <= 0), f"case {i}: fit not non-increasing"


def test_brier_matches_sklearn():
    rng = np.random.default_rng(5)
    reqs, cases = [], []
    for c in range(N_CASES):
        n = int(rng.integers(1, 500))
        y = (rng.random(n) < rng.random()).astype(int)
        p = np.round(rng.random(n), int(rng.integers(1, 4)))  # ties in p, exact 0 and 1 included
        w = rng.uniform(0.1, 2.0, n) if c % 2 else None
        r = {"op": "brier", "y": y.tolist(), "p": p.tolist()}
        if w is not None:
            r["w"] = w.tolist()
        reqs.append(r)
        cases.append((y, p, w))
    for i, ((y, p, w), res) in enumerate(zip(cases, qc_stats(reqs))):
        theirs = brier_score_loss(y, p, sample_weight=w, pos_label=1) if y.max() == 1 else float(np.average((y - p) ** 2, weights=w))
        close(res["value"], float(theirs), f"brier case {i} n={len(y)}")


def reference_bins(x, initial_bins, min_support):
    """A second, list-of-members implementation of quantile_bins_merged (docs/statistics.md)."""
    s = sorted(x)
    n = len(s)
    edges = []
    for j in range(1, initial_bins):
        e = s[(j * n) // initial_bins]
        if e != s[0] and (not edges or e != edges[-1]):
            edges.append(e)
    bins = [[v for v in s if (i == 0 or v >= edges[i - 1]) and (i == len(edges) or v < edges[i])] for i in range(len(edges) + 1)]
    need = max(min_support, 1)
    while len(bins) > 1:
        small = [i for i, b in enumerate(bins) if len(b) < need]
        if not small:
            break
        b = min(small, key=lambda i: (len(bins[i]), i))
        if b == 0:
            a = 0
        elif b == len(bins) - 1:
            a = b - 1
        else:
            a = b - 1 if len(bins[b - 1]) <= len(bins[b + 1]) else b
        bins[a:a + 2] = [bins[a] + bins[a + 1]]
        del edges[a]
    return edges, [len(b) for b in bins]


def test_quantile_bins_merged_match_reference():
    rng = np.random.default_rng(3)
    reqs, cases = [], []
    for c in range(N_CASES):
        n = int(rng.integers(1, 300))
        x = tied_scores(rng, n)
        B, m = int(rng.integers(1, 15)), int(rng.integers(0, 60))
        reqs.append({"op": "bins", "x": x.tolist(), "initial_bins": B, "min_support": m})
        cases.append((x, B, m))
    for i, ((x, B, m), res) in enumerate(zip(cases, qc_stats(reqs))):
        edges, support = reference_bins(x.tolist(), B, m)
        assert res["edges"] == edges and res["support"] == support, (i, B, m, res, edges, support)
        assert sum(res["support"]) == len(x)
        if len(x) >= max(m, 1):
            assert min(res["support"]) >= max(m, 1), (i, res)
