#!/usr/bin/env python3
"""How exactly does qconform's `sglang` activation quantizer match a GPU kernel built the way SGLang
builds it? (Run on a CUDA machine with PyTorch and Triton.)

SGLang quantizes activations per token with a Triton kernel whose arithmetic is (docs/epilogues.md,
"Quantizers"): absmax = max(max|x|, 1e-10); scale = absmax / 127; codes =
round_half_away(x * (127 / absmax)). qconform's `sglang` quantizer evaluates those formulas with
IEEE fp32 division. Triton lowers fp32 `/` to `div.full.f32` (within 2 ulp, not always correctly
rounded), so the GPU's scale or multiplier can be one ulp off. This script runs a Triton kernel
with that arithmetic twice, once with Triton's `/` and once with `tl.math.div_rn` (IEEE), on
random bf16 activation rows, and compares both with `qconform.quantize_activations(x, "sglang")`:
the `div_rn` kernel must agree bit for bit (that checks our formula); the `/` kernel shows how
often the approximate division changes a stored scale or a code.

    python3 examples/gpu_sglang_quantizer.py --rows 200000 --k 2048

Exit status 0 when the div_rn kernel agrees bit for bit, 1 otherwise, 2 when no GPU is usable.
"""
import argparse
import sys

import numpy as np

import qconform


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError as e:
        print(f"SKIPPED: {e}")
        return 2
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        return 2

    @triton.jit
    def quantize_rows(x_ptr, q_ptr, s_ptr, K, BLOCK: tl.constexpr, PRECISE: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < K
        x = tl.load(x_ptr + row * K + cols, mask=mask, other=0.0).to(tl.float32)
        absmax = tl.maximum(tl.max(tl.abs(x)), 1e-10)
        if PRECISE:
            scale = tl.math.div_rn(absmax, 127.0)
            inv = tl.math.div_rn(127.0, absmax)
        else:
            scale = absmax / 127
            inv = 127 / absmax
        q = tl.extra.cuda.libdevice.round(x * inv).to(tl.int8)
        tl.store(q_ptr + row * K + cols, q, mask=mask)
        tl.store(s_ptr + row, scale)

    rng = np.random.default_rng(args.seed)
    # Rows with a spread of magnitudes (three decades) and a few outlier channels, as activations have.
    x = rng.standard_normal((args.rows, args.k)).astype(np.float32)
    x *= np.exp(rng.uniform(-3, 3, size=(args.rows, 1))).astype(np.float32)
    x[:, rng.choice(args.k, 8, replace=False)] *= 20
    xt = torch.from_numpy(x).to(torch.bfloat16).cuda()
    block = triton.next_power_of_2(args.k)
    want_q, want_s = qconform.quantize_activations(xt.cpu(), "sglang")

    ok = True
    for precise in (True, False):
        q = torch.empty((args.rows, args.k), dtype=torch.int8, device="cuda")
        s = torch.empty((args.rows,), dtype=torch.float32, device="cuda")
        quantize_rows[(args.rows,)](xt, q, s, args.k, BLOCK=block, PRECISE=precise)
        torch.cuda.synchronize()
        q, s = q.cpu().numpy(), s.cpu().numpy()
        scale_rows = int(np.count_nonzero(s.view(np.uint32) != want_s.view(np.uint32)))
        code_diff = q != want_q
        codes = int(np.count_nonzero(code_diff))
        code_rows = int(np.count_nonzero(code_diff.any(axis=1)))
        name = "tl.math.div_rn (IEEE)" if precise else "Triton `/` (div.full.f32)"
        print(f"{name:28s} rows {args.rows}, scales differing {scale_rows} "
              f"({1e6 * scale_rows / args.rows:.1f} per million rows), codes differing {codes} of {q.size} "
              f"in {code_rows} rows, max |code diff| "
              f"{int(np.max(np.abs(q.astype(np.int16) - want_q.astype(np.int16)))) if codes else 0}")
        if codes:
            r, c = np.argwhere(code_diff)[0]
            print(f"  first: row {r} col {c}: x = {float(xt[r, c].float()):.9g}, GPU code {q[r, c]}, "
                  f"qconform {want_q[r, c]}; scale GPU {s[r]:.9g} (0x{s.view(np.uint32)[r]:08x}) vs "
                  f"{want_s[r]:.9g} (0x{want_s.view(np.uint32)[r]:08x})")
        if precise and (scale_rows or codes):
            ok = False
    print("PASS: with IEEE division the GPU kernel equals qconform's sglang quantizer bit for bit" if ok else
          "FAIL: the IEEE-division kernel differs from qconform's sglang quantizer")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
