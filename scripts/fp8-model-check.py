#!/usr/bin/env python3
"""cuBLASLt FP8 GEMM versus the declared accumulation models, on the shapes of issue #14's
"Judged by": counts the outputs where each cuBLASLt path differs from each model, bit for bit.

cuBLASLt side: torch._scaled_mm (e4m3 x e4m3 and e5m2 x e4m3, per-tensor scales inside cuBLASLt,
bf16 output) with use_fast_accum True (declared model hopper-fp8-chain) and False (declared
hopper-fp8-promote4). Model side: qconform's GPU evaluation of the model (tests/tools/qc_fp8_model
npy ... gpu: the CUDA kernel that compiles include/qconform/accumulation.hpp) on the first --rows
rows of A, then y = bf16_rne(fp32(d * fp32(sa * sb))) (the scales as one fp32 product on the fp32
accumulator, as measured in ../shared/reference/fp8-accumulation.md).

Run on the GPU machine after building the tool with CUDA:
  cmake -S . -B build-cuda -DQCONFORM_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release
  cmake --build build-cuda -j --target qc_fp8_model
  python3 scripts/fp8-model-check.py --build build-cuda [--rows 64] [--quick]
Prints one line per shape and path, then the totals; exits 0 when every path equals its declared
model on every output compared, 1 otherwise, 77 (SKIPPED, with the reason) without torch/CUDA.
"""
import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import ml_dtypes
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIPPED: {e}")
    sys.exit(77)

DECLARED = {True: "hopper-fp8-chain", False: "hopper-fp8-promote4"}
MODELS = ["hopper-fp8-chain", "hopper-fp8-promote4"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-cuda", help="build directory holding tests/qc_fp8_model")
    p.add_argument("--rows", type=int, default=64, help="rows of A evaluated by the models per shape")
    p.add_argument("--quick", action="store_true", help="K in {256, 4096} and M in {16, 512} only")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("SKIPPED: torch sees no CUDA device")
        sys.exit(77)
    tool = os.path.join(args.build, "tests", "qc_fp8_model")
    if not os.path.exists(tool):
        print(f"{tool} is missing: build the qc_fp8_model target with CUDA first")
        sys.exit(2)
    ms = [16, 512] if args.quick else [1, 16, 512, 4096]
    ns = [1024, 4096]
    ks = [256, 4096] if args.quick else [256, 1024, 4096, 16384, 32768]
    formats = [("e4m3", "e4m3"), ("e5m2", "e4m3")]
    scales = [(1.0, 1.0), (0.37, 1.9)]
    tdt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cuda {torch.version.cuda}")
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    totals = {(fast, model): [0, 0] for fast in (True, False) for model in MODELS}
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for (fa, fw), m, n, k, (sa, sb) in itertools.product(formats, ms, ns, ks, scales):
            a = (torch.randn(m, k, device="cuda", generator=gen) * 2).to(tdt[fa])
            w = (torch.randn(n, k, device="cuda", generator=gen) * 2).to(tdt[fw])
            rows = min(m, args.rows)
            np.save(f"{tmp}/a.npy", a[:rows].view(torch.uint8).cpu().numpy())
            np.save(f"{tmp}/w.npy", w.view(torch.uint8).cpu().numpy())
            s32 = np.float32(np.float32(sa) * np.float32(sb))
            expected = {}
            for model in MODELS:
                t0 = time.time()
                r = subprocess.run([tool, "npy", model, fa, fw, f"{tmp}/a.npy", f"{tmp}/w.npy", f"{tmp}/d.npy", "gpu"],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"qc_fp8_model failed: {r.stderr.strip()}")
                    sys.exit(2)
                d = np.load(f"{tmp}/d.npy")
                y = (d * s32).astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
                expected[model] = (y, time.time() - t0)
            for fast in (True, False):
                label = f"{fa}x{fw} M={m} N={n} K={k} scales={sa}x{sb} fast_accum={fast}"
                try:
                    out = torch._scaled_mm(a, w.t(), scale_a=torch.tensor(sa, device="cuda"),
                                           scale_b=torch.tensor(sb, device="cuda"), out_dtype=torch.bfloat16,
                                           use_fast_accum=fast)
                except RuntimeError as e:
                    print(f"{label}: cuBLASLt refused: {str(e).splitlines()[0]}")
                    continue
                got = out[:rows].contiguous().view(torch.uint16).cpu().numpy()
                counts = []
                for model in MODELS:
                    y, _ = expected[model]
                    diff = int(np.count_nonzero(got != y))
                    totals[(fast, model)][0] += diff
                    totals[(fast, model)][1] += y.size
                    counts.append(f"{diff} off {model}")
                    if model == DECLARED[fast] and diff:
                        i = int(np.flatnonzero(got != y)[0])
                        failures.append(f"{label}: {diff} of {y.size} off {model}; first at [{i // n},{i % n}]: "
                                        f"cuBLASLt {got.flat[i]:#06x}, model {y.flat[i]:#06x}")
                print(f"{label}: {rows}x{n} outputs: " + ", ".join(counts), flush=True)
    print("\ntotals (outputs compared, differing):")
    for (fast, model), (diff, total) in totals.items():
        mark = "declared" if model == DECLARED[fast] else "other"
        print(f"  use_fast_accum={fast!s:5} vs {model:20} ({mark:8}): {diff} of {total} differ")
    if any(totals[(fast, DECLARED[fast])][1] == 0 for fast in (True, False)):
        print("\nnothing compared for at least one path (every shape refused?): no claim checked")
        sys.exit(1)
    if failures:
        print(f"\n{len(failures)} shapes where a cuBLASLt path is off its declared model:")
        print("\n".join(failures[:20]))
        sys.exit(1)
    print("\nevery cuBLASLt path equals its declared model on every output compared")


if __name__ == "__main__":
    main()
