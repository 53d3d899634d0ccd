// Block-scaled FP8 accumulation models (docs/accumulation.md, "Block-scaled FP8"): the named table, the
// printed formulas, validation, the scalar reference and the fast CPU evaluation of every
// `cpu:fp8-block-<model>` arm and of verify's block-scaled reference. The arithmetic is the one text
// src/epilogue/fp8_block_model.hpp (host and device): per K block a chain model of the accumulation
// table (src/accum/fp8_model.hpp) from zero, then a promotion form into an fp32 D.
//
// A block model is named `block-<form>` (its chain `hopper-fp8-chain`, the Hopper wgmma chain the
// kernels run per block) or `block-<form>+<chain>` with any model of `fp8_accumulation_model`, e.g.
// `block-triton+sequential`.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "accum/fp8_model.hpp"
#include "epilogue/fp8_block_model.hpp"
#include "qconform/operands.hpp"

namespace qc {

// "triton", "triton-nofma", "deepgemm", "deepgemm-nofma".
std::string_view block_promotion_name(BlockPromotion f);
// The form in the notation of the formulas: "D <- fma(rn32(C*sa), sb, D)".
std::string_view block_promotion_formula(BlockPromotion f);
// Every form, in table order.
const std::vector<BlockPromotion>& block_promotions();

struct BlockModel {
  std::string name;        // "block-triton", "block-deepgemm+exact"
  NamedAccumModel chain;   // each K block's accumulation, from zero
  BlockPromotion form = BlockPromotion::triton;
  std::string description; // the kernels it models
};

// The chain a block model names by default (the Hopper wgmma chain, k = 32).
inline constexpr std::string_view kDefaultBlockChain = "hopper-fp8-chain";

// A model name of this table (starts with "block-"), as arms declare it in `ArmInfo::accumulation_model`.
bool is_block_model_name(std::string_view name);
// `block-<form>` or `block-<form>+<chain>`; QC_INPUT listing the forms (and the chain's own error) otherwise.
BlockModel fp8_block_model(std::string_view name);
// The rows `qconform arms` lists: block-<form> for every form, then "block-<form>+<chain>".
std::vector<std::string> fp8_block_model_names();
// "per K block: C <- ... (the chain's formula, from C = 0); D <- fma(rn32(C*sa), sb, D) from D = +0; y = bf16(D)".
std::string block_model_formula(const BlockModel& m);
// Any model an FP8 arm can declare (an accumulation model or a block model): QC_INPUT for an unknown
// name (`check_declared_model`), its printed formula (`declared_model_formula`).
void check_declared_model(std::string_view name);
std::string declared_model_formula(std::string_view name);

// The operands of one block-scaled FP8 GEMM: the layer's codes, its scales and their layouts, and the
// K block (every k-blocked operand's; validated by `LayerOperands::validate`).
struct Fp8BlockGemm {
  Fp8Gemm codes;
  std::span<const float> a_scale, w_scale;
  ScaleLayout a_scaling, w_scaling;
  int64_t block_k = 0;
  // Output (i, j)'s scales per K block.
  block_model::OutputScales scales_of(int64_t i, int64_t j) const {
    const int64_t k = codes.s.k;
    return {a_scale.data() + a_scaling.index(i, 0, k), a_scaling.k_blocked() ? 1 : 0,
            w_scale.data() + w_scaling.index(j, 0, k), w_scaling.k_blocked() ? 1 : 0};
  }
};
// A block-scaled layer's GEMM (`codes` from `fp8_layer_codes(.., ops)`, kept alive by the caller);
// QC_INPUT naming `who` and the layer when it is not block-scaled.
Fp8BlockGemm fp8_block_gemm(const std::string& who, const Fp8LayerCodes& codes, const LayerOperands& ops);

// QC_INPUT naming `who` unless the model can take the GEMM: the chain evaluable over every block (its
// own validation, on the full and the last block), and a chain of instruction steps (step_k > 0) whose
// step divides the K block: a scale boundary cannot fall inside one instruction step.
void validate_block_model_for(const BlockModel& m, const Fp8BlockGemm& g, std::string_view who);

// The scalar reference: `block_model::evaluate` (the header text) per output, one thread. d [M,N] fp32.
void fp8_block_reference(const BlockModel& m, const Fp8BlockGemm& g, float* d);
// The fast evaluation, bit-identical to the reference (tests/unit/test_block_models.cpp): per K block the
// chain's fast evaluation (`fp8_model_evaluate`) on the block's columns, gathered contiguous, then the
// promotion of every output by the header's `block_model::promote`. `threads` = 0: every hardware thread.
void fp8_block_evaluate(const BlockModel& m, const Fp8BlockGemm& g, float* d, int threads = 0);

// With every scale 1, each form is D <- rn32(D + C): the chain promoted into fp32 once per K block. The
// unscaled model equal to `m` at unit scales and K blocks of `block_k` (its chain with promote_steps =
// block_k/step_k), by name when the accumulation table has one (`hopper-fp8-promote4` for
// `hopper-fp8-chain` and 128, `blocked-<c>` for `sequential`); nullopt when it names none.
std::optional<std::string> unit_scale_equivalent(const BlockModel& m, int64_t block_k);

}  // namespace qc
