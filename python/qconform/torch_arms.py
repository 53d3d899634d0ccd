"""An arm built on ``torch._int_mm`` (cuBLASLt int8 GEMM with an int32 result on CUDA; oneDNN or
a reference loop on the CPU) followed by the ``vllm-triton`` epilogue order in eager PyTorch:
``bf16(rn32(rn32(f32(acc) * sa) * sw))``. Each eager op is its own kernel, so nothing is
contracted; ``Tensor.to(torch.bfloat16)`` rounds to nearest even.

The arm exposes its INT32 accumulator, so check C4 compares cuBLASLt's integer result with the
exact one (an older cuBLAS returned wrong ``_int_mm`` results: pytorch/pytorch#107671).

``torch._int_mm`` constraints on CUDA: M > 16 (smaller M is padded here with zero rows, which is
exact: a zero row adds nothing), K and N multiples of 8 (checked, with a clear error).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from ._qconform import InputError
from ._torch_common import GpuUnavailableError, device_description, layer_tensors, require_torch

__all__ = ["GpuUnavailableError", "int_mm_scaled", "int_mm_arm"]


def int_mm_scaled(a_q: Any, a_scale: Any, w_q: Any, w_scale: Any, bias: Optional[Any] = None,
                  *, device: Any = "cuda") -> Tuple[Any, Any]:
    """Returns ``(y bf16 [M,N], acc int32 [M,N])`` as torch tensors on `device`."""
    torch = require_torch("qconform.torch_arms", need_cuda=str(device).startswith("cuda"))
    if not hasattr(torch, "_int_mm"):
        raise GpuUnavailableError(f"torch {torch.__version__} has no torch._int_mm (needs torch >= 2.1)")
    a, sa, w, sw, b = layer_tensors(torch, a_q, a_scale, w_q, w_scale, bias, device)
    M, K = a.shape
    N = w.shape[0]
    if a.device.type == "cuda" and (K % 8 or N % 8):
        raise InputError(f"torch._int_mm on CUDA needs K and N multiples of 8, found K={K}, N={N}")
    rows = M
    if a.device.type == "cuda" and M <= 16:
        a = torch.cat([a, torch.zeros((32 - M, K), dtype=torch.int8, device=a.device)], dim=0)
    acc = torch._int_mm(a, w.t())[:rows]  # w.t(): [K,N] column-major, cuBLASLt's preferred int8 layout
    t = acc.to(torch.float32)        # f32(acc), RNE
    t = t * sa[:, None]              # rn32(f32(acc) * sa)
    t = t * sw[None, :]              # rn32(... * sw)
    y = t.to(torch.bfloat16)         # RNE
    if b is not None:
        y = (y.to(torch.float32) + b.to(torch.float32)[None, :]).to(torch.bfloat16)
    return y, acc.contiguous()


def int_mm_arm(*, device: Any = "cuda", name: str = "torch:int-mm-vllm-triton") -> Any:
    """``torch._int_mm`` + the vllm-triton epilogue as a :class:`qconform.Arm` that exposes its
    accumulator (C4) and declares the ``vllm-triton`` formula."""
    import qconform

    torch = require_torch("qconform.torch_arms", need_cuda=str(device).startswith("cuda"))

    def torch_int_mm_scaled(a_q, a_scale, w_q, w_scale, bias):
        return int_mm_scaled(a_q, a_scale, w_q, w_scale, bias, device=device)

    return qconform.arm(
        torch_int_mm_scaled, name=name, epilogue="vllm-triton", exposes_accumulator=True,
        description="torch._int_mm (int32) + vllm-triton epilogue order in eager PyTorch",
        device=device_description(torch, device), library=f"torch {torch.__version__}")
