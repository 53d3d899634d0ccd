// config.json of a Hugging Face-layout model (hf.cpp reads and writes the tensors): parsed strictly
// on reading, emitted on writing. Internal to src/model.
#pragma once

#include <string>

#include "model/model.hpp"

namespace qc {

// What config.json says of a model.
struct HfHeader {
  ModelConfig config;
  WeightStorage weights;    // `quantized` false without a quantization_config
  std::string torch_dtype;  // "" when absent
};

// Reads and validates `file` (config.json): an input error names the file and the field.
HfHeader parse_config(const std::string& file);

// The config.json of `m`; `weights`: unquantized (no quantization_config), or the compressed-tensors
// config of an int-quantized or float-quantized checkpoint, as llm-compressor writes it (W8A8 INT8,
// FP8_DYNAMIC), or a block-scaled one.
std::string hf_config_json(const Model& m, const WeightStorage& weights);

}  // namespace qc
