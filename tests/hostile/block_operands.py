#!/usr/bin/env python3
"""Writes one block-scaled FP8 operand file for the hostile-input cases (tests/hostile/block.jsonl),
valid or broken in one named way, with the safetensors library (what a PyTorch user writes).

The layer `l0` is 4 x 200 x 256: e4m3 codes, a_scale [4, 2] (per-token-group:128), w_scale [2, 2]
(per-block:128x128, the second block row partial), scales 2^-6 (UE8M0 values) unless broken.

Usage: block_operands.py CASE OUT.safetensors, CASE one of: valid, a-scale-shape, w-scale-shape,
zero-scale, negative-scale, nan-scale, inf-scale, not-pow2-ue8m0, no-metadata, k-blocks-differ.
"""
import sys

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file


def main(case, out):
    m, n, k = 4, 200, 256
    rng = np.random.default_rng(28)
    a = (rng.standard_normal((m, k)) * 2).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    w = (rng.standard_normal((n, k)) * 2).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    a_scale = np.full((m, 2), 2.0 ** -6, np.float32)
    w_scale = np.full((2, 2), 2.0 ** -6, np.float32)
    meta = {"source": "hostile block case", "act_scale": "per-token-group:128", "weight_scale": "per-block:128x128",
            "scale_fmt": "ue8m0"}
    if case == "a-scale-shape":
        a_scale = np.full((m, 3), 2.0 ** -6, np.float32)
    elif case == "w-scale-shape":
        w_scale = np.full((1, 2), 2.0 ** -6, np.float32)
    elif case == "zero-scale":
        w_scale[1, 0] = 0.0
    elif case == "negative-scale":
        a_scale[2, 1] = -2.0 ** -6
    elif case == "nan-scale":
        a_scale[3, 0] = np.nan
    elif case == "inf-scale":
        w_scale[0, 1] = np.inf
    elif case == "not-pow2-ue8m0":
        w_scale[1, 1] = 0.0150
    elif case == "no-metadata":
        meta = {"source": "hostile block case"}
    elif case == "k-blocks-differ":
        meta["act_scale"] = "per-token-group:64"
        a_scale = np.full((m, 4), 2.0 ** -6, np.float32)
    elif case != "valid":
        raise SystemExit(f"unknown case {case}")
    tensors = {"l0.a_q": a.view(ml_dtypes.float8_e4m3fn), "l0.a_scale": a_scale,
               "l0.w_q": w.view(ml_dtypes.float8_e4m3fn), "l0.w_scale": w_scale}
    save_file(tensors, out, metadata=meta)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
