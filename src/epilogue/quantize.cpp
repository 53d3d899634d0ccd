// Activation and weight quantizers of src/epilogue/quantize.hpp. Compiled with
// `-ffp-contract=off`: each `*` and `/` below is one IEEE fp32 rounding.
#include "epilogue/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/name_table.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {
// NaN -> 0; saturate outside (-128.5, 127.5) (±inf included); inside, `round_integral` (SGLang's
// round half away from zero: the core's round_to_int_sat has no such mode).
template <class Round>
int8_t saturate_s8(float x, Round round_integral) {
  if (std::isnan(x)) return 0;
  if (x >= 127.5f) return 127;
  if (x <= -128.5f) return -128;
  return static_cast<int8_t>(std::max(-128.0f, std::min(127.0f, round_integral(x))));
}
}  // namespace

// cvt.rni.sat: the numeric core's `f32_to_s8_rni_sat` (round half to even without the FPU's
// rounding mode; equal to `nearbyint` under the default mode on every fp32).
int8_t sat_s8_rne(float x) { return f32_to_s8_rni_sat(x); }

int8_t sat_s8_round_half_away(float x) {
  return saturate_s8(x, [](float v) { return std::round(v); });  // C `round`, like libdevice.round
}

namespace {
constexpr NameRow<ActQuantizer> kActQuantizerNames[] = {{ActQuantizer::vllm, "vllm"},
                                                        {ActQuantizer::sglang, "sglang"},
                                                        {ActQuantizer::reciprocal, "reciprocal"},
                                                        {ActQuantizer::static_, "static"}};
constexpr NameRow<GroupQuantizer> kGroupQuantizerNames[] = {
    {GroupQuantizer::vllm, "vllm"}, {GroupQuantizer::sglang, "sglang"}, {GroupQuantizer::deepgemm, "deepgemm"}};
}  // namespace

ActQuantizer act_quantizer(std::string_view name) {
  if (const auto q = value_of(kActQuantizerNames, name)) return *q;
  QC_FAIL_INPUT("unknown activation quantizer `{}`: expected one of vllm, sglang, reciprocal, static", name);
}

std::string_view act_quantizer_name(ActQuantizer q) { return name_of(kActQuantizerNames, q); }

float quantize_activation_row(ActQuantizer kind, const float* x, int64_t K, int8_t* q, float static_scale) {
  if (kind == ActQuantizer::static_) {
    for (int64_t k = 0; k < K; ++k) q[k] = sat_s8_rne(x[k] / static_scale);  // true division
    return static_scale;
  }
  float absmax = 0.0f;
  for (int64_t k = 0; k < K; ++k) absmax = std::max(absmax, std::fabs(x[k]));
  if (kind == ActQuantizer::sglang) {
    absmax = std::max(absmax, 1e-10f);  // SGLang's floor: no zero scale
    const float inv = 127.0f / absmax;
    for (int64_t k = 0; k < K; ++k) q[k] = sat_s8_round_half_away(x[k] * inv);
    return absmax / 127.0f;
  }
  const float scale = absmax / 127.0f;
  float inv;
  if (kind == ActQuantizer::vllm) {
    inv = absmax == 0.0f ? 0.0f : 127.0f / absmax;
  } else {
    inv = 1.0f / scale;  // reciprocal: no guard: inf for an all-zero row, and 0*inf = NaN -> code 0
  }
  for (int64_t k = 0; k < K; ++k) q[k] = sat_s8_rne(x[k] * inv);
  return scale;
}

namespace {
void check_static(ActQuantizer kind, const float* static_scale) {
  if (kind != ActQuantizer::static_) return;
  QC_INPUT(static_scale != nullptr, "static activation quantizer: field static_scale: expected a per-tensor scale, found none");
  QC_INPUT(std::isfinite(*static_scale) && *static_scale > 0.0f,
           "static activation quantizer: field static_scale: expected finite > 0, found {}", *static_scale);
}
}  // namespace

void quantize_activations(ActQuantizer kind, const float* x, int64_t M, int64_t K, int8_t* q, float* scales,
                          const float* static_scale) {
  QC_INPUT(M >= 0 && K >= 0, "quantize_activations: expected M, K >= 0, found M={} K={}", M, K);
  check_static(kind, static_scale);
  const float s = kind == ActQuantizer::static_ ? *static_scale : 0.0f;
  for (int64_t m = 0; m < M; ++m) scales[m] = quantize_activation_row(kind, x + m * K, K, q + m * K, s);
}

void quantize_activations_bf16(ActQuantizer kind, const uint16_t* x_bf16, int64_t M, int64_t K, int8_t* q,
                               float* scales, const float* static_scale) {
  QC_INPUT(M >= 0 && K >= 0, "quantize_activations_bf16: expected M, K >= 0, found M={} K={}", M, K);
  check_static(kind, static_scale);
  const float s = kind == ActQuantizer::static_ ? *static_scale : 0.0f;
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) row[static_cast<size_t>(k)] = bf16_to_f32(x_bf16[m * K + k]);  // exact
    scales[m] = quantize_activation_row(kind, row.data(), K, q + m * K, s);
  }
}

namespace {
// compressed-tensors' symmetric weight quantization, one formula for INT8 and FP8 targets:
// `scale = model(absmax / divisor)` (absmax per channel, or over the matrix per tensor), a zero
// scale replaced by the dtype's epsilon, and `emit(i, model(model(w[i]) / scale))` for each weight,
// where `model` rounds to the model dtype (identity for fp32).
template <class Emit>
void quantize_weights_symmetric(const char* who, const float* w, int64_t N, int64_t K, float divisor,
                                WeightScaling scaling, WeightScaleDtype dtype, float* scales, Emit emit) {
  QC_INPUT(N >= 0 && K >= 0, "{}: expected N, K >= 0, found N={} K={}", who, N, K);
  const bool bf16 = dtype == WeightScaleDtype::bf16;
  auto model = [bf16](float v) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; };  // value in the model dtype
  std::vector<float> absmax(static_cast<size_t>(N), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    const float* row = w + n * K;
    for (int64_t k = 0; k < K; ++k) {
      QC_INPUT(std::isfinite(row[k]), "{}: field w[{},{}]: expected finite, found {}", who, n, k, row[k]);
      absmax[static_cast<size_t>(n)] = std::max(absmax[static_cast<size_t>(n)], std::fabs(model(row[k])));
    }
  }
  if (scaling == WeightScaling::per_tensor) {
    const float all = N > 0 ? *std::max_element(absmax.begin(), absmax.end()) : 0.0f;
    std::fill(absmax.begin(), absmax.end(), all);
  }
  for (int64_t n = 0; n < N; ++n) {
    const float* row = w + n * K;
    float scale = model(absmax[static_cast<size_t>(n)] / divisor);
    if (scale == 0.0f) scale = bf16 ? 0x1p-7f : 0x1p-23f;  // compressed-tensors: zero scale -> dtype eps
    scales[n] = scale;
    for (int64_t k = 0; k < K; ++k) emit(n * K + k, model(model(row[k]) / scale));
  }
}
}  // namespace

void quantize_weights_per_channel(const float* w, int64_t N, int64_t K, int8_t* q, float* scales,
                                  WeightScaleDtype dtype) {
  quantize_weights_symmetric("quantize_weights_per_channel", w, N, K, 127.5f, WeightScaling::per_channel, dtype,
                             scales, [q](int64_t i, float v) { q[i] = sat_s8_rne(v); });
}

// ------------------------------------------------------------------------------------------------
// FP8
// ------------------------------------------------------------------------------------------------

namespace {
void check_fp8_target(const char* who, ElementType target) {
  QC_INPUT(target == ElementType::e4m3 || target == ElementType::e5m2,
           "{}: field target: expected an FP8 element type (e4m3 or e5m2), found {}", who, element_type_name(target));
}
}  // namespace

float fp8_max(ElementType target) {
  check_fp8_target("fp8_max", target);
  return target == ElementType::e4m3 ? max_finite<kE4M3>() : max_finite<kE5M2>();
}

float fp8_min_scaling_factor(ElementType target) {
  return 1.0f / (fp8_max(target) * 512.0f);  // the product is exact; the quotient rounds once
}

uint8_t fp8_clamp_rne(ElementType target, float x) {
  const float max = fp8_max(target);
  // 1. Clamp as vLLM does: C `fmin`/`fmax` return the other operand for a NaN, so NaN -> +max.
  const float r = std::fmax(-max, std::fmin(x, max));
  // 2. Round to nearest even. |r| <= max, so nothing overflows and `saturate` never acts.
  return target == ElementType::e4m3 ? f32_to_e4m3fn(r, /*saturate=*/true) : f32_to_e5m2(r, /*saturate=*/true);
}

void quantize_activations_fp8(ElementType target, Fp8ActScaling scaling, const float* x, int64_t M, int64_t K,
                              uint8_t* q, float* scales) {
  QC_INPUT(M >= 0 && K >= 0, "quantize_activations_fp8: expected M, K >= 0, found M={} K={}", M, K);
  const float max = fp8_max(target);
  // `fmax` skips NaN as CUDA's `fmaxf` does, so the absmax of a row is that of its non-NaN values.
  auto absmax_of = [](const float* v, int64_t n) {
    float a = 0.0f;
    for (int64_t i = 0; i < n; ++i) a = std::fmax(a, std::fabs(v[i]));
    return a;
  };
  if (scaling == Fp8ActScaling::per_tensor) {
    float absmax = 0.0f;
    for (int64_t m = 0; m < M; ++m) absmax = std::fmax(absmax, absmax_of(x + m * K, K));
    const float scale = absmax / max;  // no floor: vLLM's per-tensor scale starts at 0
    const float inv = 1.0f / scale;    // an all-zero tile: inf, and 0 * inf = NaN -> +max
    for (int64_t i = 0; i < M * K; ++i) q[i] = fp8_clamp_rne(target, x[i] * inv);
    for (int64_t m = 0; m < M; ++m) scales[m] = scale;
    return;
  }
  const float min_sf = fp8_min_scaling_factor(target);
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * K;
    const float scale = std::fmax(absmax_of(row, K) / max, min_sf);
    for (int64_t k = 0; k < K; ++k) q[m * K + k] = fp8_clamp_rne(target, row[k] / scale);  // true division
    scales[m] = scale;
  }
}

void quantize_weights_fp8(ElementType target, WeightScaling scaling, const float* w, int64_t N, int64_t K, uint8_t* q,
                          float* scales, WeightScaleDtype dtype) {
  const float max = fp8_max(target);
  quantize_weights_symmetric("quantize_weights_fp8", w, N, K, max, scaling, dtype, scales,
                             [q, target](int64_t i, float v) { q[i] = fp8_clamp_rne(target, v); });
}

// ------------------------------------------------------------------------------------------------
// Block-scaled FP8
// ------------------------------------------------------------------------------------------------

float ue8m0_ceil(float s) {
  // 1. The biased exponent, plus one when any fraction bit is set (s is not a power of two already).
  const uint32_t bits = f32_bits(std::fabs(s));
  const uint32_t exp = ((bits >> 23) & 0xFFu) + ((bits & 0x7FFFFFu) != 0 ? 1u : 0u);
  // 2. Clamped to the normal exponents 1..254 (2^-126 .. 2^127), the fraction cleared.
  return f32_from_bits(std::clamp<uint32_t>(exp, 1, 254) << 23);
}

GroupQuantizer group_quantizer(std::string_view name, std::string_view what) {
  if (const auto q = value_of(kGroupQuantizerNames, name)) return *q;
  QC_FAIL_INPUT("{} `{}`: expected a per-token-group FP8 quantizer: {}", what, name, names_or(kGroupQuantizerNames));
}

std::string_view group_quantizer_name(GroupQuantizer q) { return name_of(kGroupQuantizerNames, q); }

std::string group_quantizer_description(GroupQuantizer q, bool ue8m0) {
  switch (q) {
    case GroupQuantizer::vllm:
      return ue8m0 ? "vllm per_token_group_quant_fp8 ue8m0: a=fmax(absmax,1e-10), s=ceil_pow2(fmax(a/448,1e-10)), "
                     "q=rne(clamp(x/s))"
                   : "vllm per_token_group_quant_fp8: a=fmax(absmax,1e-10), s=a/448, q=rne(clamp(x/s))";
    case GroupQuantizer::sglang:
      return ue8m0 ? "sglang per_token_group_quant_8bit ue8m0: a=fmax(absmax,1e-10), s=ceil_pow2(a*(1/448)), "
                     "q=rne(clamp(x*(1/s)))"
                   : "sglang per_token_group_quant_8bit: a=fmax(absmax,1e-10), s=a*(1/448), q=rne(clamp(x*(448/a)))";
    case GroupQuantizer::deepgemm:
      return ue8m0 ? "deepgemm per_token_cast_to_fp8 ue8m0: a=fmax(absmax,1e-4), s=ceil_to_ue8m0(a/448), "
                     "q=rne(x*(1/s))"
                   : "deepgemm per_token_cast_to_fp8: a=fmax(absmax,1e-4), s=a/448, q=rne(x*(1/s))";
  }
  return "?";
}

BlockQuantizer block_quantizer(std::string_view name, std::string_view what) {
  if (name == "deepgemm") return BlockQuantizer::deepgemm;
  if (name == "compressed-tensors") return BlockQuantizer::compressed_tensors;
  QC_FAIL_INPUT("{} `{}`: expected a per-block FP8 weight quantizer: deepgemm or compressed-tensors", what, name);
}

std::string_view block_quantizer_name(BlockQuantizer q) {
  return q == BlockQuantizer::deepgemm ? "deepgemm" : "compressed-tensors";
}

std::string block_quantizer_description(BlockQuantizer q, bool ue8m0) {
  if (q == BlockQuantizer::compressed_tensors) return "compressed-tensors fp8 block: s=absmax/448, q=rne(clamp(w/s))";
  return ue8m0 ? "deepgemm per_block_cast_to_fp8 ue8m0: a=fmax(absmax,1e-4), s=ceil_to_ue8m0(a/448), q=rne(w*(1/s))"
               : "deepgemm per_block_cast_to_fp8: a=fmax(absmax,1e-4), s=a/448, q=rne(w*(1/s))";
}

namespace {
void check_block_target(const char* who, ElementType target) {
  QC_INPUT(target == ElementType::e4m3,
           "{}: field target: expected e4m3 (the block-scaled FP8 quantizers of vLLM, SGLang and DeepGEMM write "
           "float8_e4m3fn), found {}",
           who, element_type_name(target));
}
}  // namespace

void quantize_activations_fp8_groups(ElementType target, GroupQuantizer q, int64_t g, bool ue8m0, const float* x,
                                     int64_t M, int64_t K, uint8_t* codes, float* scales) {
  const char* who = "quantize_activations_fp8_groups";
  QC_INPUT(M >= 0 && K >= 0 && g >= 1, "{}: expected M, K >= 0 and a group size >= 1, found M={} K={} g={}", who, M, K, g);
  check_block_target(who, target);
  const float max = fp8_max(target);
  const int64_t groups = (K + g - 1) / g;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      const float* v = x + m * K + gi * g;
      uint8_t* out = codes + m * K + gi * g;
      const int64_t n = std::min(g, K - gi * g);
      // 1. The group's absmax (`fmax` skips NaN as CUDA's `fmaxf`), floored as each kernel floors it.
      float a = q == GroupQuantizer::deepgemm ? 1e-4f : 1e-10f;
      for (int64_t i = 0; i < n; ++i) a = std::fmax(a, std::fabs(v[i]));
      // 2. The stored scale, and the codes: a quotient (vLLM) or a product with a multiplier.
      float s = 0.0f;
      switch (q) {
        case GroupQuantizer::vllm:
          s = a / max;
          if (ue8m0) s = ue8m0_ceil(std::fmax(s, 1e-10f));  // vLLM floors the scale at 1e-10 before log2f
          for (int64_t i = 0; i < n; ++i) out[i] = fp8_clamp_rne(target, v[i] / s);
          break;
        case GroupQuantizer::sglang: {
          constexpr float kInvMax = 1.0f / 448.0f;  // `MAX_8BIT_INV`, a constexpr fp32 quotient
          s = a * kInvMax;
          float mult = max / a;
          if (ue8m0) {
            s = ue8m0_ceil(s);
            mult = 1.0f / s;  // fast_pow2(-e): exact
          }
          for (int64_t i = 0; i < n; ++i) out[i] = fp8_clamp_rne(target, v[i] * mult);
          break;
        }
        case GroupQuantizer::deepgemm: {
          s = a / 448.0f;
          if (ue8m0) s = ue8m0_ceil(s);
          const float inv = 1.0f / s;
          for (int64_t i = 0; i < n; ++i) out[i] = fp8_clamp_rne(target, v[i] * inv);
          break;
        }
      }
      scales[m * groups + gi] = s;
    }
  }
}

void quantize_weights_fp8_blocks(ElementType target, BlockQuantizer q, int64_t b_n, int64_t b_k, bool ue8m0,
                                 const float* w, int64_t N, int64_t K, uint8_t* codes, float* scales,
                                 WeightScaleDtype dtype) {
  const char* who = "quantize_weights_fp8_blocks";
  QC_INPUT(N >= 0 && K >= 0 && b_n >= 1 && b_k >= 1, "{}: expected N, K >= 0 and blocks of at least 1x1, found N={} K={} "
           "block {}x{}", who, N, K, b_n, b_k);
  check_block_target(who, target);
  QC_INPUT(!(ue8m0 && q == BlockQuantizer::compressed_tensors),
           "{}: --ue8m0 with the compressed-tensors block quantizer: expected fp32 scales (compressed-tensors has no "
           "UE8M0 format; DeepGEMM's per_block_cast_to_fp8 has: use the deepgemm quantizer)",
           who);
  const bool bf16 = dtype == WeightScaleDtype::bf16;
  auto model = [bf16](float v) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; };  // value in the model dtype
  for (int64_t i = 0; i < N * K; ++i) {
    QC_INPUT(std::isfinite(w[i]), "{}: field w[{},{}]: expected finite, found {}", who, i / K, i % K, w[i]);
  }
  const float max = fp8_max(target);
  const int64_t rows = (N + b_n - 1) / b_n, cols = (K + b_k - 1) / b_k;
  for (int64_t br = 0; br < rows; ++br) {
    for (int64_t bc = 0; bc < cols; ++bc) {
      const int64_t n0 = br * b_n, n1 = std::min(N, n0 + b_n), k0 = bc * b_k, k1 = std::min(K, k0 + b_k);
      // 1. The block's absmax over its own elements (DeepGEMM pads with zeros, which change nothing).
      float a = q == BlockQuantizer::deepgemm ? 1e-4f : 0.0f;
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t k = k0; k < k1; ++k) a = std::max(a, std::fabs(model(w[n * K + k])));
      }
      // 2. The scale and the codes.
      float s = 0.0f;
      if (q == BlockQuantizer::deepgemm) {
        s = a / 448.0f;
        if (ue8m0) s = ue8m0_ceil(s);
        const float inv = 1.0f / s;
        for (int64_t n = n0; n < n1; ++n) {
          for (int64_t k = k0; k < k1; ++k) codes[n * K + k] = fp8_clamp_rne(target, model(w[n * K + k]) * inv);
        }
      } else {
        s = model(a / max);
        if (s == 0.0f) s = bf16 ? 0x1p-7f : 0x1p-23f;  // compressed-tensors: zero scale -> dtype eps
        for (int64_t n = n0; n < n1; ++n) {
          for (int64_t k = k0; k < k1; ++k) codes[n * K + k] = fp8_clamp_rne(target, model(model(w[n * K + k]) / s));
        }
      }
      scales[br * cols + bc] = s;
    }
  }
}

}  // namespace qc

namespace qc {

// ------------------------------------------------------------------------------------------------
// The spellings of the FP8 quantization choice (`qconform synth`, `generate`, `replay`, `capture`)
// ------------------------------------------------------------------------------------------------

std::pair<ElementType, ElementType> parse_element_types(std::string_view spec) {
  if (spec == "int8") return {ElementType::int8, ElementType::int8};
  if (spec == "e4m3") return {ElementType::e4m3, ElementType::e4m3};
  if (spec == "e5m2") return {ElementType::e5m2, ElementType::e5m2};
  if (spec == "e5m2-e4m3") return {ElementType::e5m2, ElementType::e4m3};
  if (spec == "e4m3-e5m2") return {ElementType::e4m3, ElementType::e5m2};
  QC_FAIL_INPUT("--element `{}`: expected int8, e4m3, e5m2, e5m2-e4m3 or e4m3-e5m2 (activations-weights)", spec);
}

std::string element_types_spec(ElementType act, ElementType weight) {
  if (act == weight) return std::string(element_type_name(act));
  return std::string(element_type_name(act)) + "-" + std::string(element_type_name(weight));
}

Fp8ActScaling parse_fp8_act_scaling(std::string_view spec) {
  if (spec == "per-token") return Fp8ActScaling::per_token;
  if (spec == "per-tensor") return Fp8ActScaling::per_tensor;
  QC_FAIL_INPUT("--act-scale `{}`: expected per-token or per-tensor", spec);
}

WeightScaling parse_weight_scaling(std::string_view spec) {
  if (spec == "per-channel") return WeightScaling::per_channel;
  if (spec == "per-tensor") return WeightScaling::per_tensor;
  QC_FAIL_INPUT("--weight-scale `{}`: expected per-channel or per-tensor", spec);
}

std::string_view to_string(Fp8ActScaling scaling) {
  return scaling == Fp8ActScaling::per_tensor ? "per-tensor" : "per-token";
}

std::string_view to_string(WeightScaling scaling) {
  return scaling == WeightScaling::per_tensor ? "per-tensor" : "per-channel";
}

std::string Fp8Quantization::act_scale_spec() const {
  return act_blocks ? act_blocks->spec() : std::string(to_string(act_scaling));
}

std::string Fp8Quantization::weight_scale_spec() const {
  return weight_blocks ? weight_blocks->spec() : std::string(to_string(weight_scaling));
}

std::string fp8_act_quantizer_description(Fp8ActScaling scaling) {
  return scaling == Fp8ActScaling::per_tensor
             ? "vllm dynamic per-tensor fp8: scale=absmax/max, q=rne(clamp(x*(1/scale)))"
             : "vllm dynamic per-token fp8: scale=fmax(absmax/max, 1/(max*512)), q=rne(clamp(x/scale))";
}

std::string fp8_weight_quantizer_description(WeightScaling scaling) {
  return std::string("compressed-tensors fp8 ") + std::string(to_string(scaling)) +
         ": scale=absmax/max, q=rne(clamp(w/scale))";
}

}  // namespace qc
