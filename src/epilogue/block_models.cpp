// Block-scaled FP8 accumulation models (block_models.hpp): the table, formulas, validation, the scalar
// reference and the fast path. The arithmetic is src/epilogue/fp8_block_model.hpp; this file is
// compiled with -ffp-contract=off like every host file that claims bit-exactness.
#include "epilogue/block_models.hpp"

#include <fmt/format.h>

#include "core/parallel.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

struct FormRow {
  BlockPromotion form;
  std::string_view name, formula, kernels;
};

// One row per promotion form: its name, its formula and the kernels it models.
constexpr FormRow kForms[] = {
    {BlockPromotion::triton, "triton", "D <- fma(rn32(C*sa), sb, D)",
     "SGLang/vLLM Triton w8a8_block_fp8_matmul (accumulator += tl.dot(a, b) * a_s * b_s, contracted; measured bit "
     "for bit on the H200) and CUTLASS SM90 blockwise scaling with several scales of A and of B per tile "
     "(accum += temp * scaleA * scaleB)"},
    {BlockPromotion::triton_nofma, "triton-nofma", "D <- rn32(D + rn32(rn32(C*sa)*sb))",
     "the Triton text without contraction of the last multiply and the add"},
    {BlockPromotion::deepgemm, "deepgemm", "D <- fma(rn32(sa*sb), C, D)",
     "DeepGEMM sm90_fp8_gemm_1d2d (final_accum += (scale_a * scale_b) * accum, nvcc's FFMA) and CUTLASS SM90 "
     "blockwise scaling with one scale of A or of B per tile (the scale product formed first)"},
    {BlockPromotion::deepgemm_nofma, "deepgemm-nofma", "D <- rn32(D + rn32(rn32(sa*sb)*C))",
     "DeepGEMM's text compiled without contraction (nvcc --fmad=false)"},
};

const FormRow& row_of(BlockPromotion f) {
  for (const FormRow& r : kForms) {
    if (r.form == f) return r;
  }
  QC_CHECK(false, "block promotion form {} has no row", static_cast<int>(f));
  return kForms[0];
}

bool same_parameters(const Fp8AccumModel& x, const Fp8AccumModel& y) {
  return x.step_k == y.step_k && x.term_bits == y.term_bits && x.term_rounding == y.term_rounding &&
         x.result_bits == y.result_bits && x.result_rounding == y.result_rounding && x.alignment == y.alignment &&
         x.promote_steps == y.promote_steps && x.promote_bits == y.promote_bits &&
         x.promote_rounding == y.promote_rounding && x.splits == y.splits && x.split_granule == y.split_granule &&
         x.interleave == y.interleave;
}

}  // namespace

std::string_view block_promotion_name(BlockPromotion f) { return row_of(f).name; }
std::string_view block_promotion_formula(BlockPromotion f) { return row_of(f).formula; }

const std::vector<BlockPromotion>& block_promotions() {
  static const std::vector<BlockPromotion> forms = [] {
    std::vector<BlockPromotion> v;
    for (const FormRow& r : kForms) v.push_back(r.form);
    return v;
  }();
  return forms;
}

bool is_block_model_name(std::string_view name) { return name.starts_with("block-"); }

BlockModel fp8_block_model(std::string_view name) {
  QC_INPUT(is_block_model_name(name), "block model `{}`: expected a name block-<form> or block-<form>+<chain>", name);
  const std::string_view rest = name.substr(6);
  const size_t plus = rest.find('+');
  const std::string_view form = rest.substr(0, plus);
  const std::string_view chain = plus == std::string_view::npos ? kDefaultBlockChain : rest.substr(plus + 1);
  for (const FormRow& r : kForms) {
    if (r.name != form) continue;
    BlockModel m;
    m.name = std::string(name);
    m.chain = fp8_accumulation_model(chain);
    m.form = r.form;
    m.description = fmt::format("per K block of the scales, {} from zero over the block, then {}: {}", m.chain.name,
                                r.formula, r.kernels);
    return m;
  }
  std::string forms;
  for (const FormRow& r : kForms) forms += fmt::format("{}{}", forms.empty() ? "" : ", ", r.name);
  QC_FAIL_INPUT("block model `{}`: unknown promotion form `{}`; expected block-<form> or block-<form>+<chain> with a "
                "form of: {}",
                name, form, forms);
}

std::vector<std::string> fp8_block_model_names() {
  std::vector<std::string> names;
  for (const FormRow& r : kForms) names.push_back(fmt::format("block-{}", r.name));
  names.emplace_back("block-<form>+<chain>");
  return names;
}

std::string block_model_formula(const BlockModel& m) {
  return fmt::format("per K block: {} from C = 0; {} from D = +0; y = bf16(D)", accumulation_formula(m.chain.model),
                     block_promotion_formula(m.form));
}

void check_declared_model(std::string_view name) {
  if (is_block_model_name(name)) {
    (void)fp8_block_model(name);
  } else {
    (void)fp8_accumulation_model(name);
  }
}

std::string declared_model_formula(std::string_view name) {
  return is_block_model_name(name) ? block_model_formula(fp8_block_model(name))
                                   : accumulation_formula(fp8_accumulation_model(name).model);
}

Fp8BlockGemm fp8_block_gemm(const std::string& who, const Fp8LayerCodes& codes, const LayerOperands& ops) {
  QC_INPUT(ops.block_scaled(),
           "{}: layer `{}` ({}): expected block-scaled operands (per-token-group or per-block scales), found {}", who,
           ops.name, ops.source, ops.scaling_description());
  Fp8BlockGemm g;
  g.codes = codes.gemm();
  g.a_scale = ops.a_scale;
  g.w_scale = ops.w_scale;
  g.a_scaling = ops.a_scaling;
  g.w_scaling = ops.w_scaling;
  g.block_k = ops.scale_block_k();
  return g;
}

void validate_block_model_for(const BlockModel& m, const Fp8BlockGemm& g, std::string_view who) {
  const Fp8AccumModel& c = m.chain.model;
  QC_INPUT(g.block_k >= 1, "{}: expected a K block of at least one product, found {}", who, g.block_k);
  QC_INPUT(c.step_k == 0 || g.block_k % c.step_k == 0,
           "{}: K blocks of {} products (scales {} x {}): expected a multiple of the chain's instruction step ({} "
           "products, {}): a scale boundary cannot fall inside one step",
           who, g.block_k, g.a_scaling.spec(), g.w_scaling.spec(), c.step_k, m.chain.name);
  QC_INPUT(c.interleave == 0 || g.block_k % (2 * c.step_k) == 0,
           "{}: K blocks of {} products (scales {} x {}): expected a multiple of the chain's pair of interleaved steps "
           "({} products, {}): a scale boundary cannot fall inside one pair",
           who, g.block_k, g.a_scaling.spec(), g.w_scaling.spec(), 2 * c.step_k, m.chain.name);
  const int64_t k = g.codes.s.k;
  const int64_t last = k % g.block_k == 0 ? g.block_k : k % g.block_k;
  for (const int64_t len : {std::min(k, g.block_k), last}) {
    validate_fp8_model_for(c, {g.codes.s.m, g.codes.s.n, len});
  }
  QC_INPUT(static_cast<int64_t>(g.a_scale.size()) == g.a_scaling.scale_count(g.codes.s.m, k) &&
               static_cast<int64_t>(g.w_scale.size()) == g.w_scaling.scale_count(g.codes.s.n, k),
           "{}: expected {} activation and {} weight scales, found {} and {}", who, g.a_scaling.scale_count(g.codes.s.m, k),
           g.w_scaling.scale_count(g.codes.s.n, k), g.a_scale.size(), g.w_scale.size());
}

void fp8_block_reference(const BlockModel& m, const Fp8BlockGemm& g, float* d) {
  validate_block_model_for(m, g, m.name);
  validate_fp8_codes(g.codes);
  const Fp8Gemm& c = g.codes;
  for (int64_t i = 0; i < c.s.m; ++i) {
    for (int64_t j = 0; j < c.s.n; ++j) {
      d[i * c.s.n + j] = block_model::evaluate(m.chain.model, m.form, c.a + i * c.s.k, c.a_format, c.w + j * c.s.k,
                                               c.w_format, c.s.k, g.block_k, g.scales_of(i, j));
    }
  }
}

void fp8_block_evaluate(const BlockModel& m, const Fp8BlockGemm& g, float* d, int threads) {
  validate_block_model_for(m, g, m.name);
  validate_fp8_codes(g.codes);
  const Fp8Gemm& c = g.codes;
  const int64_t M = c.s.m, N = c.s.n, K = c.s.k;
  if (M == 0 || N == 0) return;
  std::fill(d, d + M * N, 0.0f);  // D from +0
  std::vector<uint8_t> a_block, w_block;
  std::vector<float> chain(static_cast<size_t>(M * N));
  int64_t b = 0;
  for (int64_t k0 = 0; k0 < K; k0 += g.block_k, ++b) {
    const int64_t len = std::min(g.block_k, K - k0);
    // 1. The block's columns, contiguous, and the chain's fast evaluation on them (C from zero).
    a_block.resize(static_cast<size_t>(M * len));
    w_block.resize(static_cast<size_t>(N * len));
    for (int64_t i = 0; i < M; ++i) std::copy_n(c.a + i * K + k0, len, a_block.data() + i * len);
    for (int64_t j = 0; j < N; ++j) std::copy_n(c.w + j * K + k0, len, w_block.data() + j * len);
    fp8_model_evaluate(m.chain.model, {a_block.data(), c.a_format, w_block.data(), c.w_format, {M, N, len}},
                       chain.data(), threads);
    // 2. Every output's promotion with the block's scales, by the header's text.
    parallel_for(M, threads, [&](int64_t i) {
      for (int64_t j = 0; j < N; ++j) {
        const block_model::OutputScales s = g.scales_of(i, j);
        float& out = d[i * N + j];
        out = block_model::promote(m.form, chain[static_cast<size_t>(i * N + j)], s.a[b * s.a_step], s.w[b * s.w_step], out);
      }
    });
  }
}

std::optional<std::string> unit_scale_equivalent(const BlockModel& m, int64_t block_k) {
  Fp8AccumModel eq = m.chain.model;
  if (eq.promote_steps != 0 || eq.splits != 1 || eq.step_k <= 0 || block_k % eq.step_k != 0) return std::nullopt;
  eq.promote_steps = static_cast<int32_t>(block_k / eq.step_k);
  eq.promote_bits = 23;
  eq.promote_rounding = AccumRounding::nearest_even;
  std::vector<std::string> candidates;
  for (const NamedAccumModel& r : fp8_accumulation_models()) candidates.push_back(r.name);
  candidates.push_back(fmt::format("blocked-{}", block_k));
  for (const std::string& name : candidates) {
    if (same_parameters(fp8_accumulation_model(name).model, eq)) return name;
  }
  return std::nullopt;
}

}  // namespace qc
