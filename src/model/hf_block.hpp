// Block-scaled FP8 checkpoints (issue #28 item 6): the Hugging Face `quant_method: fp8` format with
// `weight_block_size` (DeepSeek-V3/R1, Qwen3-*-FP8: F8_E4M3 `weight` [N,K] and `weight_scale_inv` fp32
// [ceil(N/b_n), ceil(K/b_k)], which despite its name multiplies: w = q * scale_inv) and
// compressed-tensors' block strategy (`weights.strategy: "block"`, `block_structure [b_n, b_k]`,
// `weight_scale` in the model dtype; activations `strategy: "group"`, `group_size b_k`, dynamic). The
// config validation and the config a writer emits; hf.cpp reads and writes the tensors.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "model/model.hpp"

namespace qc {

// `quantization_config.quant_method` is "fp8" (the Hugging Face FP8 format, not compressed-tensors).
bool is_hf_fp8_config(const nlohmann::json& q);
// Strict: quant_method "fp8", activation_scheme "dynamic", fmt "e4m3" (or absent), weight_block_size
// [b_n, b_k] of positive integers (a per-tensor HF fp8 checkpoint without it is refused: not modelled),
// modules_to_not_convert / ignored_layers null, [] or ["lm_head"], scale_fmt null or "ue8m0"; any other
// key is an input error naming it.
WeightStorage validate_hf_fp8_config(const std::string& file, const nlohmann::json& q);
// A compressed-tensors config group whose weights have `strategy: "block"`.
bool is_compressed_tensors_block_group(const nlohmann::json& group);
// Strict check of such a group (`where` names it): block weights {8 bits, float, symmetric, static,
// block_structure [b_n, b_k]} and group activations {8 bits, float, symmetric, dynamic, group_size b_k}.
WeightStorage validate_compressed_tensors_block_group(const std::string& file, const nlohmann::json& group,
                                                      const std::string& where);
// The `quantization_config` a writer emits for `weights` (block-scaled: `weights.blocks` set).
nlohmann::ordered_json block_quantization_config(const WeightStorage& weights);

}  // namespace qc
