"""Array plumbing between user tensors and the C++ core.

The core reads CPU arrays through DLPack / the buffer protocol (nanobind), without a copy when
they are C-contiguous. What nanobind cannot see directly is reinterpreted here, still without a
copy where the data is on the host:

- ``ml_dtypes.bfloat16`` NumPy arrays become ``uint16`` views of the same bytes;
- ``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2`` arrays (and torch float8 tensors) become ``uint8``
  views of their bit patterns; ``fp8_element_type`` names their element type;
- ``torch.bfloat16`` tensors become ``int16`` views (the same bit patterns) and then NumPy arrays
  (``Tensor.numpy()`` shares memory for CPU tensors);
- CUDA (or any non-CPU) tensors are copied to the host once: the core runs on the CPU.

Dtype, rank and shape are *not* converted here: the core checks them strictly and raises
:class:`qconform.InputError` naming the argument, the expected and the found dtype.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np


def is_torch_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def to_host(x: Any) -> Any:
    """Returns `x` as something the C++ core can read on the host (see the module docstring)."""
    if isinstance(x, np.ndarray):
        if x.dtype.name == "bfloat16":  # ml_dtypes.bfloat16 (or any bfloat16 extension dtype)
            return x.view(np.uint16)
        if fp8_element_type(x) is not None:
            return x.view(np.uint8)
        return x
    if is_torch_tensor(x):
        import torch

        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16)
        if fp8_element_type(t) is not None:
            return t.view(torch.uint8).numpy()
        if t.dtype in (torch.int8, torch.int32, torch.int64, torch.float32, torch.int16, torch.uint8,
                       torch.float64, torch.float16):
            return t.numpy()
        return t  # other dtypes: the core reports them (via DLPack) as unexpected
    return x


_FP8_NAMES = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}


def fp8_element_type(x: Any) -> Any:
    """"e4m3" or "e5m2" for an ml_dtypes float8_e4m3fn / float8_e5m2 array or a torch float8 tensor
    of those dtypes; None for anything else (uint8 bit patterns included: say `a_type` then)."""
    if isinstance(x, np.ndarray):
        return _FP8_NAMES.get(x.dtype.name)
    if is_torch_tensor(x):
        return _FP8_NAMES.get(str(x.dtype).removeprefix("torch."))
    return None


def bf16_bits_to_float32(y: Any) -> np.ndarray:
    """bf16 bit patterns (uint16) to float32 values, exactly (bf16 is the top half of fp32)."""
    bits = np.asarray(to_host(y))
    if bits.dtype not in (np.uint16, np.int16):
        raise TypeError(f"bf16_bits_to_float32: expected uint16 bit patterns, found {bits.dtype}")
    return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16_bits(x: Any) -> np.ndarray:
    """float32 to bf16 bit patterns with round-to-nearest-even (NaN kept quiet), in NumPy integer
    arithmetic: no dependence on ml_dtypes or on the FPU rounding mode. The NumPy form of the C++
    numeric core's ``encode<kBf16>`` (include/qconform/numerics.hpp: the magnitude rounded by 16 bits,
    half to even; a NaN's top payload kept, quiet bit set); tests/peer/test_numerics_peer.py pins the
    two bit for bit."""
    f = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(f)
    out = rounded.astype(np.uint16)
    out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out
