// Activation and weight quantizers of src/epilogue/quantize.hpp. Compiled with
// `-ffp-contract=off`: each `*` and `/` below is one IEEE fp32 rounding.
#include "epilogue/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

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

ActQuantizer act_quantizer(std::string_view name) {
  if (name == "vllm") return ActQuantizer::vllm;
  if (name == "reciprocal") return ActQuantizer::reciprocal;
  if (name == "sglang") return ActQuantizer::sglang;
  if (name == "static") return ActQuantizer::static_;
  QC_FAIL_INPUT("unknown activation quantizer `{}`: expected one of vllm, sglang, reciprocal, static", name);
}

std::string_view act_quantizer_name(ActQuantizer q) {
  switch (q) {
    case ActQuantizer::vllm: return "vllm";
    case ActQuantizer::sglang: return "sglang";
    case ActQuantizer::reciprocal: return "reciprocal";
    case ActQuantizer::static_: return "static";
  }
  return "?";
}

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
