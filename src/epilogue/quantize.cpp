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
// NaN -> 0; saturate outside (-128.5, 127.5) (±inf included); inside, `round_integral`.
template <class Round>
int8_t saturate_s8(float x, Round round_integral) {
  if (std::isnan(x)) return 0;
  if (x >= 127.5f) return 127;
  if (x <= -128.5f) return -128;
  return static_cast<int8_t>(std::max(-128.0f, std::min(127.0f, round_integral(x))));
}
}  // namespace

int8_t sat_s8_rne(float x) {
  // cvt.rni.sat: `nearbyint` under the default round-to-nearest-even mode; `-fno-fast-math` keeps
  // it from being replaced by a truncation.
  return saturate_s8(x, [](float v) { return std::nearbyint(v); });
}

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

void quantize_weights_per_channel(const float* w, int64_t N, int64_t K, int8_t* q, float* scales,
                                  WeightScaleDtype dtype) {
  QC_INPUT(N >= 0 && K >= 0, "quantize_weights_per_channel: expected N, K >= 0, found N={} K={}", N, K);
  const bool bf16 = dtype == WeightScaleDtype::bf16;
  auto model = [bf16](float v) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; };  // value in the model dtype
  for (int64_t n = 0; n < N; ++n) {
    const float* row = w + n * K;
    float absmax = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      QC_INPUT(std::isfinite(row[k]), "quantize_weights_per_channel: field w[{},{}]: expected finite, found {}", n, k,
               row[k]);
      absmax = std::max(absmax, std::fabs(model(row[k])));
    }
    float scale = model(absmax / 127.5f);
    if (scale == 0.0f) scale = bf16 ? 0x1p-7f : 0x1p-23f;  // compressed-tensors: zero scale -> dtype eps
    scales[n] = scale;
    for (int64_t k = 0; k < K; ++k) q[n * K + k] = sat_s8_rne(model(model(row[k]) / scale));
  }
}

}  // namespace qc
