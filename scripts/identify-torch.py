#!/usr/bin/env python3
"""identify on real PyTorch GPU kernels that declare nothing (issue #30, on a CUDA machine with PyTorch).

Each kernel is a black box with the INT8 signature fn(a_q, a_scale, w_q, w_scale, bias) -> y; qconform
reads only its bf16 output (no declaration, no unscaled entry):

1. torchao's eager W8A8 (`torchao/kernel/intmm.py`, `int_scaled_matmul`, and its linear: `c =
   safe_int_mm(x_int8, w_int8.t()); y = c * x_scales; y = y * w_scales` with the scales in the activation
   dtype, bf16): `torch._int_mm` (cuBLASLt int8 -> int32) and PyTorch's type promotion for int32 * bf16;
2. `torch._scaled_mm` on e4m3 codes with rowwise fp32 scales (scale_a [M,1], scale_b [1,N]) and bf16 out,
   as vLLM and torchao call it for per-token x per-channel FP8 (PyTorch's CUTLASS rowwise kernel on sm90);
3. the same with `use_fast_accum=True`.

Shape constraints of the kernels are met by zero padding inside the callable (exact: a zero row, column
or K position adds nothing). For each: `qconform.identify` (formula, or model + epilogue), then the
identified formula declared back and `qconform.verify` against a CPU arm on qwen3-1.7b-shaped layers
(M in {1, 16, 128}): every output of the kernel on its declaration (formula_mismatch 0) and the
differences predicted element for element (predicted_equals_observed in every run).

  PYTHONPATH=build-gpu/python python3 scripts/identify-torch.py --json identify-torch.json

Status: written 2026-12-04 and syntax-checked; NOT YET RUN on a GPU (the device was withdrawn in that
session before it ran). Its figures are not in docs/ until it has run.
Exit 0 when every kernel is identified and verify predicts every run; 1 otherwise; 2 without a GPU.
"""
import argparse
import json
import sys
import time

import numpy as np

import qconform
from qconform._torch_common import GpuUnavailableError, require_torch


def pad_to(t, rows, cols, torch):
    """`t` [r, c] zero-padded to [rows, cols] (a copy when it grows)."""
    r, c = t.shape
    if r == rows and c == cols:
        return t.contiguous()
    out = torch.zeros((rows, cols), dtype=t.dtype, device=t.device)
    out[:r, :c] = t
    return out


def up(x, m):
    return (x + m - 1) // m * m


def make_kernels(torch):
    dev = "cuda"

    def tensor(x, dtype):
        return torch.from_numpy(np.ascontiguousarray(x)).to(dev).view(dtype) if dtype in (
            torch.float8_e4m3fn, torch.bfloat16) else torch.from_numpy(np.ascontiguousarray(x)).to(dev)

    def torchao_w8a8(a_q, a_scale, w_q, w_scale, bias):
        M, K = a_q.shape
        N = w_q.shape[0]
        a = pad_to(tensor(a_q, torch.int8), max(up(M, 8), 32), up(K, 8), torch)
        w = pad_to(tensor(w_q, torch.int8), up(N, 8), up(K, 8), torch)
        c = torch._int_mm(a, w.t())[:M, :N]                      # int32, cuBLASLt
        x_scales = tensor(a_scale, torch.float32).to(torch.bfloat16).reshape(M, 1)  # scales in the activation dtype
        w_scales = tensor(w_scale, torch.float32).to(torch.bfloat16).reshape(1, N)
        y = c * x_scales                                          # int32 * bf16: PyTorch's promotion
        y = y * w_scales                                          # bf16 * bf16
        if bias is not None:
            y = y + torch.from_numpy(np.ascontiguousarray(bias).view(np.int16)).to(dev).view(torch.bfloat16)
        return y

    def scaled_mm(fast):
        def kernel(a_q, a_scale, w_q, w_scale, bias):
            M, K = a_q.shape
            N = w_q.shape[0]
            Mp, Np, Kp = up(M, 16), up(N, 16), up(K, 16)
            a = pad_to(tensor(a_q, torch.uint8), Mp, Kp, torch).view(torch.float8_e4m3fn)
            w = pad_to(tensor(w_q, torch.uint8), Np, Kp, torch).view(torch.float8_e4m3fn)
            sa = torch.ones((Mp, 1), dtype=torch.float32, device=dev)
            sw = torch.ones((1, Np), dtype=torch.float32, device=dev)
            sa[:M, 0] = tensor(a_scale, torch.float32).reshape(-1)
            sw[0, :N] = tensor(w_scale, torch.float32).reshape(-1)
            b = None
            if bias is not None:
                b = torch.zeros(Np, dtype=torch.bfloat16, device=dev)
                b[:N] = torch.from_numpy(np.ascontiguousarray(bias).view(np.int16)).to(dev).view(torch.bfloat16)
            try:
                y = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sw, bias=b, out_dtype=torch.bfloat16,
                                     use_fast_accum=fast)
            except RuntimeError as e:
                if b is None:
                    raise
                raise qconform.InputError(f"torch._scaled_mm refuses a bias with rowwise scales here: {e}")
            return y[:M, :N]
        kernel.__name__ = f"torch_scaled_mm_rowwise{'_fastacc' if fast else ''}"
        return kernel

    return [
        ("torchao-eager-w8a8", torchao_w8a8, "int8", "cpu:vllm-triton"),
        ("torch-scaled-mm-rowwise", scaled_mm(False), "e4m3", "cpu:fp8-hopper-fp8-promote4"),
        ("torch-scaled-mm-rowwise-fastacc", scaled_mm(True), "e4m3", "cpu:fp8-hopper-fp8-promote4"),
    ]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--only", default="", help="comma-separated kernel names")
    args = p.parse_args()
    try:
        torch = require_torch("scripts/identify-torch.py")
    except GpuUnavailableError as e:
        print(f"SKIPPED: {e}")
        return 2
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    failures, out = [], {}
    shapes = "128x2048x2048,128x1024x2048,128x6144x2048,128x2048x6144"  # qwen3-1.7b's q, k/v, gate/up, down
    int8_layers = qconform.synth(shapes, seed=21)
    fp8_layers = qconform.synth(shapes, seed=22, element="e4m3")
    for name, fn, element, against in make_kernels(torch):
        if args.only and name not in args.only.split(","):
            continue
        t0 = time.time()
        arm = qconform.arm(fn, name=f"torch:{name}", element=None if element == "int8" else "e4m3")
        r = qconform.identify(arm)
        t_id = time.time() - t0
        rec = {"verdict": r["verdict"], "reason": r.get("reason"), "explained": r.get("explained"),
               "seconds_identify": round(t_id, 1)}
        print(f"\n== {name}: identify {r['verdict']} in {t_id:.1f} s")
        if r["verdict"] != "identified":
            print(r["printout"][-3000:])
            failures.append(f"{name}: {r['verdict']}")
            out[name] = rec
            continue
        if element == "int8":
            rec["formula"] = r["formula"]
            print(f"   formula {r['formula']}; held-out {r['explained']['matching']}/{r['explained']['outputs']}")
            declared = qconform.arm(fn, name=f"torch:{name}", epilogue=r["formula"])
            layers = int8_layers
        else:
            rec["accumulation_model"] = r["accumulation_model"]
            rec["epilogue"] = r["fp8_epilogue"]["formula"]
            print(f"   model {r['accumulation_model']}, epilogue {rec['epilogue']}; held-out "
                  f"{r['explained']['matching']}/{r['explained']['outputs']}")
            declared = qconform.arm(fn, name=f"torch:{name}", element="e4m3", accumulation_model=r["accumulation_model"],
                                    epilogue=rec["epilogue"])
            layers = fp8_layers
        t1 = time.time()
        v = qconform.verify(against, declared, layers, scales="real", m_sweep=[1, 16, 128])
        runs = v["runs"]
        off = sum(run["formula_mismatch"][1] or 0 for run in runs)
        predicted = sum(1 for run in runs if run["predicted_equals_observed"])
        differ = sum(run["bitwise_diff"] for run in runs)
        total = sum(run["total"] for run in runs)
        rec.update({"verify_against": against, "runs": len(runs), "outputs": total, "differ": differ,
                    "off_declaration": off, "predicted_runs": predicted,
                    "answer": v["interchangeability"]["answer"], "seconds_verify": round(time.time() - t1, 1)})
        print(f"   verify vs {against}: {len(runs)} runs, {total} outputs, {differ} differ, {off} off the declaration, "
              f"predicted == observed in {predicted}/{len(runs)} runs; answer {v['interchangeability']['answer']}")
        if off != 0 or predicted != len(runs) or r["explained"]["matching"] != r["explained"]["outputs"]:
            failures.append(f"{name}: verify")
        out[name] = rec
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print("\nall identified and predicted" if not failures else f"\nFAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
