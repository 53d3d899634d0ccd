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


def request(op, w=None, **arrays):
    """One qc_stats request: the numpy `arrays` as lists, then the weights `w` where there are any."""
    r = {"op": op, **{name: a.tolist() for name, a in arrays.items()}}
    if w is not None:
        r["w"] = w.tolist()
    return r


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
    reqs = [request(metric, w, y=y, score=s) for s, y, w in cases]
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
        reqs.append(request("isotonic", w, x=x, y=y))
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
        reqs.append(request("brier", w, y=y, p=p))
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


# ---------------------------------------------------------------------------------------------
# `qconform transfer --replay` end to end: JSONL in, results JSON out, recomputed here with
# scikit-learn and the reference bins above.

def write_replay_pair(tmp_path, seed, n_prompts=12):
    rng = np.random.default_rng(seed)
    a_lines = [json.dumps({"kind": "header", "arm": "a", "mode": "replay"})]
    b_lines = []
    rows = []  # (prompt, margin, flip)
    for p in range(n_prompts):
        for pos in range(int(rng.integers(20, 60))):
            m = float(rng.choice([0.0, 0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 3.5]))  # ties on purpose
            l1 = float(np.float32(rng.uniform(4, 12)))
            flip = bool(rng.random() < 0.7 * np.exp(-m / 0.4))
            prompt = f"prompt-{p}" if p % 2 else p
            a_lines.append(json.dumps({"prompt": prompt, "position": pos, "token": 11, "top1_id": 1, "top1_logit": l1,
                                       "top2_id": 2, "top2_logit": l1 - m}))
            b_lines.append(json.dumps({"prompt": prompt, "position": pos, "token": 11, "top1_id": 2 if flip else 1,
                                       "top1_logprob": -0.1, "top2_id": 1 if flip else 2, "top2_logprob": -0.2}))
            rows.append((p, l1 - (l1 - m), int(flip)))
    rng.shuffle(b_lines)  # record order must not matter
    (tmp_path / "a.jsonl").write_text("\n".join(a_lines) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(b_lines) + "\n")
    return rows


def test_transfer_replay_cli_matches_peers(tmp_path):
    rows = write_replay_pair(tmp_path, 99)
    out = tmp_path / "res.json"
    res = run([tool("qconform"), "transfer", tmp_path / "a.jsonl", tmp_path / "b.jsonl", "--replay", "--json", out,
               "--min-bin-support", 40, "--bootstrap", 300, "--seed", 77, "--folds", 4])
    assert "ROC-AUC" in res.stdout and "calibration" in res.stdout
    j = json.loads(out.read_text())
    assert j["schema_version"] == 1 and j["options"]["seed_bootstrap"] == 77 and j["options"]["seed_folds"] == 78
    r = j["replay"]
    prompt = np.array([p for p, _, _ in rows])
    margin = np.array([m for _, m, _ in rows])
    flip = np.array([f for _, _, f in rows])
    assert r["positions"] == len(rows) and r["flips"] == int(flip.sum())
    close(r["flip_rate"], flip.mean(), "flip rate")
    close(r["roc_auc"]["value"], roc_auc_score(flip, -margin), "transfer AUC")
    close(r["average_precision"]["value"], average_precision_score(flip, -margin), "transfer AP")
    lo, hi = r["roc_auc"]["ci"]
    assert lo <= r["roc_auc"]["value"] <= hi and r["roc_auc"]["resamples_valid"] == 300
    # Leave one prompt out.
    deltas = [roc_auc_score(flip[prompt != g], -margin[prompt != g]) - r["roc_auc"]["value"] for g in range(12)]
    g = int(np.argmax(np.abs(deltas)))
    close(r["lopo"]["max_abs_delta_auc"], abs(deltas[g]), "LOPO max |dAUC|")
    assert r["lopo"]["prompt"] == (f"prompt-{g}" if g % 2 else str(g))
    # Calibration table = reference bins on all margins, counts recomputed.
    edges, support = reference_bins(margin.tolist(), 10, 40)
    bins = r["calibration"]["bins"]
    assert [b["support"] for b in bins] == support
    idx = np.searchsorted(np.array(edges), margin, side="right")
    for k, b in enumerate(bins):
        assert b["flips"] == int(flip[idx == k].sum())
        close(b["p_smoothed"], (b["flips"] + 1) / (b["support"] + 2), f"bin {k} smoothed p")
    # Isotonic blocks = sklearn's decreasing fit.
    iso = IsotonicRegression(increasing=False).fit(margin, flip)
    for blk in r["isotonic"]["blocks"]:
        for x in (blk["margin_lo"], blk["margin_hi"]):
            close(blk["p"], float(iso.predict([x])[0]), f"isotonic block at {x}")
    # Held-out Brier from the recorded folds: bins refit on training prompts, sklearn's Brier.
    fold = np.array(r["brier"]["fold_of_prompt"])[prompt]
    p_model = np.zeros(len(rows))
    p_base = np.zeros(len(rows))
    p_iso = np.zeros(len(rows))
    for f in range(4):
        tr, te = fold != f, fold == f
        e, _ = reference_bins(margin[tr].tolist(), 10, 40)
        bi_tr = np.searchsorted(np.array(e), margin[tr], side="right")
        bi_te = np.searchsorted(np.array(e), margin[te], side="right")
        k = np.array([flip[tr][bi_tr == b].sum() for b in range(len(e) + 1)])
        n = np.array([(bi_tr == b).sum() for b in range(len(e) + 1)])
        p_model[te] = ((k + 1) / (n + 2))[bi_te]
        p_base[te] = flip[tr].mean()
        p_iso[te] = IsotonicRegression(increasing=False, out_of_bounds="clip").fit(margin[tr], flip[tr]).predict(margin[te])
    close(r["brier"]["model"], brier_score_loss(flip, p_model), "held-out Brier (binned map)")
    close(r["brier"]["baseline"], brier_score_loss(flip, p_base), "held-out Brier (baseline)")
    close(r["brier"]["isotonic"], brier_score_loss(flip, p_iso), "held-out Brier (isotonic)")


def test_transfer_cli_rejects_malformed_jsonl_with_file_and_line(tmp_path):
    write_replay_pair(tmp_path, 5, n_prompts=3)
    a = tmp_path / "a.jsonl"
    lines = a.read_text().splitlines()
    lines[4] = lines[4].replace('"top1_logit": ', '"top1_logit": NaN, "x": ')
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    res = run([tool("qconform"), "transfer", bad, tmp_path / "b.jsonl", "--replay", "--json", tmp_path / "o.json"], check=False)
    assert res.returncode == 2, res
    assert f"{bad}:5: field `top1_logit`: expected a finite number, found NaN" in res.stderr, res.stderr
    assert not (tmp_path / "o.json").exists()
