#!/usr/bin/env python3
"""Verify a kernel written in Python against a built-in arm, in-process.

The "kernel" here is NumPy code implementing vLLM's triton_scaled_mm epilogue order with every
float32 rounding explicit; qconform runs it and `cpu:vllm-cutlass` on identical synthetic operands
and reports checks C2-C6. The two epilogues differ in multiplication order, so under real scales
a few outputs per million differ by one bf16 ulp (C6 passes: within 1 ulp, and the observed
difference set equals the set predicted from the two formulas); under power-of-two scales they
must be, and are, bit-identical (C5).

    PYTHONPATH=build/python python3 examples/python_verify.py      # after a build with -DQCONFORM_BUILD_PYTHON=ON
    python3 examples/python_verify.py                              # after `pip install ./python`
"""
import sys

import numpy as np

import qconform


def synth_layer(rng, name, m, n, k):
    """Small operands quantized the vLLM way: per-token activations, per-channel weights."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[:, rng.choice(k, size=max(1, k // 200), replace=False)] *= 30.0  # a few outlier channels
    w = (0.02 * rng.standard_normal((n, k))).astype(np.float32)
    a_scale = (np.abs(x).max(axis=1) / np.float32(127.0)).astype(np.float32)
    w_scale = (np.abs(w).max(axis=1) / np.float32(127.0)).astype(np.float32)
    a_q = np.clip(np.rint(x / a_scale[:, None]), -127, 127).astype(np.int8)
    w_q = np.clip(np.rint(w / w_scale[:, None]), -127, 127).astype(np.int8)
    return {"name": name, "a_q": a_q, "a_scale": a_scale, "w_q": w_q, "w_scale": w_scale}


def vllm_triton_numpy(a_q, a_scale, w_q, w_scale, bias):
    """y = bf16(rn32(rn32(f32(acc) * sa) * sw)), bias added after the bf16 rounding."""
    acc = a_q.astype(np.int64) @ w_q.astype(np.int64).T       # exact integers
    t = acc.astype(np.float32)                                 # f32(acc): one RNE rounding
    t = t * a_scale.astype(np.float32)[:, None]                # rn32(f32(acc) * sa)
    t = t * w_scale.astype(np.float32)[None, :]                # rn32(... * sw)
    y = qconform.float32_to_bf16_bits(t)
    if bias is not None:
        yf = (y.astype(np.uint32) << 16).view(np.float32)
        bf = (bias.astype(np.uint32) << 16).view(np.float32)
        y = qconform.float32_to_bf16_bits(yf + bf[None, :])
    return y


def main():
    rng = np.random.default_rng(7)
    layers = [synth_layer(rng, f"layers.{i}.{p}", 64, n, k)
              for i in range(2) for p, n, k in (("q_proj", 256, 512), ("down_proj", 512, 1024))]
    kernel = qconform.arm(vllm_triton_numpy, epilogue="vllm-triton")
    r = qconform.verify("cpu:vllm-cutlass", kernel, layers, m_sweep=[1, 16, 64])
    answer = r["interchangeability"]  # identical / explained / unexplained / different, and why
    print(f"interchangeability: {answer['answer']} — {answer['reason']}")
    if answer["advice"]:
        print(f"  next: {answer['advice']}")
    for side, a in zip("AB", r["arms"]):
        print(f"{side}: {a['label']:<40} kernel: {a['record']['kernel']}")
    for c in r["checks"]:
        print(f"{c['id']:<3} {c['title']:<22} {c['verdict']:<10} {c['summary']}")
    failed = [c["id"] for c in r["checks"] if c["verdict"] == "fail"]
    mism = sum(run["formula_mismatch"][1] or 0 for run in r["runs"])  # null: not declared
    print(f"Python kernel vs its declared formula vllm-triton: {mism} differing outputs")
    return 1 if failed or mism else 0


if __name__ == "__main__":
    sys.exit(main())
