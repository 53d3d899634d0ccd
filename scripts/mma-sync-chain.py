#!/usr/bin/env python3
"""Measures the chain of a block-scaled FP8 arm per 128-K block against candidate chains (docs/accumulation.md,
"mma.sync on e4m3"): unit-scale e4m3 layers of four designs go through the arm (its D) and through
cpu:fp8-block-triton+<chain> for each candidate; prints the outputs off each, exit 1 when the first
candidate (the declared chain) is off anywhere.

  PYTHONPATH=build/python python3 scripts/mma-sync-chain.py [--arm cuda:mma-fp8-block-triton] [--save DIR]

With unit scales every promotion form is D + C in fp32, so the comparison isolates the chain.
"""
import argparse
import os
import sys

import numpy as np

import qconform

K_ORDER = ("fp8-model(step_k=16,term_bits=25,term_rounding=rz,result_bits=23,result_rounding=rz,"
           "alignment=exponent_sum,promote_steps=2,promote_bits=23,promote_rounding=rn,splits=1,split_granule=0)")
CHAINS = [("sm90-mma-sync-e4m3", "sm90-mma-sync-e4m3"), ("the same steps in K order", K_ORDER),
          ("hopper-fp8-chain", "hopper-fp8-chain")]


def codes(x):
    """float32 -> e4m3fn codes, round to nearest even, clamped to +-448 (torch on the GPU machine, else ml_dtypes)."""
    x = np.clip(np.asarray(x, np.float32), -448, 448)
    try:
        import ml_dtypes
        return x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    except ImportError:
        import torch
        return torch.from_numpy(np.ascontiguousarray(x)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def layer(a, w, tag):
    m, k = a.shape
    n = w.shape[0]
    kb = -(-k // 128)
    return {"name": tag, "a_q": a, "a_type": "e4m3", "w_q": w, "w_type": "e4m3",
            "a_scale": np.ones((m, kb), np.float32), "w_scale": np.ones((-(-n // 128), kb), np.float32),
            "act_scale": "per-token-group:128", "weight_scale": "per-block:128x128"}


def designs(rng):
    def heavy(shape, lo=-9, hi=9):
        e = rng.integers(lo, hi, size=shape).astype(np.float64)
        mant = rng.choice([1.0, 1.125, 1.25, 1.5, 1.75], size=shape)
        v = np.where(rng.random(shape) < 0.3, 0.0, mant * 2.0 ** e * rng.choice([-1, 1], size=shape))
        return codes(v)

    for k in (128, 256):
        yield f"randn*2 256x64x{k}", codes(rng.standard_normal((256, k)) * 2), codes(rng.standard_normal((64, k)) * 2)
    for k in (128, 256):
        yield f"heavy-tailed 512x64x{k}", heavy((512, k)), heavy((64, k))
    yield "small magnitudes 512x64x128", heavy((512, 128), -9, -3), heavy((64, 128), -9, -3)
    # +-2^8 at two positions, one small term at a third; w = 2^8 or 2^-6 by a random pattern.
    r = 4096
    p = rng.integers(0, 127, size=r)
    p2 = np.where(np.arange(r) % 2 == 0, p + 1, rng.integers(0, 128, size=r))
    q = rng.integers(0, 128, size=r)
    ok = (p != p2) & (q != p) & (q != p2)
    p, p2, q = p[ok], p2[ok], q[ok]
    a = np.zeros((len(p), 128), np.float32)
    i = np.arange(len(p))
    a[i, p], a[i, p2] = 256.0, -256.0
    a[i, q] = rng.choice([2.0 ** -6, 2.0 ** -9, 1.5 * 2.0 ** -6], size=len(p))
    yield f"designed triples {len(p)}x64x128", codes(a), codes(np.where(rng.random((64, 128)) < 0.5, 256.0, 2.0 ** -6))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", default="cuda:mma-fp8-block-triton")
    ap.add_argument("--save", help="a folder for the operands and the arm's D (npz per design)")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    total, off = 0, {name: 0 for name, _ in CHAINS}
    print(f"{'design':34s} {'outputs':>8s} " + " ".join(f"{name:>26s}" for name, _ in CHAINS))
    for tag, a, w in designs(rng):
        d = np.asarray(qconform.run(args.arm, layer(a, w, tag))["d"], np.float32)
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            np.savez_compressed(os.path.join(args.save, tag.split()[0] + f"_{a.shape[0]}x{a.shape[1]}.npz"), a=a, w=w, d=d)
        row = []
        for name, chain in CHAINS:
            m = np.asarray(qconform.run(f"cpu:fp8-block-triton+{chain}", layer(a, w, tag))["d"], np.float32)
            n = int((m.view(np.uint32) != d.view(np.uint32)).sum())
            off[name] += n
            row.append(n)
        total += d.size
        print(f"{tag:34s} {d.size:8d} " + " ".join(f"{n:26d}" for n in row), flush=True)
    print(f"{'all':34s} {total:8d} " + " ".join(f"{off[name]:26d}" for name, _ in CHAINS))
    return 1 if off[CHAINS[0][0]] else 0


if __name__ == "__main__":
    sys.exit(main())
