// The epilogue arithmetic, written once for the host and the device.
//
// This header is the one text that both the CPU emulation (`src/epilogue/epilogue.cpp`, behind
// `qc::Epilogue`) and the CUDA kernels (`src/arms/cuda/kernels/*.cu`) compile: the formula kinds
// and bias modes, the swap-AB rule of `sglang-sm90`, and `formula::apply`, the fp32 formulas of
// `../shared/reference/production-epilogues.md` written over five rounding primitives. Only the
// primitives differ between the two compilations, and each pair rounds identically (one IEEE
// binary32 operation, round to nearest even; fp32 -> bf16 round to nearest even, subnormals kept):
//
//   primitive        host (C++, -ffp-contract=off)              device (nvcc, --fmad=false)
//   mul_rn(a, b)     a * b                                      __fmul_rn(a, b)
//   add_rn(a, b)     a + b                                      __fadd_rn(a, b)
//   fma_rn(a, b, c)  std::fma(a, b, c)                          __fmaf_rn(a, b, c)
//   to_f32_rn(acc)   static_cast<float>(acc) (x86 cvtsi2ss)     __int2float_rn / __ll2float_rn
//   bf16_rn(x)       qc::f32_to_bf16(x) (the numeric core)      __float2bfloat16_rn(x)
//   bf16_value(b)    qc::bf16_to_f32(b) (exact widening)        the same core function
//
// The host's `*` and `+` round once only because the project compiles with -ffp-contract=off
// (CMakeLists.txt, `qconform_flags`); `tests/unit/test_epilogue.cpp` (`EpilogueFormulaText.*`)
// checks that, evaluates this very `apply` symbolically against the formulas of
// production-epilogues.md, and checks that every row of the formula table dispatches to it. The
// GPU tests (`tests/gpu/test_cuda_arms.cpp`) check that the device compilation equals the host one
// bit for bit. NaN inputs are outside this contract (the tile entry points reject non-finite
// scales and biases): the host keeps a NaN's payload, the device may return a canonical NaN.
//
// It includes nothing of the project but the numeric core (numerics.hpp: no fmt, no exceptions,
// device-safe), and under nvcc <cuda_bf16.h> / <cuda_fp16.h>: every host column below is the core
// (in nvcc's host pass too), the device column the intrinsics. CUDA compiles it as C++17: keep it
// free of C++20.
//
// Adding a formula: a kind below (with its `kind_name` and `scale_order`), its body in `apply`, its
// case in `visit_instance`, and its row in the table of `src/epilogue/epilogue.cpp`: two places
// (docs/architecture.md, "Adding a formula").
#pragma once

#include <cstdint>
#include <type_traits>

#include <cmath>

#include "qconform/numerics.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define QC_FORMULA_FN __host__ __device__ __forceinline__
#else
#define QC_FORMULA_FN inline
#endif

namespace qc {

// Which formula body an epilogue evaluates. `sglang_sm90` has no body of its own: it is the
// CUTLASS tree with the Triton order under swap-AB (`instance_kind`); `exact` is the correctly
// rounded result in integer arithmetic, host-only (`qc::exact_bf16` in epilogue.hpp).
// `point` is a point of the formula space (`FormulaPoint` below, `Epilogue::space`), evaluated by
// `formula::apply_point`: the epilogue of a formula string (`qconform identify`, `verify --declare`).
// `torch_rowwise` (FP8) has no body of its own either: PyTorch's sm90 `f8f8bf16_rowwise` epilogue tree,
// `Cast(Add(Bias, Multiply(WScale, Multiply(XScale, Accum))))`, whose Bias broadcasts 0 without a bias
// pointer (the add is always there, and turns a -0 into +0), in the orientation PyTorch's dispatch
// picks for the shape (`torch_rowwise_transposes`): `torch_rowwise_xw` = bf16(rn32(rn32(rn32(d*sa)*sw) + 0))
// or, transposed (X and W swap roles), `torch_rowwise_wx` = bf16(rn32(rn32(sa*rn32(d*sw)) + 0)).
enum class EpilogueKind {
  vllm_cutlass, vllm_triton, sglang_sm89, sglang_sm90, exact, point, torch_rowwise, torch_rowwise_xw, torch_rowwise_wx
};

// How the formula adds a bias (stored as bf16, one per output column n).
enum class BiasMode {
  fma,         // `bf16(fma(sa, t, f32(bias)))`: CUTLASS `multiply_add` contracted into one FMA
  muladd,      // `bf16(rn32(rn32(product) + f32(bias)))`: product rounded to fp32, then an fp32 add
  after_bf16,  // `bf16(rn32(f32(bf16(product)) + f32(bias)))`: bias added after a bf16 rounding
  exact,       // the bias joins the exact real sum that is rounded once
  refuse,      // ambiguous for this name: `apply` with a bias throws QC_INPUT (pick a suffixed name)
};

// ---- The formula space (docs/identify.md) ----------------------------------------------------
//
// One point is one complete epilogue: how the accumulator is converted, the precision each scale is
// cast to, the grouping of the two scale products and the precision the first product rounds to,
// where a bias is added (and whether that add is contracted into the preceding multiply), and the
// output rounding and type. Every named fp32 formula of the table is a point
// (`Epilogue::point`); `formula::apply_point` is their one generic text.

// The accumulator the epilogue starts from: an exact integer (INT8: int32, or int64 beyond INT32),
// or the fp32 result `d` of an FP8 GEMM (its accumulation model's, docs/accumulation.md).
enum class FormulaInput { integer, fp32 };
// The accumulator -> first working value. An integer: fp32 round-to-nearest-even, fp32
// round-toward-zero, straight to bf16 or fp16 (one RNE rounding each), through fp32 to bf16 or fp16
// (two RNE roundings: what PyTorch's `int32_tensor.to(torch.bfloat16)` and the type promotion of
// `int32_tensor * bf16_tensor` compute, docs/identify.md), or `exact` (no rounding until the output:
// the `exact` formula). An fp32 `d`: `f32_rn` keeps it, `bf16_rn` / `f16_rn` round it once (RNE);
// the other conversions do not apply to it.
enum class AccConversion { f32_rn, f32_rz, bf16_rn, f16_rn, exact, bf16_via_f32, f16_via_f32 };
// A precision a scale is cast to or an intermediate rounds to (RNE); the output type (bf16, f16).
enum class Precision { f32, bf16, f16 };
// The order and grouping of the two scale products.
enum class ScaleGrouping {
  acc_sa_sw,     // (acc * sa) * sw             vllm-triton
  acc_sw_sa,     // sa * (acc * sw)             vllm-cutlass
  scales_first,  // acc * (sw * sa)             sglang-sm89
};
// Where a bias is added.
enum class BiasPlacement {
  none,           // the formula takes no bias: given one, it refuses (like `vllm-cutlass`)
  before_output,  // an fp32 add before the output rounding (or fused, `FormulaPoint::fma`)
  after_output,   // added after the output rounding: out(rn32(f32(out(y)) + f32(bias)))
};
enum class OutRounding { rn, rz };

struct FormulaPoint {
  AccConversion conv = AccConversion::f32_rn;
  Precision sa = Precision::f32;     // the activation scale's cast
  Precision sw = Precision::f32;     // the weight scale's cast
  ScaleGrouping grouping = ScaleGrouping::acc_sw_sa;
  Precision first = Precision::f32;  // the first product (acc*sa, acc*sw or sw*sa), rounded to fp32, then to this
  BiasPlacement bias = BiasPlacement::none;
  bool fma = false;                  // an add that follows a multiply is contracted into one FMA
  OutRounding rounding = OutRounding::rn;
  Precision out = Precision::bf16;   // bf16 or f16 (the bit pattern the epilogue returns)
  // The second product, rounded to fp32, then to this (unless it is fused with the bias add): an
  // intermediate stored in bf16 or fp16 before the bias is added or the output rounded.
  Precision second = Precision::f32;
  FormulaInput input = FormulaInput::integer;

  constexpr bool operator==(const FormulaPoint& o) const {
    return conv == o.conv && sa == o.sa && sw == o.sw && grouping == o.grouping && first == o.first &&
           bias == o.bias && fma == o.fma && rounding == o.rounding && out == o.out && second == o.second &&
           input == o.input;
  }
  constexpr bool operator!=(const FormulaPoint& o) const { return !(*this == o); }
};

namespace formula {

// ---- The primitives -------------------------------------------------------------------------

QC_FORMULA_FN float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;  // one rounding: -ffp-contract=off
#endif
}

QC_FORMULA_FN float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;  // one rounding: -ffp-contract=off
#endif
}

QC_FORMULA_FN float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// Integer accumulator -> fp32, one round-to-nearest-even (exact while |acc| <= 2^24). An fp32
// accumulator (the FP8 GEMM's result) enters unchanged.
QC_FORMULA_FN float to_f32_rn(int32_t acc) {
#if defined(__CUDA_ARCH__)
  return __int2float_rn(acc);
#else
  return static_cast<float>(acc);
#endif
}
QC_FORMULA_FN float to_f32_rn(int64_t acc) {
#if defined(__CUDA_ARCH__)
  return __ll2float_rn(acc);
#else
  return static_cast<float>(acc);
#endif
}
QC_FORMULA_FN float to_f32_rn(float acc) { return acc; }

// fp32 -> bf16 bit pattern, round to nearest even.
QC_FORMULA_FN uint16_t bf16_rn(float x) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
  return f32_to_bf16(x);
#endif
}

// bf16 bit pattern -> fp32, exact (bf16 is the top half of an fp32): the core's decoding, on both sides.
QC_FORMULA_FN float bf16_value(uint16_t b) { return bf16_to_f32(b); }

// The +0 a formula adds where its tree adds a bias node without a bias (`torch_rowwise`); symbolic
// readers of the text overload it to print "0".
QC_FORMULA_FN float zero_of(float) { return 0.0f; }

// ---- The primitives of the formula space (host: integer and bit arithmetic; device: intrinsics)
//
//   primitive            host (the numeric core)                      device
//   to_f32_rz(acc)       i64_to_f32_rz (encode_int, toward zero)      __int2float_rz / __ll2float_rz
//   to_narrow_rn(p, acc) encode_int<kBf16 / kFp16> (RNE), widened      __int2bfloat16_rn, __int2half_rn (ll too)
//   round_to(p, x)       f32_to_bf16 / f32_to_f16, widened back       __float2bfloat16_rn / __float2half_rn
//   out_round(p, r, x)   f32_to_bf16(_rz) / f32_to_f16(_rz)           __float2bfloat16_rn/_rz, __float2half_rn/_rz
//   widen_out(p, b)      exact                                        exact

// Integer accumulator -> fp32, round toward zero.
QC_FORMULA_FN float to_f32_rz(int32_t acc) {
#if defined(__CUDA_ARCH__)
  return __int2float_rz(acc);
#else
  return i64_to_f32_rz(acc);
#endif
}
QC_FORMULA_FN float to_f32_rz(int64_t acc) {
#if defined(__CUDA_ARCH__)
  return __ll2float_rz(acc);
#else
  return i64_to_f32_rz(acc);
#endif
}

// Integer accumulator straight to bf16 or fp16 (one RNE rounding; fp16: at or above 65520, the
// midpoint above the largest finite 65504, gives inf), as an exact float value.
template <typename Acc>
QC_FORMULA_FN float to_narrow_rn(Precision p, Acc acc) {
#if defined(__CUDA_ARCH__)
  if (p == Precision::bf16) return __bfloat162float(__ll2bfloat16_rn(static_cast<long long>(acc)));
  return __half2float(__ll2half_rn(static_cast<long long>(acc)));
#else
  const int64_t v = static_cast<int64_t>(acc);
  if (p == Precision::bf16) return bf16_to_f32(static_cast<uint16_t>(encode_int<kBf16>(v, Rounding::nearest_even, false)));
  return f16_to_f32(static_cast<uint16_t>(encode_int<kFp16>(v, Rounding::nearest_even, false)));
#endif
}

// fp32 -> fp16 bit pattern, round to nearest even.
QC_FORMULA_FN uint16_t f16_rn(float x) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(x));
#else
  return f32_to_f16(x);
#endif
}
QC_FORMULA_FN float f16_value(uint16_t b) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(b));
#else
  return f16_to_f32(b);
#endif
}

// An fp32 value rounded (RNE) to precision `p` and widened back (exact).
QC_FORMULA_FN float round_to(Precision p, float x) {
  if (p == Precision::bf16) return bf16_value(bf16_rn(x));
  if (p == Precision::f16) return f16_value(f16_rn(x));
  return x;
}

// The output rounding: fp32 -> bf16 or fp16 bit pattern, RNE or RZ.
QC_FORMULA_FN uint16_t out_round(Precision p, OutRounding r, float x) {
  if (p == Precision::f16) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(r == OutRounding::rz ? __float2half_rz(x) : __float2half_rn(x));
#else
    return r == OutRounding::rz ? f32_to_f16_rz(x) : f16_rn(x);
#endif
  }
  if (r == OutRounding::rn) return bf16_rn(x);
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rz(x));
#else
  return f32_to_bf16_rz(x);
#endif
}
// An output bit pattern widened back to fp32 (exact).
QC_FORMULA_FN float widen_out(Precision p, uint16_t b) { return p == Precision::f16 ? f16_value(b) : bf16_value(b); }

// The accumulator converted as `c` says (`exact` is not a conversion: host-only, `exact_bf16`). An
// fp32 accumulator (an FP8 GEMM's `d`) is kept or rounded once to bf16 / fp16.
template <typename Acc>
QC_FORMULA_FN float convert_acc(AccConversion c, Acc acc) {
  if constexpr (std::is_floating_point<Acc>::value) {
    if (c == AccConversion::bf16_rn) return round_to(Precision::bf16, acc);
    if (c == AccConversion::f16_rn) return round_to(Precision::f16, acc);
    return acc;
  } else {
    if (c == AccConversion::f32_rz) return to_f32_rz(acc);
    if (c == AccConversion::bf16_rn) return to_narrow_rn(Precision::bf16, acc);
    if (c == AccConversion::f16_rn) return to_narrow_rn(Precision::f16, acc);
    if (c == AccConversion::bf16_via_f32) return round_to(Precision::bf16, to_f32_rn(acc));
    if (c == AccConversion::f16_via_f32) return round_to(Precision::f16, to_f32_rn(acc));
    return to_f32_rn(acc);
  }
}

// ---- Shape dispatch ---------------------------------------------------------------------------

// SGLang's Hopper dispatch swaps A and B for small M (production-epilogues.md): the swapped kernel
// multiplies by the (former) activation scale first, i.e. the Triton order. `m_rows`, `n_cols`
// are the whole GEMM's.
QC_FORMULA_FN constexpr bool sglang_sm90_swaps(int64_t m_rows, int64_t n_cols) {
  return m_rows <= 16 || (m_rows <= 64 && n_cols > 1280);
}

// PyTorch's sm90 rowwise FP8 dispatch (aten/src/ATen/native/cuda/RowwiseScaledMM.cu,
// `dispatch_fp8_rowwise_kernel_on_cluster_size_and_transpose`), for an m_rows x n_cols output: M and N
// rounded up to 64, then a cluster shape, whether the problem runs transposed (Dᵀ = W·Xᵀ: the
// epilogue tree then multiplies by sw first, sa second) and the scheduler's swizzle. The orientation
// is the one part the numerics depend on; the CUTLASS arms (src/arms/cutlass/) launch the rest.
// PyTorch computes `M * N` in `int`; here it is int64 (equal for every shape that does not overflow).
struct TorchRowwiseChoice {
  bool transposed;
  int cluster_m, cluster_n;
  int swizzle;
};
QC_FORMULA_FN constexpr TorchRowwiseChoice torch_rowwise_choice(int64_t m_rows, int64_t n_cols) {
  const int64_t M = (m_rows + 63) / 64 * 64, N = (n_cols + 63) / 64 * 64;
  if (M == 64 && N >= 3072) return {false, 1, 2, 1};
  if (N == 64 && M >= 3072) return {true, 1, 2, 1};
  if (M == 192 && N >= 4096) return {true, 1, 2, 1};
  if (N == 192 && M >= 4096) return {false, 1, 2, 1};
  if (M * N <= int64_t{4096} * 4096) {
    if (M % 256 > 0 && N % 256 == 0) return {true, 2, 1, 1};
    if (N % 256 > 0 && M % 256 == 0) return {false, 2, 1, 1};
  }
  if (M % 256 > 0 && N % 256 > 0) return {(M <= N) != (M * N <= int64_t{1024} * 1024), 2, 1, 1};
  if (M >= 4096 && N >= 4096) return {M < N, 2, 1, 8};
  if ((M <= N) != (M >= 2048 && N >= 2048)) return {true, 1, 2, 1};
  return {true, 2, 1, 1};
}
QC_FORMULA_FN constexpr bool torch_rowwise_transposes(int64_t m_rows, int64_t n_cols) {
  return torch_rowwise_choice(m_rows, n_cols).transposed;
}

// Whether a shape-dispatching kind computes its second point (a row's `swap_point`) on an m_rows x
// n_cols GEMM: `sglang_sm90` under swap-AB, `torch_rowwise` transposed; false for every other kind.
QC_FORMULA_FN constexpr bool dispatch_swaps(EpilogueKind kind, int64_t m_rows, int64_t n_cols) {
  if (kind == EpilogueKind::torch_rowwise) return torch_rowwise_transposes(m_rows, n_cols);
  return kind == EpilogueKind::sglang_sm90 && sglang_sm90_swaps(m_rows, n_cols);
}

// The kind whose body `apply` runs for `kind` on an m_rows x n_cols GEMM: itself, except the
// shape-dispatching kinds: `sglang_sm90` resolves to the CUTLASS or (under swap-AB) the Triton order,
// `torch_rowwise` to its X-first or (transposed) W-first tree.
QC_FORMULA_FN constexpr EpilogueKind instance_kind(EpilogueKind kind, int64_t m_rows, int64_t n_cols) {
  if (kind == EpilogueKind::torch_rowwise) {
    return torch_rowwise_transposes(m_rows, n_cols) ? EpilogueKind::torch_rowwise_wx : EpilogueKind::torch_rowwise_xw;
  }
  if (kind != EpilogueKind::sglang_sm90) return kind;
  return sglang_sm90_swaps(m_rows, n_cols) ? EpilogueKind::vllm_triton : EpilogueKind::vllm_cutlass;
}

// True for the kinds qconform's own CUDA kernels have an instance of (`visit_kernel_instance`).
QC_FORMULA_FN constexpr bool has_kernel_instance(EpilogueKind kind) {
  return kind == EpilogueKind::vllm_cutlass || kind == EpilogueKind::vllm_triton ||
         kind == EpilogueKind::sglang_sm89;
}
// True for the kinds `apply` has a body for (what `instance_kind` can return, except `exact` and
// `point`): the kernel instances and PyTorch's two rowwise trees (host only: the CUTLASS arm runs the
// real ones).
QC_FORMULA_FN constexpr bool has_body(EpilogueKind kind) {
  return has_kernel_instance(kind) || kind == EpilogueKind::torch_rowwise_xw || kind == EpilogueKind::torch_rowwise_wx;
}

// The name kernel identities print for an instance kind ("vllm-cutlass", ...).
constexpr const char* kind_name(EpilogueKind kind) {
  switch (kind) {
    case EpilogueKind::vllm_cutlass: return "vllm-cutlass";
    case EpilogueKind::vllm_triton: return "vllm-triton";
    case EpilogueKind::sglang_sm89: return "sglang-sm89";
    case EpilogueKind::sglang_sm90: return "sglang-sm90";
    case EpilogueKind::exact: return "exact";
    case EpilogueKind::point: return "point";
    case EpilogueKind::torch_rowwise: return "torch-rowwise";
    case EpilogueKind::torch_rowwise_xw: return "torch-rowwise-xw";
    case EpilogueKind::torch_rowwise_wx: return "torch-rowwise-wx";
  }
  return "?";
}
// The order of the two scale products of an instance kind, as kernel identities print it.
constexpr const char* scale_order(EpilogueKind kind) {
  switch (kind) {
    case EpilogueKind::vllm_cutlass: return "sw first, then sa";
    case EpilogueKind::vllm_triton: return "sa first, then sw";
    case EpilogueKind::sglang_sm89: return "sw * sa first";
    case EpilogueKind::sglang_sm90: return "sw first, then sa; sa first under swap-AB";
    case EpilogueKind::exact: return "exact product";
    case EpilogueKind::point: return "as the formula-space point says";
    case EpilogueKind::torch_rowwise: return "sa first, then sw; sw first when PyTorch transposes; then + 0";
    case EpilogueKind::torch_rowwise_xw: return "sa first, then sw, then + 0";
    case EpilogueKind::torch_rowwise_wx: return "sw first, then sa, then + 0";
  }
  return "?";
}
constexpr const char* bias_mode_name(BiasMode mode) {
  switch (mode) {
    case BiasMode::fma: return "fma";
    case BiasMode::muladd: return "muladd";
    case BiasMode::after_bf16: return "after_bf16";
    case BiasMode::exact: return "exact";
    case BiasMode::refuse: return "refuse";
  }
  return "?";
}

// ---- The formulas -----------------------------------------------------------------------------

// One output element: the bf16 bit pattern of formula `K` (a kind with a body) on accumulator
// `acc` (int32, int64, or the fp32 result of an FP8 GEMM), activation scale `sa`, weight scale
// `sw`, and, when `has_bias`, the bias `bias` (a bf16 widened to fp32, exact). `bias_mode` matters
// only for `vllm_cutlass` (fma or muladd); the caller has refused a bias where the formula refuses
// one (a `refuse` mode reaching here computes muladd). `F` is `float`; tests instantiate it with a
// symbolic type to read the formula back (unqualified primitive calls find theirs by ADL).
template <EpilogueKind K, typename Acc, typename F>
QC_FORMULA_FN auto apply(Acc acc, F sa, F sw, BiasMode bias_mode, bool has_bias, F bias) {
  static_assert(has_body(K), "apply: no body for this kind (resolve sglang_sm90 with instance_kind; exact is host-only)");
  const F x = to_f32_rn(acc);
  if constexpr (K == EpilogueKind::vllm_cutlass) {
    // vLLM CUTLASS ScaledEpilogue: weight scale first, then activation scale; a bias through
    // CUTLASS `multiply_add`, contracted (fma) or not (muladd).
    const F t = mul_rn(x, sw);
    if (has_bias && bias_mode == BiasMode::fma) return bf16_rn(fma_rn(sa, t, bias));
    const F y = mul_rn(sa, t);
    return bf16_rn(has_bias ? add_rn(y, bias) : y);
  } else if constexpr (K == EpilogueKind::vllm_triton) {
    // vLLM triton_scaled_mm: activation scale first; a bias is added after the bf16 rounding.
    const F y = mul_rn(mul_rn(x, sa), sw);
    if (!has_bias) return bf16_rn(y);
    return bf16_rn(add_rn(bf16_value(bf16_rn(y)), bias));
  } else if constexpr (K == EpilogueKind::sglang_sm89) {
    // SGLang SM80/86/89 epilogue visitor: the two scales multiplied together first; a bias is an
    // fp32 add before the one conversion.
    const F y = mul_rn(x, mul_rn(sw, sa));
    return bf16_rn(has_bias ? add_rn(y, bias) : y);
  } else {
    // PyTorch's rowwise tree: Multiply(WScale, Multiply(XScale, Accum)), then Add(Bias, .) with a
    // bias of 0 when none is given (the FP8 arms take none), then the bf16 cast. Transposed, the
    // "X" scale is sw and the "W" scale sa.
    const F y = K == EpilogueKind::torch_rowwise_xw ? mul_rn(mul_rn(x, sa), sw) : mul_rn(sa, mul_rn(x, sw));
    return bf16_rn(add_rn(y, has_bias ? bias : zero_of(y)));
  }
}

// One output element of the formula-space point `p` (precondition: `p.conv != exact`, which is
// host-only integer arithmetic; a bias given to a point with `BiasPlacement::none` is the caller's
// to refuse, here it is ignored). The steps, in the order the point's notation prints them
// (docs/identify.md):
//   1. the accumulator converted (`p.conv`); each scale cast (`p.sa`, `p.sw`);
//   2. the first product of `p.grouping`, rounded to fp32 and then to `p.first`;
//   3. the second product, rounded to fp32 and then to `p.second`, or fused with the bias add
//      (`p.fma`, bias before the output) into one FMA;
//   4. the bias: an fp32 add before the output rounding, or after it (the output rounded, widened,
//      the bias added in fp32, rounded again);
//   5. the output rounding `p.rounding` to `p.out`.
// `Acc`, `F` are the accumulator (an integer, or the fp32 `d` of an FP8 GEMM for a point whose
// `input` is `fp32`) and `float`; the formula-space printer and the class
// computation instantiate them with symbolic types (src/epilogue/formula_space.cpp), so the
// notation of a point and its equivalence class are read from this very text.
template <typename Acc, typename F>
QC_FORMULA_FN auto apply_point(const FormulaPoint& p, Acc acc, F sa_in, F sw_in, bool has_bias, F bias) {
  const F x = convert_acc(p.conv, acc);
  const F sa = round_to(p.sa, sa_in);
  const F sw = round_to(p.sw, sw_in);
  // The two operands of the last multiply, in the order the notation prints them.
  F l = x, r = x;
  if (p.grouping == ScaleGrouping::acc_sa_sw) {
    l = round_to(p.first, mul_rn(x, sa));
    r = sw;
  } else if (p.grouping == ScaleGrouping::acc_sw_sa) {
    l = sa;
    r = round_to(p.first, mul_rn(x, sw));
  } else {
    l = x;
    r = round_to(p.first, mul_rn(sw, sa));
  }
  const bool add_before = has_bias && p.bias == BiasPlacement::before_output;
  if (add_before && p.fma) return out_round(p.out, p.rounding, fma_rn(l, r, bias));
  const F y = round_to(p.second, mul_rn(l, r));
  if (add_before) return out_round(p.out, p.rounding, add_rn(y, bias));
  if (has_bias && p.bias == BiasPlacement::after_output) {
    return out_round(p.out, p.rounding, add_rn(widen_out(p.out, out_round(p.out, p.rounding, y)), bias));
  }
  return out_round(p.out, p.rounding, y);
}

// Calls `fn(std::integral_constant<EpilogueKind, K>{})` with the instance kind `kind` as a
// compile-time constant, so that a caller instantiates one loop or kernel per formula body: every
// CUDA launcher dispatches through here. Precondition: `has_kernel_instance(kind)` (callers check
// and report; anything else falls to the CUTLASS body).
template <typename Fn>
inline decltype(auto) visit_kernel_instance(EpilogueKind kind, Fn&& fn) {
  switch (kind) {
    case EpilogueKind::vllm_triton: return fn(std::integral_constant<EpilogueKind, EpilogueKind::vllm_triton>{});
    case EpilogueKind::sglang_sm89: return fn(std::integral_constant<EpilogueKind, EpilogueKind::sglang_sm89>{});
    default: return fn(std::integral_constant<EpilogueKind, EpilogueKind::vllm_cutlass>{});
  }
}
// The same over every body (`has_body`): the CPU tile loop and the per-element `Epilogue::apply`.
template <typename Fn>
inline decltype(auto) visit_instance(EpilogueKind kind, Fn&& fn) {
  switch (kind) {
    case EpilogueKind::torch_rowwise_xw: return fn(std::integral_constant<EpilogueKind, EpilogueKind::torch_rowwise_xw>{});
    case EpilogueKind::torch_rowwise_wx: return fn(std::integral_constant<EpilogueKind, EpilogueKind::torch_rowwise_wx>{});
    default: return visit_kernel_instance(kind, static_cast<Fn&&>(fn));
  }
}

}  // namespace formula

// ---- The power-of-two argument (C5) -----------------------------------------------------------

// The power-of-two argument's jurisdiction for one output `acc·sa·sw`, decided from exact values
// (never from an arm's output): every intermediate product (`acc·sa`, `acc·sw`, `sa·sw`,
// `acc·sa·sw`) is a normal finite fp32 number and the result stays below bf16's overflow
// threshold (2 − 2^-8)·2^127; for acc = 0 only `sa·sw` matters. Scaling by 2^e commutes with
// rounding inside it; outside (subnormal, overflow) the argument makes no claim. The products are
// fp64 operations, each rounded once on the host and the device alike (verify's element pass runs
// it on both).
QC_FORMULA_FN bool pow2_in_jurisdiction(int64_t acc, float sa, float sw) {
  constexpr double kMinNormal = min_normal<kFp32>(), kMaxFinite = max_finite<kFp32>(), kBf16Overflow = 0x1.ff8p127;
  const double s = static_cast<double>(sa) * static_cast<double>(sw);
  if (!(s >= kMinNormal && s <= kMaxFinite)) return false;
  if (acc == 0) return true;
  const double a = acc < 0 ? -static_cast<double>(acc) : static_cast<double>(acc);
  const double p[3] = {a * sa, a * sw, a * s};
  for (const double x : p) {
    if (!(x >= kMinNormal && x <= kMaxFinite)) return false;
  }
  return p[2] < kBf16Overflow;
}

}  // namespace qc
