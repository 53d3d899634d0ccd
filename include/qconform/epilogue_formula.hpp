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
//   bf16_rn(x)       qc::f32_to_bf16(x) (numerics.hpp)          __float2bfloat16_rn(x)
//   bf16_value(b)    qc::bf16_to_f32(b) (exact widening)        __uint_as_float(b << 16)
//
// The host's `*` and `+` round once only because the project compiles with -ffp-contract=off
// (CMakeLists.txt, `qconform_flags`); `tests/unit/test_epilogue.cpp` (`EpilogueFormulaText.*`)
// checks that, evaluates this very `apply` symbolically against the formulas of
// production-epilogues.md, and checks that every row of the formula table dispatches to it. The
// GPU tests (`tests/gpu/test_cuda_arms.cpp`) check that the device compilation equals the host one
// bit for bit. NaN inputs are outside this contract (the tile entry points reject non-finite
// scales and biases): the host keeps a NaN's payload, the device may return a canonical NaN.
//
// Under nvcc this header includes nothing of the project (no fmt, no JSON), only <cuda_bf16.h>;
// in host compilations it takes `f32_to_bf16` from numerics.hpp, the host's one fp32 -> bf16.
// CUDA compiles it as C++17: keep it free of C++20.
//
// Adding a formula: a kind below (with its `kind_name` and `scale_order`), its body in `apply`, its
// case in `visit_instance`, and its row in the table of `src/epilogue/epilogue.cpp`: two places
// (docs/architecture.md, "Adding a formula").
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#define QC_FORMULA_FN __host__ __device__ __forceinline__
#else
#include <cmath>

#include "qconform/numerics.hpp"
#define QC_FORMULA_FN inline
#endif

namespace qc {

// Which formula body an epilogue evaluates. `sglang_sm90` has no body of its own: it is the
// CUTLASS tree with the Triton order under swap-AB (`instance_kind`); `exact` is the correctly
// rounded result in integer arithmetic, host-only (`qc::exact_bf16` in epilogue.hpp).
enum class EpilogueKind { vllm_cutlass, vllm_triton, sglang_sm89, sglang_sm90, exact };

// How the formula adds a bias (stored as bf16, one per output column n).
enum class BiasMode {
  fma,         // `bf16(fma(sa, t, f32(bias)))`: CUTLASS `multiply_add` contracted into one FMA
  muladd,      // `bf16(rn32(rn32(product) + f32(bias)))`: product rounded to fp32, then an fp32 add
  after_bf16,  // `bf16(rn32(f32(bf16(product)) + f32(bias)))`: bias added after a bf16 rounding
  exact,       // the bias joins the exact real sum that is rounded once
  refuse,      // ambiguous for this name: `apply` with a bias throws QC_INPUT (pick a suffixed name)
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
#if defined(__CUDACC__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));  // host-callable too (nvcc's host pass)
#else
  return f32_to_bf16(x);
#endif
}

// bf16 bit pattern -> fp32, exact (bf16 is the top half of an fp32).
QC_FORMULA_FN float bf16_value(uint16_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(uint32_t{b} << 16);
#elif defined(__CUDACC__)
  const uint32_t u = uint32_t{b} << 16;  // nvcc's host pass (the kernels never call it there)
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#else
  return bf16_to_f32(b);
#endif
}

// ---- Shape dispatch ---------------------------------------------------------------------------

// SGLang's Hopper dispatch swaps A and B for small M (production-epilogues.md): the swapped kernel
// multiplies by the (former) activation scale first, i.e. the Triton order. `m_rows`, `n_cols`
// are the whole GEMM's.
QC_FORMULA_FN constexpr bool sglang_sm90_swaps(int64_t m_rows, int64_t n_cols) {
  return m_rows <= 16 || (m_rows <= 64 && n_cols > 1280);
}

// The kind whose body `apply` runs for `kind` on an m_rows x n_cols GEMM: itself, except
// `sglang_sm90`, which resolves to the CUTLASS or (under swap-AB) the Triton order.
QC_FORMULA_FN constexpr EpilogueKind instance_kind(EpilogueKind kind, int64_t m_rows, int64_t n_cols) {
  if (kind != EpilogueKind::sglang_sm90) return kind;
  return sglang_sm90_swaps(m_rows, n_cols) ? EpilogueKind::vllm_triton : EpilogueKind::vllm_cutlass;
}

// True for the kinds `apply` has a body for (what `instance_kind` can return, except `exact`).
QC_FORMULA_FN constexpr bool has_body(EpilogueKind kind) {
  return kind == EpilogueKind::vllm_cutlass || kind == EpilogueKind::vllm_triton ||
         kind == EpilogueKind::sglang_sm89;
}

// The name kernel identities print for an instance kind ("vllm-cutlass", ...).
constexpr const char* kind_name(EpilogueKind kind) {
  switch (kind) {
    case EpilogueKind::vllm_cutlass: return "vllm-cutlass";
    case EpilogueKind::vllm_triton: return "vllm-triton";
    case EpilogueKind::sglang_sm89: return "sglang-sm89";
    case EpilogueKind::sglang_sm90: return "sglang-sm90";
    case EpilogueKind::exact: return "exact";
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
  } else {
    // SGLang SM80/86/89 epilogue visitor: the two scales multiplied together first; a bias is an
    // fp32 add before the one conversion.
    const F y = mul_rn(x, mul_rn(sw, sa));
    return bf16_rn(has_bias ? add_rn(y, bias) : y);
  }
}

// Calls `fn(std::integral_constant<EpilogueKind, K>{})` with the instance kind `kind` as a
// compile-time constant, so that a caller instantiates one loop or kernel per formula body: the
// CPU tile loop and every CUDA launcher dispatch through here. Precondition: `has_body(kind)`
// (callers check and report; anything else falls to the CUTLASS body).
template <typename Fn>
inline decltype(auto) visit_instance(EpilogueKind kind, Fn&& fn) {
  switch (kind) {
    case EpilogueKind::vllm_triton: return fn(std::integral_constant<EpilogueKind, EpilogueKind::vllm_triton>{});
    case EpilogueKind::sglang_sm89: return fn(std::integral_constant<EpilogueKind, EpilogueKind::sglang_sm89>{});
    default: return fn(std::integral_constant<EpilogueKind, EpilogueKind::vllm_cutlass>{});
  }
}

}  // namespace formula
}  // namespace qc
