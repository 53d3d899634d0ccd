// Block-scaled FP8 accumulation (DeepSeek-V3 style), the one evaluation text for the host and the
// device: per K block of the layer's scales, a chain model of include/qconform/accumulation.hpp from
// C = 0 over the block's products (`accum_model::evaluate`, called on the block's columns), then a
// named promotion form that scales C by the block's two scales and adds it into an fp32 accumulator D
// (from +0). The output is bf16 = RNE(D), which the callers apply.
//
// Layouts: `a` [M,K] and `w` [N,K] row-major FP8 codes (finite: validated by the callers); one output's
// scales are `OutputScales` (its row's activation scale of each K block, its column's weight scale).
// The table, names, printed formulas, validation, scalar reference and fast path: block_models.hpp.
// Sources of the forms (read through the search tool; docs/accumulation.md, "Block-scaled FP8"):
//   triton    SGLang/vLLM `_w8a8_block_fp8_matmul` (python/sglang/srt/layers/quantization/fp8_kernel.py,
//             vllm/model_executor/layers/quantization/utils/fp8_utils.py): `accumulator += tl.dot(a, b) *
//             a_s[:, None] * b_s[None, :]`, the last multiply and the add contracted; measured bit for bit on
//             the H200 (../shared/reference/block-fp8-and-cutlass.md). CUTLASS's SM90 blockwise mainloop
//             (sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp) computes the same
//             `accum += temp * scaleA * scaleB` (fp8_accumulation.hpp, `scale_core(scaleA, scaleB)`) when a
//             tile holds several scales of A and of B.
//   deepgemm  DeepGEMM sm90_fp8_gemm_1d2d.cuh: `scale = scale_a * scale_b; final_accum += scale * accum`,
//             which nvcc contracts into one FFMA; CUTLASS's blockwise mainloop forms the scale product
//             first (`tCrSFA * tCrSFB`, then `accum += temp * scale`) when a tile holds one scale of A or
//             of B (ScaleMsPerTile == 1 or ScaleNsPerTile == 1).
//   *-nofma   the same texts compiled without contraction (nvcc --fmad=false): the product rounded to
//             fp32, then an fp32 add.
// CUTLASS promotes every `ScalePromotionInterval = ScaleGranularityK / 32` wgmma steps, i.e. once per K
// block of the scales, with its tensor-core accumulator zeroed for the next block: a chain per block.
//
// CUDA compiles this header as C++17: keep it free of C++20 and of fmt.
#pragma once

#include <cstdint>

#include "qconform/accumulation.hpp"
#include "qconform/epilogue_formula.hpp"

namespace qc {

// How a K block's chain result C enters D (rn32 = one fp32 rounding, round to nearest even).
enum class BlockPromotion : uint8_t {
  triton,          // D <- fma(rn32(C*sa), sb, D)
  triton_nofma,    // D <- rn32(D + rn32(rn32(C*sa)*sb))
  deepgemm,        // D <- fma(rn32(sa*sb), C, D)
  deepgemm_nofma,  // D <- rn32(D + rn32(rn32(sa*sb)*C))
};

namespace block_model {

// One promotion, over the formula primitives (host: `*`, `+` under -ffp-contract=off and std::fma;
// device: __fmul_rn, __fadd_rn, __fmaf_rn).
QC_FORMULA_FN float promote(BlockPromotion form, float c, float sa, float sb, float d) {
  switch (form) {
    case BlockPromotion::triton: return formula::fma_rn(formula::mul_rn(c, sa), sb, d);
    case BlockPromotion::triton_nofma: return formula::add_rn(d, formula::mul_rn(formula::mul_rn(c, sa), sb));
    case BlockPromotion::deepgemm: return formula::fma_rn(formula::mul_rn(sa, sb), c, d);
    case BlockPromotion::deepgemm_nofma: return formula::add_rn(d, formula::mul_rn(formula::mul_rn(sa, sb), c));
  }
  return d;
}

// The scales of one output per K block b: `a[b * a_step]` (its row's activation scale) and
// `w[b * w_step]` (its column's weight scale); a step of 0 repeats one scale for every block (a
// per-token or per-channel operand of a block-scaled layer).
struct OutputScales {
  const float* a;
  int64_t a_step;
  const float* w;
  int64_t w_step;
};

// The model's fp32 D for one output: `a`, `w` the K codes of its row and column, K blocks of `block_k`
// products (the last one shorter when block_k does not divide K), `chain` each block's accumulation.
QC_FORMULA_FN float evaluate(const Fp8AccumModel& chain, BlockPromotion form, const uint8_t* a, Fp8Format fa,
                             const uint8_t* w, Fp8Format fw, int64_t k, int64_t block_k, OutputScales s) {
  float d = 0.0f;
  int64_t b = 0;
  for (int64_t k0 = 0; k0 < k; k0 += block_k, ++b) {
    const int64_t len = k - k0 < block_k ? k - k0 : block_k;
    const float c = accum_model::evaluate(chain, a + k0, fa, w + k0, fw, len);
    d = promote(form, c, s.a[b * s.a_step], s.w[b * s.w_step], d);
  }
  return d;
}

}  // namespace block_model
}  // namespace qc
