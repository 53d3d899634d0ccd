#!/usr/bin/env python3
"""Research probe (GPU machine, torch + a CUDA build of tests/tools/qc_fp8_model): for the shapes where
cuBLASLt's fast-accumulation FP8 GEMM leaves the one-pass model hopper-fp8-chain (small M, K >= 8192,
where the heuristic picks split-K), which partition of K -- s contiguous ranges, or s interleaved sets
of k-blocks -- each range one hopper-fp8-chain and the partials added in fp32 (in order, or pairwise),
reproduces torch._scaled_mm(use_fast_accum=True)? Prints the five best hypotheses per shape with the
number of differing outputs (0 = reproduced bit for bit). See docs/accumulation.md, "Split-K".

    python3 scripts/fp8-splitk-probe.py   # from the repository root, after building build-gpu
"""
import subprocess, tempfile, os
import numpy as np, torch, ml_dtypes
tool = "build-gpu/tests/qc_fp8_model"
def model(a, w, d):
    pa, pw, po = (os.path.join(d, x) for x in ("a.npy", "w.npy", "o.npy"))
    np.save(pa, a); np.save(pw, w)
    subprocess.run([tool, "npy", "hopper-fp8-chain", "e4m3", "e4m3", pa, pw, po, "gpu"], check=True, capture_output=True)
    return np.load(po).astype(np.float32)
bf16 = lambda x: np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
torch.manual_seed(2)
with tempfile.TemporaryDirectory() as d:
  for (M, N, K) in [(1, 1024, 16384), (1, 1024, 8192), (16, 1024, 16384), (64, 1024, 16384)]:
    a = (torch.randn(M, K, device="cuda") * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, device="cuda") * 2).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device="cuda")
    yb = torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True).view(torch.uint16).cpu().numpy()
    an = a.view(torch.uint8).cpu().numpy(); wn = w.view(torch.uint8).cpu().numpy()
    best = []
    for s in [2, 3, 4, 6, 8, 16]:
      for blk in [0, 64, 128, 256, 512, 1024]:   # 0: contiguous equal ranges
        if blk == 0:
          if K % s: continue
          idx = [np.arange(i * (K // s), (i + 1) * (K // s)) for i in range(s)]
        else:
          nb = K // blk
          if nb < s: continue
          idx = [np.concatenate([np.arange(b * blk, (b + 1) * blk) for b in range(i, nb, s)]) for i in range(s)]
        parts = [model(np.ascontiguousarray(an[:, ix]), np.ascontiguousarray(wn[:, ix]), d) for ix in idx]
        for order in ("asc", "pairwise"):
          if order == "asc":
            acc = parts[0]
            for p in parts[1:]: acc = (acc + p).astype(np.float32)
          else:
            ps = parts[:]
            while len(ps) > 1:
              ps = [(ps[i] + ps[i + 1]).astype(np.float32) if i + 1 < len(ps) else ps[i] for i in range(0, len(ps), 2)]
            acc = ps[0]
          off = int((bf16(acc) != yb).sum())
          best.append((off, f"s={s} blk={blk or 'contig'} {order}"))
    best.sort()
    print(f"M={M} N={N} K={K} outputs {M*N}: best " + "; ".join(f"{h}: {o}" for o, h in best[:5]), flush=True)
