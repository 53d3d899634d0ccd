// Quantizers: per-token dynamic symmetric int8 activation quantization as each engine computes
// it, and the per-output-channel weight quantizer of compressed-tensors ("int-quantized").
//
// Formulas from `../shared/reference/production-epilogues.md`, except `sglang`, which follows
// SGLang's source where the two disagree (below); every fp32 operation rounds once
// (`-ffp-contract=off`), and `sat_s8` has the semantics of PTX `cvt.rni.sat.s8.f32`: round to
// nearest, ties to even, saturate to [-128, 127], NaN -> 0. See docs/epilogues.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "qconform/operands.hpp"

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

// ------------------------------------------------------------------------------------------------
// FP8 (OCP e4m3fn, e5m2): vLLM's dynamic FP8 activation path and compressed-tensors' "float-quantized"
// weights. Sources (read 2026-12-01; docs/epilogues.md quotes them):
//   vLLM csrc/quantization/w8a8/fp8/common.cu(h): `scaled_fp8_conversion` clamps with
//     `fmax(-FP8_MAX, fmin(x, FP8_MAX))` and casts (c10's round to nearest even);
//     `dynamic_per_token_scaled_fp8_quant_kernel` divides (`x / scale`, "to match FBGemm"), with
//     `scale = fmaxf(absmax / FP8_MAX, min_scaling_factor)`, `min_scaling_factor = 1 / (FP8_MAX * 512)`;
//     `dynamic_scaled_fp8_quant` (per tensor) takes `scale = absmax / FP8_MAX` (no floor) and multiplies
//     by `1.0f / scale`.
//   compressed-tensors `calculate_qparams` / `_quantize`: `scale = absmax / (bit_range / 2)` with
//     bit_range = 448 - (-448), i.e. absmax / 448; `q = clamp(w / scale, -448, 448).to(float8_e4m3fn)`.
// ------------------------------------------------------------------------------------------------

// The largest finite value of an FP8 element type (448 for e4m3, 57344 for e5m2); QC_INPUT for int8.
float fp8_max(ElementType target);
// vLLM's floor on a per-token scale: `1.0f / (fp8_max * 512.0f)` in fp32.
float fp8_min_scaling_factor(ElementType target);

// vLLM's conversion: `r = fmax(-max, fmin(x, max))` (C `fmin`/`fmax`: a NaN operand yields the
// other, so NaN -> +max), then round to nearest even (exact for every clamped value: no overflow).
// Equals PTX `cvt.rn.satfinite` on every non-NaN x.
uint8_t fp8_clamp_rne(ElementType target, float x);

enum class Fp8ActScaling {
  per_token,   // dynamic_per_token_scaled_fp8_quant: scale = fmax(absmax/max, min_sf); q = conv(x / scale)
  per_tensor,  // dynamic_scaled_fp8_quant: scale = absmax/max over the tile; q = conv(x * (1 / scale))
};

// Rows of an [M, K] row-major fp32 activation tile to FP8 codes of `target` (e4m3 or e5m2).
// `scales[m]` receives the row's scale; per tensor, every row gets the one tensor scale (operand
// files keep a_scale [M]). An all-zero row per token: scale = min_sf, codes ±0 (sign kept). An
// all-zero tile per tensor: scale 0, 1/0 = inf, 0·inf = NaN, clamp(NaN) = +max: every code is +max
// (0x7E / 0x7B), as vLLM's kernel computes it; such a scale fails `LayerOperands::validate`.
void quantize_activations_fp8(ElementType target, Fp8ActScaling scaling, const float* x, int64_t M, int64_t K,
                              uint8_t* q, float* scales);

enum class WeightScaling { per_channel, per_tensor };

// compressed-tensors "float-quantized" weights, `w [N, K]` row-major: `scale = absmax / fp8_max`
// (absmax per output channel, or over the whole matrix per tensor), `q = rne(clamp(w / scale,
// ±fp8_max))`. `dtype` as for the INT8 weights (bf16: weights, scale and each quotient rounded to
// bf16), and a zero scale becomes the dtype's epsilon the same way. `scales[n]` receives each
// channel's scale; per tensor, the N entries are equal (compressed-tensors stores one `[1]` or `[]`
// `weight_scale`; our operand files keep w_scale [N]). QC_INPUT error on a non-finite weight.
void quantize_weights_fp8(ElementType target, WeightScaling scaling, const float* w, int64_t N, int64_t K, uint8_t* q,
                          float* scales, WeightScaleDtype dtype = WeightScaleDtype::f32);

// ---- The FP8 quantization choice, as `qconform synth` and the model verbs spell it ----
//
// `--element`: "int8", "e4m3", "e5m2" (both operands) or "ACT-WEIGHT" ("e5m2-e4m3", "e4m3-e5m2");
// QC_INPUT error naming the valid forms otherwise. Both INT8 or both FP8, as
// `LayerOperands::validate` requires.
std::pair<ElementType, ElementType> parse_element_types(std::string_view spec);
// The `--element` spelling of a pair: "int8", "e4m3", "e5m2", or "ACT-WEIGHT" when they differ.
std::string element_types_spec(ElementType act, ElementType weight);
// `--act-scale`: "per-token" or "per-tensor"; `--weight-scale`: "per-channel" or "per-tensor".
Fp8ActScaling parse_fp8_act_scaling(std::string_view spec);
WeightScaling parse_weight_scaling(std::string_view spec);
std::string_view to_string(Fp8ActScaling scaling);
std::string_view to_string(WeightScaling scaling);
// One line each, the formula as operand-file metadata records it (e.g. "vllm dynamic per-token
// fp8: scale=fmax(absmax/max, 1/(max*512)), q=rne(clamp(x/scale))").
std::string fp8_act_quantizer_description(Fp8ActScaling scaling);
std::string fp8_weight_quantizer_description(WeightScaling scaling);

// ------------------------------------------------------------------------------------------------
// Block-scaled FP8 (DeepSeek-V3 style): activations per token in groups of g columns along K (1×g),
// weights per block of b_n rows × b_k columns. Sources (read 2026-12-04 through the search tool;
// docs/epilogues.md, "Block-scaled FP8 quantizers", quotes them):
//   vLLM csrc/quantization/8bit/fp8/per_token_group_quant.cu, `per_token_group_quant_8bit_kernel` (what
//     vLLM's `per_token_group_quant_fp8` in vllm/model_executor/layers/quantization/utils/fp8_utils.py
//     calls on CUDA): absmax from eps = 1e-10 up, `y_s = absmax / max`, UE8M0:
//     `y_s = exp2f(ceilf(log2f(fmaxf(fabsf(y_s), 1e-10f))))`, `q = fminf(fmaxf(x / y_s, -max), max)`
//     converted to e4m3 (round to nearest even).
//   SGLang sgl-kernel/csrc/gemm/per_token_group_quant_8bit.cu (what `sglang_per_token_group_quant_fp8`
//     in python/sglang/srt/layers/quantization/fp8_kernel.py calls), `calculate_fp8_scales`: absmax from
//     1e-10 up, stored scale `absmax * (1.0f / max)`, multiplier `max / absmax`, `q = satfinite(x *
//     multiplier)`; UE8M0: `e = fast_log2_ceil(absmax * (1.0f / max))` (exponent bits, +1 when any
//     fraction bit is set), stored scale 2^e, multiplier 2^-e.
//   DeepGEMM deep_gemm/utils/math.py, `per_token_cast_to_fp8` / `per_block_cast_to_fp8` (DeepSeek's
//     published quantizers): absmax clamped to 1e-4 from below, `sf = absmax / 448`, UE8M0
//     `ceil_to_ue8m0(sf)` (exponent + (fraction != 0)), `q = (x * (1.0 / sf)).to(float8_e4m3fn)`; the
//     operand is zero-padded to whole groups/blocks, so a partial group's absmax is its own columns'.
//   compressed-tensors (strategy "block", `calculate_qparams` / `_quantize`): `scale = absmax / 448`,
//     a zero scale replaced by the dtype's epsilon, `q = clamp(w / scale, -448, 448)` (as the per-channel
//     FP8 weights above).
// ------------------------------------------------------------------------------------------------

// The smallest power of two >= s, for finite s > 0 up to 2^127 (larger: 2^127): DeepGEMM's
// `ceil_to_ue8m0` and SGLang's `fast_log2_ceil` + `fast_pow2`, exact bit arithmetic; a subnormal s
// gives 2^-126. vLLM's `exp2f(ceilf(log2f(s)))` equals it wherever log2f rounds correctly; a log2f
// that rounds s just above a power of two (within a few fp32 ulps) down onto the integer gives the
// power below instead (docs/epilogues.md).
float ue8m0_ceil(float s);

enum class GroupQuantizer {
  vllm,      // a = fmax(absmax, 1e-10); s = a/max (ue8m0: ue8m0_ceil(fmax(s, 1e-10))); q = sat(x/s)
  sglang,    // a = fmax(absmax, 1e-10); s = a*(1/max), q = sat(x*(max/a)); ue8m0: s = ue8m0_ceil(s), q = sat(x*(1/s))
  deepgemm,  // a = fmax(absmax, 1e-4); s = a/448 (ue8m0: ue8m0_ceil(s)); q = sat(x*(1/s))
};
// "vllm", "sglang", "deepgemm"; QC_INPUT naming `what` and the valid names otherwise.
GroupQuantizer group_quantizer(std::string_view name, std::string_view what);
std::string_view group_quantizer_name(GroupQuantizer q);
// One line, the formula as operand-file metadata and run records print it.
std::string group_quantizer_description(GroupQuantizer q, bool ue8m0);

// Rows of an [M, K] row-major fp32 activation tile, per token in groups of `g` columns (the last group
// of a row may be shorter: its own columns, as DeepGEMM's zero padding gives), to e4m3 codes (`target`
// must be e4m3, the one type these kernels write: QC_INPUT otherwise; max = 448). `scales` receives
// [M, ceil(K/g)] row-major. NaN inputs are skipped by the absmax (`fmax`) and map to +max
// (`fp8_clamp_rne`), as for the per-token quantizer.
void quantize_activations_fp8_groups(ElementType target, GroupQuantizer q, int64_t g, bool ue8m0, const float* x,
                                     int64_t M, int64_t K, uint8_t* codes, float* scales);

enum class BlockQuantizer {
  deepgemm,            // per_block_cast_to_fp8: a = fmax(absmax, 1e-4); s = a/448 (ue8m0: ue8m0_ceil); q = sat(w*(1/s))
  compressed_tensors,  // strategy block: s = absmax/max (0 -> the dtype's epsilon; ue8m0: ue8m0_ceil); q = sat(w/s)
};
BlockQuantizer block_quantizer(std::string_view name, std::string_view what);  // "deepgemm", "compressed-tensors"
std::string_view block_quantizer_name(BlockQuantizer q);
std::string block_quantizer_description(BlockQuantizer q, bool ue8m0);

// `w [N, K]` row-major fp32 weights per block of `b_n` rows × `b_k` columns (partial blocks at the N
// and K edges: their own elements) to e4m3 codes (`target` e4m3 only, as above); `scales` receives
// [ceil(N/b_n), ceil(K/b_k)] row-major. `dtype` bf16: weights, scales and quotients in bf16 as for the
// per-channel FP8 weights (compressed-tensors; DeepGEMM computes in fp32 from bf16 weights: only the
// weights are rounded to bf16 first). `ue8m0` with compressed-tensors is refused (it has no such
// format). QC_INPUT error on a non-finite weight (names the coordinate).
void quantize_weights_fp8_blocks(ElementType target, BlockQuantizer q, int64_t b_n, int64_t b_k, bool ue8m0,
                                 const float* w, int64_t N, int64_t K, uint8_t* codes, float* scales,
                                 WeightScaleDtype dtype = WeightScaleDtype::f32);

// What one W8A8-FP8 layer is quantized to: vLLM's dynamic FP8 activations and compressed-tensors'
// FP8 weights, with their element types and scale granularities. The defaults are what vLLM runs
// for a compressed-tensors FP8-dynamic checkpoint (e4m3 × e4m3, per token × per channel).
struct Fp8Quantization {
  ElementType act = ElementType::e4m3, weight = ElementType::e4m3;
  Fp8ActScaling act_scaling = Fp8ActScaling::per_token;
  WeightScaling weight_scaling = WeightScaling::per_channel;
  // Block-scaled FP8 (`--act-scale per-token-group:<g> --weight-scale per-block:<b_n>x<b_k>`, e4m3): both set,
  // the two scalings above then unused; activations by vLLM's per_token_group_quant_fp8, weights by
  // DeepGEMM's per_block_cast_to_fp8 (a block-scaled checkpoint: its own).
  std::optional<ScaleLayout> act_blocks, weight_blocks;
  bool block_scaled() const { return act_blocks.has_value(); }
  // The spellings: "per-token", "per-token-group:128", ...
  std::string act_scale_spec() const;
  std::string weight_scale_spec() const;
  bool operator==(const Fp8Quantization&) const = default;
};

}  // namespace qc
