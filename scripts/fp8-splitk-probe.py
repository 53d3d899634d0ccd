#!/usr/bin/env python3
"""Designed probes for cuBLASLt's split-K on FP8 GEMMs (GPU machine, torch): where does it cut K, and in
which order does it add the partials? torch._scaled_mm (e4m3 x e4m3, fp32 out, scales 1), for each path
(use_fast_accum True / False) and shape:
 1. boundaries: column n holds 256 at k-1 and 2^-6 at k (a = 1 everywhere). In one Hopper chain the small
    term is truncated away (13 bits below 2^8 is 2^-5): d = 256. Across a range boundary (or a promotion
    into fp32, every 128 products on the default path) the fp32 add keeps it: d = 256 + 2^-6.
 2. membership: 256 at the start of segment i, 2^-6 at the start of segment j: one chain or not
    (finds interleaved partitions; contiguous ones give singletons).
 3. order: a partial of 2^24 in range p (256 products of 256*256) and 1 in every other range: in
    ascending fp32 order the ones before range p add up exactly, the ones after are lost to
    ties-to-even, so d - 2^24 reads off p's position in the order.
Prints one line per shape; writes the JSON to argv[1]. See docs/accumulation.md, "Split-K".

    python3 scripts/fp8-splitk-probe.py /tmp/splitk.json
"""
import torch, numpy as np, sys, json
dev = "cuda"
one = torch.tensor(1.0, device=dev)
def gemm(a_codes, w_codes, fast=True):
    a = torch.from_numpy(a_codes).to(dev).view(torch.float8_e4m3fn)
    w = torch.from_numpy(w_codes).to(dev).view(torch.float8_e4m3fn)
    return torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast).cpu().numpy()
ONE, BIG, SMALL, E256 = 0x38, 0x78, 0x08, 0x78
out = {}
for fast in (True, False):
  for (M, N, K) in [(1, 1024, 8192), (1, 1024, 16384), (1, 1024, 32768), (16, 1024, 16384), (1, 4096, 8192), (128, 1024, 16384)]:
    key = f"{'fast' if fast else 'default'} M={M} N={N} K={K}"
    a = np.full((M, K), ONE, np.uint8)
    # 1) boundaries between consecutive positions (j-1, j): big at j-1, small at j
    boundary = []
    for j0 in range(1, K, N):
        w = np.zeros((N, K), np.uint8)
        js = np.arange(j0, min(j0 + N, K))
        w[np.arange(len(js)), js - 1] = BIG
        w[np.arange(len(js)), js] = SMALL
        d = gemm(a, w, fast)[0, :len(js)]
        boundary += [int(j) for j, v in zip(js, d) if v != 256.0]
        bad = [float(v) for v in d if v not in (256.0, np.float32(256 + 2**-6))]
        if bad: print(key, "unexpected values", bad[:5])
    # For the default path every 128 (promotion into fp32) is a boundary too; report them
    segs = [0] + boundary + [K]
    starts = segs[:-1]
    # 2) membership between segment starts (big at start i, small at start j): same chain or not
    same = {}
    pairs = [(i, j) for i in range(len(starts)) for j in range(len(starts)) if i < j]
    if len(starts) <= 80:
      for p0 in range(0, len(pairs), N):
        w = np.zeros((N, K), np.uint8)
        ps = pairs[p0:p0 + N]
        for c, (i, j) in enumerate(ps):
            w[c, starts[i]] = BIG; w[c, starts[j]] = SMALL
        d = gemm(a, w, fast)[0, :len(ps)]
        for (i, j), v in zip(ps, d): same[(i, j)] = bool(v == 256.0)
    # union-find partitions of segments
    parent = list(range(len(starts)))
    def f(x):
        while parent[x] != x: x = parent[x]
        return x
    for (i, j), s in same.items():
        if s: parent[f(j)] = f(i)
    groups = {}
    for i in range(len(starts)): groups.setdefault(f(i), []).append(i)
    parts = [[(starts[i], segs[i + 1]) for i in g] for g in groups.values()]
    # 3) reduction order: partial 2^24 in partition p (256 products of 256*256 at its first positions), 1 in each other
    order = []
    if 1 < len(parts) <= 64 and all(g[0][1] - g[0][0] >= 257 for g in parts):
      a2 = np.full((M, K), ONE, np.uint8)
      w = np.zeros((N, K), np.uint8)
      for g in parts:
        s0 = g[0][0]
        a2[:, s0:s0 + 256] = BIG
      for p, g in enumerate(parts):
        for q, g2 in enumerate(parts):
          s0 = g2[0][0]
          if q == p: w[p, s0:s0 + 256] = BIG   # 256 products of 256*256: partial 2^24
          else: w[p, s0 + 256] = ONE           # partial 1
      d = gemm(a2, w, fast)[0, :len(parts)]
      order = [float(v) - 2**24 for v in d]
    out[key] = {"boundaries": boundary[:200], "n_boundaries": len(boundary), "segments": len(starts),
                "partitions": [[list(x) for x in g] for g in parts][:64], "order_probe": order}
    print(key, "boundaries", len(boundary), boundary[:40], "partitions", len(parts),
          [[tuple(x) for x in g][:6] for g in parts][:10], "order", order[:16], flush=True)
json.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/splitk3.json", "w"))
