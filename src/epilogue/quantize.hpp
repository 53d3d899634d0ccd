// Quantizers: per-token dynamic symmetric int8 activation quantization as each engine computes
// it, and the per-output-channel weight quantizer of compressed-tensors ("int-quantized").
//
// Formulas from `../shared/reference/production-epilogues.md`, except `sglang`, which follows
// SGLang's source where the two disagree (below); every fp32 operation rounds once
// (`-ffp-contract=off`), and `sat_s8` has the semantics of PTX `cvt.rni.sat.s8.f32`: round to
// nearest, ties to even, saturate to [-128, 127], NaN -> 0. See docs/epilogues.md.
#pragma once

#include <cstdint>
#include <string_view>

namespace qc {

enum class ActQuantizer {
  vllm,        // scale = absmax/127; inv = absmax == 0 ? 0 : 127/absmax; q = sat_s8(rne(x*inv))
  sglang,      // a = max(absmax, 1e-10); scale = a/127; q = sat_s8(round_half_away(x*(127/a)))
  reciprocal,  // scale = absmax/127; inv = 1/scale (no zero guard); q = sat_s8(rne(x*inv))
  static_,     // q = sat_s8(rne(x/scale)) with a given per-tensor scale (true division)
};
// `sglang` follows SGLang's source (python/sglang/srt/layers/quantization/int8_kernel.py,
// `_per_token_quant_int8`, which `W8A8Int8LinearMethod.apply` calls on CUDA): the multiplier is
// 127/absmax as in vLLM, the absmax is floored at 1e-10, and `libdevice.round` rounds halves away
// from zero. Not modelled: Triton 3.6 lowers that kernel's fp32 `/` to `div.full.f32` (within
// 2 ulp, not always correctly rounded); we divide with IEEE rounding, so where the GPU's quotient
// is off by an ulp, SGLang's scale or multiplier is too. `reciprocal` is the formula the reference
// notes gave for SGLang (`1/(absmax/127)`, half to even); it disagrees with the source and is kept
// as a named control for upstream quantization differences. docs/epilogues.md says more.

// "vllm", "sglang", "reciprocal", "static"; QC_INPUT error listing the valid names otherwise.
ActQuantizer act_quantizer(std::string_view name);
std::string_view act_quantizer_name(ActQuantizer q);

// cvt.rni.sat.s8.f32: round half to even, saturate to [-128, 127], NaN -> 0.
int8_t sat_s8_rne(float x);

// Round half away from zero, saturate to [-128, 127], NaN -> 0 (SGLang's `libdevice.round`).
int8_t sat_s8_round_half_away(float x);

// One row of K values: writes q[0..K) and returns the row's scale (for `static_`, returns
// `static_scale`). An all-zero row: `vllm` gives scale 0 and codes 0 (its guard); `sglang` gives
// scale 1e-10/127 and codes 0 (its floor); `reciprocal` gives scale 0, inv = 1/0 = inf,
// x*inv = 0*inf = NaN, and cvt maps NaN to code 0, so also all zeros.
// A row containing inf or NaN is quantized as the formula says (absmax inf -> scale inf, inv 0
// or 0*... ), no error: callers that need finite input validate first.
float quantize_activation_row(ActQuantizer kind, const float* x, int64_t K, int8_t* q, float static_scale = 0.0f);

// Rows of an [M, K] row-major fp32 (or bf16 bit patterns, converted exactly) activation tile.
// `scales[m]` receives the per-token scale. For `static_`, `static_scale` must point to one
// finite, positive fp32 per-tensor scale (QC_INPUT otherwise); it is ignored by the others.
void quantize_activations(ActQuantizer kind, const float* x, int64_t M, int64_t K, int8_t* q, float* scales,
                          const float* static_scale = nullptr);
void quantize_activations_bf16(ActQuantizer kind, const uint16_t* x_bf16, int64_t M, int64_t K, int8_t* q,
                               float* scales, const float* static_scale = nullptr);

// compressed-tensors per-channel symmetric weight quantization, `w [N, K]` row-major:
// `scale[n] = absmax_n / 127.5`, `q = sat_s8(round_half_even(w / scale))`.
enum class WeightScaleDtype {
  f32,   // everything in fp32: scale = rn32(absmax/127.5), q = sat(rne(rn32(w/scale)))
  bf16,  // the model-dtype path of a bf16 model: w is bf16 (inputs are rounded to bf16 first),
         // scale = bf16(rn32(absmax/127.5)), q = sat(rne(bf16(rn32(w/scale)))): torch computes the
         // bf16 division in fp32 and rounds the quotient to bf16 before torch.round.
};
// `scales[n]` receives the fp32 value of the scale (for `bf16`, the exact upcast of the stored
// bf16 scale, as vLLM loads it). A zero row's scale is replaced by the dtype's machine epsilon
// (2^-23 for fp32, 2^-7 for bf16), as compressed-tensors' `calculate_qparams` does; its codes are 0.
// QC_INPUT error on a non-finite weight (names the coordinate).
void quantize_weights_per_channel(const float* w, int64_t N, int64_t K, int8_t* q, float* scales,
                                  WeightScaleDtype dtype = WeightScaleDtype::f32);

}  // namespace qc
