"""Shared helpers of the GPU arms: imports with clear errors, operands to device tensors."""
from __future__ import annotations

import warnings
from typing import Any, Optional, Tuple

import numpy as np

from ._qconform import InputError


class GpuUnavailableError(RuntimeError):
    """PyTorch, Triton or a CUDA device is missing for a GPU arm."""


def require_torch(what: str, need_cuda: bool = True) -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise GpuUnavailableError(
            f"{what} needs PyTorch (pip install torch); it is not installed: {e}") from e
    if need_cuda and not torch.cuda.is_available():
        raise GpuUnavailableError(
            f"{what} needs a CUDA device, and torch.cuda.is_available() is False on this machine "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    return torch


def device_description(torch: Any, device: Any) -> str:
    dev = torch.device(device)
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        p = torch.cuda.get_device_properties(index)
        return (f"cuda:{index} {p.name} (sm_{p.major}{p.minor}), CUDA runtime {torch.version.cuda}, "
                f"torch {torch.__version__}")
    return f"{dev.type} (torch {torch.__version__})"


def to_device(torch: Any, x: Any, device: Any, dtype: Any) -> Any:
    """A NumPy array (or tensor) as a contiguous tensor on `device`. bf16 bit patterns (uint16)
    become torch.bfloat16 by reinterpretation, never by value conversion. The operands qconform
    hands an arm are read-only views: they are copied (to the device, or cloned on the CPU), never
    written."""
    if isinstance(x, torch.Tensor):
        t = x
    else:
        a = np.asarray(x)
        if a.dtype == np.uint16:
            a = a.view(np.int16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
            t = torch.from_numpy(a)
        if torch.device(device).type == "cpu":
            t = t.clone()
    if dtype == torch.bfloat16 and t.dtype == torch.int16:
        t = t.view(torch.bfloat16)
    if t.dtype != dtype:
        raise InputError(f"expected a {dtype} tensor, found {t.dtype}")
    return t.to(device).contiguous()


def layer_tensors(torch: Any, a_q: Any, a_scale: Any, w_q: Any, w_scale: Any, bias: Optional[Any],
                  device: Any) -> Tuple[Any, Any, Any, Any, Optional[Any]]:
    a = to_device(torch, a_q, device, torch.int8)
    sa = to_device(torch, a_scale, device, torch.float32).reshape(-1)
    w = to_device(torch, w_q, device, torch.int8)
    sw = to_device(torch, w_scale, device, torch.float32).reshape(-1)
    b = None if bias is None else to_device(torch, bias, device, torch.bfloat16).reshape(-1)
    if a.dim() != 2 or w.dim() != 2 or a.shape[1] != w.shape[1]:
        raise InputError(f"expected a_q [M,K] and w_q [N,K] with the same K, found {tuple(a.shape)} and {tuple(w.shape)}")
    if sa.numel() != a.shape[0] or sw.numel() != w.shape[0] or (b is not None and b.numel() != w.shape[0]):
        raise InputError(f"expected a_scale [M={a.shape[0]}], w_scale [N={w.shape[0]}] and bias [N], found "
                         f"{tuple(sa.shape)}, {tuple(sw.shape)}, {None if b is None else tuple(b.shape)}")
    return a, sa, w, sw, b
