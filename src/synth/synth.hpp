// Synthetic operands with realistic statistics, so the layer-level experiment runs with no model
// at hand: activations with a few heavy outlier channels quantized per token, Gaussian weights
// quantized per channel the way compressed-tensors does (INT8: absmax/127.5, half-even; FP8
// (`element`): vLLM's dynamic per-token FP8 activations, compressed-tensors' FP8 weights).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epilogue/quantize.hpp"  // parse_element_types and the other FP8 spellings, shared with the model verbs
#include "qconform/operands.hpp"

namespace qc {

struct LayerShape {
  std::string name;  // HF-style: "model.layers.3.self_attn.q_proj"
  int64_t n = 0, k = 0;
};

// Presets: "qwen3-1.7b" (196 layers), "qwen3-8b" (252), "llama3-70b" (560; hidden 8192,
// intermediate 28672, 80 blocks, 64 query / 8 KV heads of 128), "tiny" (2 blocks of a 256-wide model,
// for tests), or "MxNxK" (one layer named "layer0"; M then overrides `m`).
struct ShapeSpec {
  std::vector<LayerShape> layers;
  int64_t m_override = 0;  // > 0 when the spec was MxNxK
};
ShapeSpec parse_shapes(std::string_view spec);

struct SynthOptions {
  std::string shapes = "qwen3-1.7b";
  int64_t m = 512;
  uint64_t seed = 0;
  bool bias = false;                 // add a bf16 bias per output channel
  double outlier_fraction = 0.005;   // share of activation channels that are heavy outliers
  double outlier_gain = 30.0;        // their magnitude relative to the other channels
  double weight_sigma = 0.02;        // Gaussian weight standard deviation
  std::string act_quantizer = "vllm";
  // Element types, activations then weights: "int8" (the default), "e4m3", "e5m2" or "e5m2-e4m3".
  // FP8 layers are quantized by vLLM's dynamic per-token FP8 quantizer and compressed-tensors'
  // per-channel FP8 weight quantizer (`quantize_activations_fp8`, `quantize_weights_fp8`) from the
  // same fp32 activations and weights as the INT8 layers; `act_quantizer` must then be "vllm".
  std::string element = "int8";
  // FP8 only: the scale granularity (`parse_scale_layout`): "per-token" or "per-tensor" for activations
  // (vLLM's dynamic_per_token_scaled_fp8_quant / dynamic_scaled_fp8_quant) or "per-token-group:<g>"
  // (block-scaled: `quantize_activations_fp8_groups` with `act_quantizer` vllm, sglang or deepgemm), and
  // "per-channel", "per-tensor" or "per-block:<rows>x<cols>" for weights (block-scaled:
  // `quantize_weights_fp8_blocks` with `weight_quantizer`); a per-tensor scale is stored repeated in
  // a_scale [M] / w_scale [N].
  std::string act_scale = "per-token";
  std::string weight_scale = "per-channel";
  std::string weight_quantizer = "deepgemm";  // per-block weights: deepgemm or compressed-tensors
  bool ue8m0 = false;                         // block-scaled only: every scale rounded up to a power of two
  int64_t max_layers = 0;            // > 0: only the first layers of the preset
  int threads = 0;
};

// The quantizers' formulas as operand-file metadata records them ("act_quantizer", "weight_quantizer").
std::string synth_act_quantizer_description(const SynthOptions& options);
std::string synth_weight_quantizer_description(const SynthOptions& options);

// Deterministic across machines: a counter-based generator (splitmix64) and Irwin–Hall normals
// from integer arithmetic only, so the same seed gives the same bytes everywhere.
std::vector<LayerOperands> synth_operands(const SynthOptions& options);
// The same layers, handed to `sink` one at a time in order (a few generated at once, one per
// thread), so that a set larger than memory can be written shard by shard.
void synth_operands_each(const SynthOptions& options, const std::function<void(LayerOperands)>& sink);

// splitmix64, the generator behind everything synthetic in qconform.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace qc
