// Device-side epilogue formulas: the one copy that both the fused tensor-core kernel
// (`sm90_int8_scaled_mm.cu`) and the separate epilogue kernel after cuBLASLt
// (`sm90_int32_scaled_epilogue.cu`) use, so the two GPU paths cannot drift apart.
//
// Each formula restates `../shared/reference/production-epilogues.md` with explicit
// intrinsics: `__fmul_rn`/`__fadd_rn` can never be contracted into an FMA (the build also passes
// `--fmad=false`), `__fmaf_rn` is written only where a formula declares an FMA, and the int32 ->
// fp32 conversion is `__int2float_rn` (round to nearest even, exact while |acc| <= 2^24).
// The host side selects the template instance from the same `qc::Epilogue` object that the CPU
// emulation evaluates (see `cuda_epilogue_select.cpp`).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernel_types.hpp"

namespace qc::cuda_kernels {

__device__ __forceinline__ uint16_t bf16_bits_rn(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(uint32_t{b} << 16); }

// `bias` is the bf16 bias already widened to fp32 (exact); it is ignored when `bias_add` is none.
template <EpilogueFormula F>
__device__ __forceinline__ uint16_t apply_epilogue(int32_t acc, float sa, float sw, BiasAdd bias_add, float bias) {
  const float x = __int2float_rn(acc);
  if constexpr (F == EpilogueFormula::vllm_cutlass) {
    // vLLM CUTLASS ScaledEpilogue: weight scale first, then activation scale.
    const float t = __fmul_rn(x, sw);
    if (bias_add == BiasAdd::fma) return bf16_bits_rn(__fmaf_rn(sa, t, bias));
    const float y = __fmul_rn(sa, t);
    return bf16_bits_rn(bias_add == BiasAdd::muladd ? __fadd_rn(y, bias) : y);
  } else if constexpr (F == EpilogueFormula::vllm_triton) {
    // vLLM triton_scaled_mm: activation scale first; the bias is added after the bf16 rounding.
    const float y = __fmul_rn(__fmul_rn(x, sa), sw);
    if (bias_add == BiasAdd::none) return bf16_bits_rn(y);
    return bf16_bits_rn(__fadd_rn(bf16_bits_to_f32(bf16_bits_rn(y)), bias));
  } else {
    static_assert(F == EpilogueFormula::sglang_sm89);
    // SGLang SM80/86/89 visitor: the two scales multiplied together first; bias in fp32 before
    // the one conversion.
    const float s = __fmul_rn(sw, sa);
    if (bias_add == BiasAdd::fma) return bf16_bits_rn(__fmaf_rn(x, s, bias));
    const float y = __fmul_rn(x, s);
    return bf16_bits_rn(bias_add == BiasAdd::muladd ? __fadd_rn(y, bias) : y);
  }
}

}  // namespace qc::cuda_kernels
