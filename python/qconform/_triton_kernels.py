"""The Triton INT8 scaled-MM kernel (imported only by :mod:`qconform.triton_arm`; needs Triton).

Shapes and layouts: ``a_q`` int8 [M,K] row-major, ``w_q`` int8 [N,K] row-major (Wᵀ as
column-major, as vLLM stores it), ``a_scale`` f32 [M], ``w_scale`` f32 [N], optional ``bias`` bf16
[N], ``y`` bf16 [M,N] row-major.

The epilogue is vLLM's ``triton_scaled_mm`` order (``vllm-triton`` in qconform's table),
``bf16(rn32(rn32(f32(acc) * sa) * sw))``, with every rounding point explicit:

1. ``acc``: int32 from ``tl.dot`` of int8 tiles (``out_dtype=tl.int32``: integer MMA, exact while
   K·2^14 < 2^31, i.e. K <= 131071, which the launcher checks).
2. ``f32(acc)``: ``acc.to(tl.float32)``, one round-to-nearest-even (``cvt.rn.f32.s32``).
3. ``* sa`` then ``* sw``: two separate fp32 multiplies, each rounded (``mul.rn.f32``). A product of
   two multiplies has no add to contract with, and the launcher also passes
   ``enable_fp_fusion=False`` so that no ``mul``/``add`` pair anywhere becomes an FMA. Triton does
   not reassociate floating point (no fast-math), so ``(acc*sa)*sw`` is not turned into
   ``acc*(sa*sw)``.
4. ``bf16(...)``: ``.to(tl.bfloat16, fp_downcast_rounding="rtne")``, round-to-nearest-even.
5. bias (vLLM adds it after the conversion, ``c += bias`` in bf16): here written out as
   ``bf16(rn32(f32(y) + f32(bias)))`` so that it is exactly qconform's formula whatever the
   backend does for a bf16 add.

Subnormals: Triton's NVIDIA backend does not flush fp32 subnormals by default (no ``.ftz``); the
CPU emulation keeps them too. If a future Triton flushes them, the difference shows up in the
``formula_mismatch`` counts of ``qconform.verify`` (and ``mutant:ftz-epilogue`` is the model).
FP8 (``ACC_DTYPE=tl.float32``, ``a_ptr``/``w_ptr`` float8e4nv): the same kernel on e4m3 tiles, as vLLM's
``triton_scaled_mm`` runs an FP8 layer; step 2 is then the identity and the epilogue order is
``bf16(rn32(rn32(d * sa) * sw))``. How Triton's ``tl.dot`` accumulates e4m3 tiles on sm_90 depends on the tile: with the launcher's
tiles (vLLM's heuristic, at least 64 rows) it is a wgmma, measured ``hopper-fp8-chain`` on the H200; a
16-row tile compiles it to ``mma.sync ... f16.f16.f32`` (another chain, docs/gpu.md).
:func:`qconform.triton_arm.fp8_arm` declares no model by default: identify measures it.
``STORE_D=True`` (FP8) stores that fp32 ``d`` instead of running the epilogue: the arm's unscaled entry
(``accumulate=``), through which identify reads ``d`` at full fp32 resolution. The K loop is the same
text; it is a separate specialization of the kernel, so identify's held-out layers go through ``run``
(the epilogue kernel) to confirm that model and epilogue together predict what the arm outputs.
"""
import triton
import triton.language as tl


@triton.jit
def scaled_mm_vllm_triton(a_ptr, w_ptr, sa_ptr, sw_ptr, bias_ptr, y_ptr, M, N, K,
                          stride_am, stride_wn, stride_ym,
                          HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, ACC_DTYPE: tl.constexpr, ZERO: tl.constexpr,
                          STORE_D: tl.constexpr = False):
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N

    # 64-bit row offsets: M*K and N*K can exceed 2^31 bytes for large layers.
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    # The W tile is read as [BLOCK_K, BLOCK_N] (Wᵀ): element (k, n) is w_q[n, k].
    w_ptrs = w_ptr + offs_k[:, None] + offs_n[None, :].to(tl.int64) * stride_wn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k0 * BLOCK_K
        # Masked lanes load 0: a zero product adds nothing, so a ragged K tail stays exact.
        # (ZERO: 0 for int8 tiles, 0.0 for e4m3 ones: Triton casts no integer to fp8.)
        a = tl.load(a_ptrs, mask=mask_m[:, None] & (offs_k[None, :] < k_left), other=ZERO)
        w = tl.load(w_ptrs, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=ZERO)
        acc = tl.dot(a, w, acc, out_dtype=ACC_DTYPE)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K

    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    if STORE_D:
        # The unscaled entry (FP8): the fp32 ``d`` of the K loop above, stored as it is (y is fp32 here).
        tl.store(y_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])
    else:
        sa = tl.load(sa_ptr + offs_m, mask=mask_m, other=1.0)
        sw = tl.load(sw_ptr + offs_n, mask=mask_n, other=1.0)
        t = acc.to(tl.float32)        # step 2: f32(acc), RNE (FP8: d as it is)
        t = t * sa[:, None]           # step 3a: rn32(f32(acc) * sa)
        t = t * sw[None, :]           # step 3b: rn32(... * sw)
        y = t.to(tl.bfloat16, fp_downcast_rounding="rtne")  # step 4
        if HAS_BIAS:
            b = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)
            s = y.to(tl.float32) + b.to(tl.float32)[None, :]   # step 5: rn32 add of two bf16 values
            y = s.to(tl.bfloat16, fp_downcast_rounding="rtne")
        tl.store(y_ptrs, y, mask=mask_m[:, None] & mask_n[None, :])
