"""qconform: are two implementations of a quantized linear layer interchangeable?

The C++ core of qconform on NumPy arrays and PyTorch tensors, with any Python callable usable
as an *arm* (one implementation of ``Y = bf16((A_q · W_qᵀ) ⊙ s_a ⊙ s_w (+ bias))``).

Conventions (the same as the CLI and the operand files):

- ``a_q`` int8 ``[M, K]``, ``a_scale`` float32 ``[M]``, ``w_q`` int8 ``[N, K]`` (Wᵀ as
  column-major), ``w_scale`` float32 ``[N]``, optional ``bias`` bf16 ``[N]``;
- bf16 arrays are ``uint16`` bit patterns, ``ml_dtypes.bfloat16`` arrays or ``torch.bfloat16``
  tensors (all read without a copy on the CPU); outputs are ``uint16`` bit patterns;
- results are the same JSON documents the CLI writes with ``--json``, as dicts;
- errors from the core raise :class:`InputError` (a ``ValueError``), :class:`ArmFailure` (an
  isolated plugin arm crashed, hung, exited or wrote into its inputs) or :class:`InternalError`
  (a ``RuntimeError``), all :class:`Error`, carrying the C++ message.

Example::

    import qconform
    layers = qconform.synth("tiny", m=16)
    r = qconform.verify("cpu:vllm-cutlass", my_kernel, layers)
    print([(c["id"], c["verdict"]) for c in r["checks"]])
"""
from __future__ import annotations

import inspect
import os
import platform
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _qconform
from ._arrays import bf16_bits_to_float32, float32_to_bf16_bits, fp8_element_type, to_host
from ._qconform import Arm, ArmFailure, Error, InputError, InternalError, PythonArm

__all__ = [
    "Arm", "PythonArm", "Error", "InputError", "InternalError", "ArmFailure", "OperandList",
    "__version__", "arm", "arms", "apply_epilogue", "boundary", "compare", "epilogues",
    "exact_accumulate", "fp8_accumulate", "identify", "load_operands", "predict", "quantize_activations", "run", "save_operands", "synth",
    "transfer", "verify", "bf16_bits_to_float32", "float32_to_bf16_bits",
]

__version__: str = _qconform.version()

# What a Python arm receives and returns (documentation aliases).
ArrayLike = Any
ArmCallable = Callable[..., Any]
ArmSpec = Union[str, Arm, ArmCallable]
Layer = Dict[str, Any]
OperandsSpec = Union[str, "os.PathLike[str]", Sequence[Mapping[str, Any]], Mapping[str, Any]]

DEFAULT_SCALES: Tuple[str, ...] = ("real", "pow2-channel", "pow2-layer")


class OperandList(list):
    """The layers of an operand file (a list of layer dicts) with the file's ``path``, ``sha256``
    and ``metadata``. Arrays are read-only NumPy views into the memory-mapped file."""

    path: str
    sha256: str
    metadata: Dict[str, str]


# ---- accumulation, epilogues, comparison --------------------------------------------------------

def exact_accumulate(a_q: ArrayLike, w_q: ArrayLike, *, wide: Optional[bool] = None, threads: int = 0) -> np.ndarray:
    """Exact integer accumulators ``acc[m, n] = Σ_k a_q[m, k] · w_q[n, k]``.

    ``a_q`` int8 ``[M, K]``, ``w_q`` int8 ``[N, K]``. Returns int32 ``[M, N]`` when ``K <= 131071``
    (then no INT32 accumulator can overflow, so the result is exact and order independent), int64
    otherwise or with ``wide=True``. ``threads=0`` uses every core.
    """
    return _qconform.exact_accumulate(to_host(a_q), to_host(w_q), wide, threads)


def apply_epilogue(name: str, acc: ArrayLike, a_scale: ArrayLike, w_scale: ArrayLike,
                   bias: Optional[ArrayLike] = None, *, threads: int = 0) -> np.ndarray:
    """The named bit-exact epilogue (``qconform.epilogues()``, or a formula string) on int32 or int64
    accumulators ``[M, N]``, or on an FP8 GEMM's float32 ``d`` for an FP8 formula (over ``d``, or
    ``"fp8-scaled"``): returns bf16 bit patterns (uint16) ``[M, N]``."""
    return _qconform.apply_epilogue(name, to_host(acc), to_host(a_scale), to_host(w_scale),
                                    None if bias is None else to_host(bias), threads)


def epilogues() -> List[Dict[str, Any]]:
    """Every named epilogue formula: name, formula (rounding points explicit), source, bias handling."""
    return _qconform.epilogues()


def compare(a: ArrayLike, b: ArrayLike, *, layer: str = "", near_zero_fraction: float = 1e-2,
            max_listed: int = 10) -> Dict[str, Any]:
    """Comparison statistics of two bf16 outputs of the same shape (``[rows, cols]`` or 1-D).

    ``a`` is the reference side for the near-zero classification. Returns the dict the CLI writes:
    ``total``, ``bitwise_diff``, ``signed_zero_diff``, NaN/inf/subnormal counts, ``ulp_histogram``
    over finite pairs, ``max_ulp``, ``max_rel``, near-zero counts and the first differing elements
    with coordinates and bit patterns. A NaN never counts as close.
    """
    return _qconform.compare(to_host(a), to_host(b), layer, near_zero_fraction, max_listed)


# ---- arms ---------------------------------------------------------------------------------------

def arms() -> List[str]:
    """Every listable built-in arm label (``cpu:vllm-cutlass``, ``mutant:...``, ``onednn:s8s8``, ...)."""
    return _qconform.list_arms()


def _callable_name(fn: Callable[..., Any]) -> str:
    target = fn
    # functools.partial and similar wrappers: name the wrapped function.
    while hasattr(target, "func") and callable(getattr(target, "func")) and not inspect.isfunction(target):
        target = target.func
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{qualname}" if module else qualname


def _python_library() -> str:
    parts = [f"python {platform.python_version()}", f"numpy {np.__version__}"]
    torch = sys.modules.get("torch")
    if torch is not None:
        parts.append(f"torch {torch.__version__}")
    return ", ".join(parts)


def _takes_positional(fn: Callable[..., Any], count: int) -> Optional[bool]:
    """Whether ``fn`` can be called with ``count`` positional arguments (None: its signature is unknown)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(*range(count))
    except TypeError:
        return False
    return True


def _fp8_kind(spec: Callable[..., Any], accumulation_model: Optional[str], accumulate: Any) -> str:
    """An FP8 callable is a kernel ``fn(a_q, a_scale, w_q, w_scale, bias) -> y`` or a GEMM ``fn(a, w) -> d``:
    its signature says which; ``accumulate=`` makes it a kernel."""
    if accumulate is not None:
        return "fp8-kernel"
    five, two = _takes_positional(spec, 5), _takes_positional(spec, 2)
    if five and not two:
        return "fp8-kernel"
    if two and not five:
        return "fp8-gemm"
    # Both or unknown: a declared model keeps its old meaning (the unscaled GEMM), else the kernel.
    return "fp8-gemm" if accumulation_model else "fp8-kernel"


def arm(spec: ArmSpec, *, name: Optional[str] = None, epilogue: Optional[str] = None,
        exposes_accumulator: bool = False, description: Optional[str] = None,
        device: Optional[str] = None, library: Optional[str] = None,
        accumulation_model: Optional[str] = None, element: Optional[str] = None,
        accumulate: Optional[Callable[..., Any]] = None, block_size: Optional[Sequence[int]] = None) -> Arm:
    """An :class:`Arm` from a label (``"cpu:vllm-cutlass"``), an existing arm, or a callable.

    A callable ``fn(a_q, a_scale, w_q, w_scale, bias) -> y`` receives read-only NumPy views of the
    operands (``bias`` is ``None`` for layers without one) and returns ``y`` bf16 ``[M, N]``
    (uint16 bit patterns, ``ml_dtypes.bfloat16`` or ``torch.bfloat16``, on any device); with
    ``exposes_accumulator=True`` it returns ``(y, acc)`` with ``acc`` int32 ``[M, N]`` and check C4
    compares it with the exact accumulator. Anything else raises :class:`InputError`. A callable
    that cannot take some operands (a bias, a shape) refuses them by raising :class:`InputError`,
    as the built-in arms do (``identify`` reads a refused bias as a kernel without one).

    Its run record names the kernel ``<module>.<qualname>`` of the callable, or ``name``; the
    label is ``name`` when it contains a ``:``, else ``python:<kernel>``. ``epilogue`` declares the
    formula the callable implements (a name from :func:`epilogues`, or a formula string of the formula
    space such as :func:`identify` returns, docs/identify.md): verify then checks the output
    against it bit for bit and predicts the exact set of differences with the other arm.

    With ``accumulation_model`` (a model name from docs/accumulation.md: ``"hopper-fp8-chain"``,
    ``"hopper-fp8-promote4"``, ``"exact"``, ``"sequential"``, ``"blocked-<chunk>"``,
    ``"split-k-<splits>"``) the callable is an *FP8* kernel that declares that model:
    ``fn(a, w) -> d`` receives ``a`` uint8 ``[M, K]`` and ``w`` uint8 ``[N, K]``, the e4m3fn codes
    (bit patterns; ``a.view(ml_dtypes.float8_e4m3fn)`` gives the values) of the unscaled GEMM, and
    returns ``d`` float32 ``[M, N]`` = the GEMM as the kernel accumulates it, without scales
    (NumPy or torch float32, any device). :func:`fp8_accumulate` calls it that way; :func:`run`
    passes it the layer's codes (an INT8 layer's codes re-encoded exactly to e4m3, refused when
    one has no e4m3 encoding) and applies the ``fp8-scaled`` epilogue to ``d``. The declaration is
    the callable's claim, recorded in ``info["accumulation_model"]`` and in the run record; check it
    with :func:`fp8_accumulate` against ``"cpu:fp8-<model>"``.

    FP8 callables need no declaration: ``element="e4m3"`` makes an FP8 arm whose accumulation model
    (and, for a kernel, its epilogue) is unknown until :func:`identify` measures it. The callable is
    either a whole FP8 *kernel* with the INT8 signature, ``fn(a_q, a_scale, w_q, w_scale, bias) -> y``
    (``a_q`` uint8 ``[M, K]`` and ``w_q`` uint8 ``[N, K]`` e4m3fn codes, fp32 scales, ``bias`` bf16
    or ``None``, ``y`` bf16 ``[M, N]``: its epilogue is its own), or an unscaled *GEMM*
    ``fn(a, w) -> d`` as above (qconform applies ``fp8-scaled``); its signature says which (a callable
    that takes five arguments is a kernel, two a GEMM). A kernel may offer its unscaled GEMM too:
    ``accumulate=g`` with ``g(a, w) -> d`` (identify then measures the model through ``g`` and the
    epilogue through ``fn``). A kernel's ``epilogue`` is a formula over ``d``
    (``"bf16(rn32(sa * rn32(d * sw)))"``, what :func:`identify` returns), and ``accumulation_model`` may
    be given with it: what identify measured, declared back for :func:`verify`.

    With a *block* model (``accumulation_model="block-triton"``, ``"block-deepgemm"``, ...: block-scaled
    FP8, docs/accumulation.md) the callable is a block-scaled kernel: ``fn(a, w, a_scale, w_scale,
    block_size) -> d`` receives the e4m3fn codes as above, ``a_scale`` float32 ``[M, ceil(K/g)]`` (or
    ``[M]``), ``w_scale`` float32 ``[ceil(N/b_n), ceil(K/b_k)]`` (or ``[N]``) and ``block_size`` ``[b_n,
    b_k]`` (the argument order of vLLM's ``w8a8_block_fp8_matmul``), and returns ``d`` float32 ``[M, N]``,
    the kernel's fp32 accumulator before the bf16 rounding; :func:`run` rounds it to bf16 (RNE) and verify
    holds ``d`` to the declared block model. ``block_size=(b_n, b_k)`` declares the one scale block the
    kernel takes (layers with another are refused); by default any.

    A block-scaled kernel needs no declaration either: ``element="e4m3", block_size=(b_n, b_k)`` with a
    kernel of the INT8 signature ``fn(a_q, a_scale, w_q, w_scale, bias) -> y`` (e4m3fn codes, the scales in
    their block layouts ``a_scale`` ``[M, ceil(K/g)]`` and ``w_scale`` ``[ceil(N/b_n), ceil(K/b_k)]``, ``y``
    bf16) makes a block-scaled FP8 arm whose block model is unknown until :func:`identify` measures its
    blocks, its per-block chain and its promotion form through ``y`` (docs/identify.md); it then takes
    block-scaled layers only, and ``accumulation_model=`` with what identify names (and ``element="e4m3"``,
    which keeps the kernel's signature) declares it back.
    """
    fp8 = element is not None or accumulation_model is not None or accumulate is not None
    if isinstance(spec, Arm):
        return spec
    if isinstance(spec, str):
        return _qconform.make_arm(spec)
    if isinstance(spec, os.PathLike):
        raise InputError(f"arm: expected a label, an Arm or a callable, found a path {os.fspath(spec)!r} "
                         f"(plugins are named `plugin:<path.so>`)")
    if not callable(spec):
        raise InputError(f"arm: expected a label such as 'cpu:vllm-cutlass', a qconform.Arm or a callable "
                         f"f(a_q, a_scale, w_q, w_scale, bias) -> y, found {type(spec).__qualname__}")
    if element is not None and element != "e4m3":
        raise InputError(f"arm: element: expected 'e4m3' (an FP8 callable receives e4m3fn codes), found {element!r}")
    if accumulate is not None and not callable(accumulate):
        raise InputError(f"arm: accumulate: expected a callable g(a, w) -> d, found {type(accumulate).__qualname__}")
    if not fp8:
        kind = "int8"
        if _takes_positional(spec, 2) and _takes_positional(spec, 5) is False:
            raise InputError("arm: the callable takes 2 arguments (a, w), an FP8 GEMM's unscaled entry; an INT8 arm "
                             "takes fn(a_q, a_scale, w_q, w_scale, bias) -> y. Pass element='e4m3' (qconform.identify "
                             "then measures its accumulation model) or accumulation_model=... to declare one")
    elif accumulation_model and accumulation_model.startswith("block-") and element is None:
        kind = "fp8-block"  # fn(a, w, a_scale, w_scale, block_size) -> d, the block-scaled fp32 D
    elif block_size is not None and element is not None:
        kind = "fp8-kernel"  # a block-scaled kernel fn(a_q, a_scale, w_q, w_scale, bias) -> y, its model declared or not
    else:
        kind = _fp8_kind(spec, accumulation_model, accumulate)
    kernel = name if name else _callable_name(spec)
    label = kernel if ":" in kernel else f"python:{kernel}"
    return _qconform.python_arm(
        spec, to_host, label, kernel, epilogue or "", bool(exposes_accumulator),
        description or f"Python callable {kernel}",
        device or f"python (host: {platform.machine()})", library or _python_library(), "",
        accumulation_model or "", kind, accumulate, *_block_size(block_size))


def _block_size(block_size: Optional[Sequence[int]]) -> Tuple[int, int]:
    if block_size is None:
        return 0, 0
    if len(block_size) != 2 or not all(isinstance(x, int) and x > 0 for x in block_size):
        raise InputError(f"block_size: expected (rows, cols), two positive integers, found {block_size!r}")
    return int(block_size[0]), int(block_size[1])


def fp8_accumulate(arm_spec: ArmSpec, a: ArrayLike, w: ArrayLike, *, threads: int = 0) -> Dict[str, Any]:
    """An FP8 arm's unscaled GEMM ``d[m, n] = Σ_k a[m, k]·w[n, k]`` as the arm accumulates it.

    ``a`` ``[M, K]`` and ``w`` ``[N, K]``: e4m3fn codes as uint8 bit patterns (or
    ``ml_dtypes.float8_e4m3fn`` / ``torch.float8_e4m3fn`` arrays, read as their bytes); NaN codes
    raise :class:`InputError` naming the coordinate. The arm is one that declares an accumulation
    model: ``"cpu:fp8-<model>"``, ``"cuda:cublaslt-fp8"``, a plugin or a Python callable made with
    ``arm(fn, accumulation_model=...)``; an INT8 arm raises :class:`InputError`. Returns
    ``{"d": float32 [M, N], "record": dict}`` (the record names the arm, kernel and model).
    ``sweep --arms`` compares two FP8 arms this way (docs/accumulation.md).
    """
    return arm(arm_spec).fp8_accumulate(to_host(a), to_host(w), threads)


def run(arm_spec: ArmSpec, layer: Mapping[str, Any]) -> Dict[str, Any]:
    """Runs one arm on one layer dict: ``{"y": uint16 [M,N], "acc": int32 [M,N] | None, "d": float32 [M,N] |
    None (a block-scaled FP8 arm's fp32 D), "record": dict}``."""
    return arm(arm_spec).run(_layer_to_host(layer))


# ---- operands -----------------------------------------------------------------------------------

def _layer_to_host(layer: Mapping[str, Any]) -> Dict[str, Any]:
    if not isinstance(layer, Mapping):
        raise InputError(f"layer: expected a dict with keys name, a_q, a_scale, w_q, w_scale and optional bias, "
                         f"found {type(layer).__qualname__}")
    out = {k: (to_host(v) if k not in ("name", "source", "a_type", "w_type") and v is not None else v)
           for k, v in layer.items()}
    # ml_dtypes / torch float8 operands name their own element type; uint8 bit patterns need `a_type`/`w_type`.
    for codes, key in (("a_q", "a_type"), ("w_q", "w_type")):
        seen = fp8_element_type(layer.get(codes))
        if seen is not None and layer.get(key) is None:
            out[key] = seen
        elif seen is not None and layer.get(key) != seen:
            raise InputError(f"layer `{layer.get('name')}`: {key} is {layer.get(key)!r} but {codes} is a {seen} array")
    return out


def _operands_in(operands: OperandsSpec) -> Union[str, List[Dict[str, Any]]]:
    if isinstance(operands, (str, os.PathLike)):
        return os.fspath(operands)
    if isinstance(operands, Mapping):
        return [_layer_to_host(operands)]
    if isinstance(operands, Iterable):
        return [_layer_to_host(layer) for layer in operands]
    raise InputError(f"operands: expected a path to a safetensors operands file or a list of layer dicts, "
                     f"found {type(operands).__qualname__}")


def load_operands(path: Union[str, "os.PathLike[str]"], *, digest: bool = True) -> OperandList:
    """Reads an operand file (safetensors, keys ``<layer>.a_q`` ...; see docs/python.md).

    Strict: unknown keys, wrong dtypes or shapes, non-finite or non-positive scales raise
    :class:`InputError` naming the file and the key. The arrays are read-only views into the
    memory-mapped file (no copy). ``digest=False`` skips hashing the file (``sha256`` is empty).
    """
    d = _qconform.load_operands(os.fspath(path), digest)
    out = OperandList(d["layers"])
    out.path, out.sha256, out.metadata = d["path"], d["sha256"], dict(d["metadata"])
    return out


def save_operands(path: Union[str, "os.PathLike[str]"], layers: OperandsSpec,
                  metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes layers (dicts ``{name, a_q, a_scale, w_q, w_scale, bias?}``) as an operand file,
    atomically (temporary file, then rename). ``metadata`` goes to ``__metadata__``."""
    src = _operands_in(layers)
    if isinstance(src, str):
        raise InputError("save_operands: expected a list of layer dicts, found a path (copy the file instead)")
    _qconform.save_operands(os.fspath(path), src, {str(k): str(v) for k, v in (metadata or {}).items()})


def quantize_activations(x: Any, quantizer: str = "vllm", *,
                         static_scale: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Per-token int8 quantization of activations ``x`` [M, K] (float32, or bfloat16 as
    ml_dtypes/torch bfloat16 or uint16 bit patterns) as an engine computes it: ``quantizer`` is
    ``vllm``, ``sglang``, ``reciprocal`` or ``static`` (with ``static_scale``); see
    docs/epilogues.md, "Quantizers". Returns ``(q, scales)``: int8 [M, K] and float32 [M]."""
    return _qconform.quantize_activations(to_host(x), str(quantizer),
                                          None if static_scale is None else float(static_scale))


def synth(shapes: str = "tiny", m: int = 16, *, seed: int = 0, bias: bool = False,
          outlier_fraction: float = 0.005, outlier_gain: float = 30.0, weight_sigma: float = 0.02,
          act_quantizer: str = "vllm", threads: int = 0, element: str = "int8", act_scale: str = "per-token",
          weight_scale: str = "per-channel", weight_quantizer: str = "deepgemm",
          ue8m0: bool = False) -> List[Dict[str, Any]]:
    """Synthetic operands, byte for byte those of ``qconform synth`` with the same options.

    ``shapes``: ``"qwen3-1.7b"`` (196 layers), ``"qwen3-8b"`` (252), ``"tiny"`` or ``"MxNxK"``
    (one layer; M then overrides ``m``). ``element``: ``"int8"``, ``"e4m3"``, ``"e5m2"`` or
    ``"e5m2-e4m3"`` (activations-weights); an FP8 layer's dict has ``a_type``/``w_type`` and its
    ``a_q``/``w_q`` are uint8 bit patterns (``a_q.view(ml_dtypes.float8_e4m3fn)`` gives values).
    FP8 only: ``act_scale`` ``"per-token"``/``"per-tensor"``, ``weight_scale``
    ``"per-channel"``/``"per-tensor"`` (a per-tensor scale is repeated in ``a_scale``/``w_scale``).
    Block-scaled FP8 (e4m3): ``act_scale="per-token-group:128"`` (``a_scale`` [M, ceil(K/128)];
    ``act_quantizer`` ``"vllm"``, ``"sglang"`` or ``"deepgemm"``), ``weight_scale="per-block:128x128"``
    (``w_scale`` [ceil(N/128), ceil(K/128)]; ``weight_quantizer`` ``"deepgemm"`` or
    ``"compressed-tensors"``), ``ue8m0=True`` for power-of-two scales.
    """
    return _qconform.synth(shapes, m, seed, bias, outlier_fraction, outlier_gain, weight_sigma,
                           act_quantizer, threads, element, act_scale, weight_scale, weight_quantizer, ue8m0)


# ---- checks -------------------------------------------------------------------------------------

def predict(operands: OperandsSpec, *, threads: int = 0) -> Dict[str, Any]:
    """C2, the range prediction per layer (max |acc|, headroom below 2^24, the data-independent
    bound): the dict ``qconform predict`` writes."""
    return _qconform.predict(_operands_in(operands), threads)


def verify(arm_a: ArmSpec, arm_b: ArmSpec, operands: OperandsSpec,
           scales: Union[str, Sequence[str]] = DEFAULT_SCALES, m_sweep: Union[None, int, Sequence[int]] = None,
           *, tolerance_ulps: int = 1, max_listed: int = 10, near_zero_fraction: float = 1e-2,
           threads: int = 0, reference: str = "auto") -> Dict[str, Any]:
    """Runs both arms on identical operands under each scale regime: checks C2–C6.

    ``arm_a``/``arm_b``: labels, :class:`Arm` objects or callables (see :func:`arm`).
    ``operands``: a path to an operand file or a list of layer dicts. ``scales``: any of
    ``real``, ``pow2-channel``, ``pow2-layer``. ``m_sweep``: row counts to run (the first rows of
    each layer), e.g. ``[1, 16, 512]``. ``reference``: where the exact reference accumulators
    are computed, ``auto`` (the GPU when one is usable), ``cpu`` or ``gpu``; the results do not
    depend on it. Returns the JSON document of ``qconform verify --json``.
    """
    if isinstance(scales, str):
        scales = [s for s in scales.split(",") if s]
    if m_sweep is None:
        sweep: List[int] = []
    elif isinstance(m_sweep, (int, np.integer)):
        sweep = [int(m_sweep)]
    else:
        sweep = [int(x) for x in m_sweep]
    a, b = arm(arm_a), arm(arm_b)
    return _qconform.verify(a, b, _operands_in(operands), list(scales), sweep, int(tolerance_ulps),
                            int(max_listed), float(near_zero_fraction), int(threads), str(reference))


def boundary(arm_spec: ArmSpec, *, max_k: int = 32768, overflow_probe: bool = True) -> Dict[str, Any]:
    """C1, the arithmetic preconditions through the arm's own code path: the dict
    ``qconform boundary --json`` writes."""
    return _qconform.boundary(arm(arm_spec), int(max_k), bool(overflow_probe))


def identify(arm_spec: ArmSpec, *, seed: Optional[int] = None) -> Dict[str, Any]:
    """Which epilogue formula an INT8 arm (a label, an :class:`Arm` or any callable) computes:
    designed probes through the arm over the formula space, then a held-out confirmation on
    synthetic operands. For an FP8 arm (``"cpu:fp8-hopper-fp8-chain"``, a callable made with
    ``element="e4m3"``, declared or not) the formula is its accumulation model measured through the
    arm (what ``boundary`` measures, docs/accumulation.md; through its bf16 output when it offers no
    unscaled GEMM) and its epilogue, identified over the formulas of ``d``; the dict has
    ``fp8_accumulation``, ``accumulation_model`` (what to declare) and ``fp8_epilogue``. Returns the dict ``qconform identify --json`` writes (``verdict``
    ``identified`` / ``ambiguous`` / ``unexplained``, ``formula``, ``named``, ``explained``,
    ``candidates``, ``probes``, ...) plus ``printout``, the text the CLI prints. The formula string
    can be passed back as ``arm(fn, epilogue=formula)``; see docs/identify.md."""
    a = arm(arm_spec)
    if seed is None:
        return _qconform.identify(a)
    return _qconform.identify(a, int(seed))


def transfer(a_jsonl: Union[str, "os.PathLike[str]"], b_jsonl: Union[str, "os.PathLike[str]"],
             replay: bool = True, *, seed: int = 20240607, bootstrap: int = 2000, min_bin_support: int = 50,
             bins: int = 10, folds: int = 5, ci_level: float = 0.95,
             return_summary: bool = False) -> Union[Dict[str, Any], Tuple[Dict[str, Any], str]]:
    """C7, token transfer from two arms' per-position JSONL records (A is the reference):
    teacher-forced flips and their dependence on A's logit margin (``replay=True``), or sequence
    agreement of free-running generations (``replay=False``). Returns the dict of
    ``qconform transfer --json`` (and the printed summary with ``return_summary=True``)."""
    d, summary = _qconform.transfer(os.fspath(a_jsonl), os.fspath(b_jsonl), bool(replay), int(seed),
                                    int(bootstrap), int(min_bin_support), int(bins), int(folds), float(ci_level))
    return (d, summary) if return_summary else d
