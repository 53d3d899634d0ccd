// Operand files: safetensors with keys `<layer>.a_q` i8 [M,K], `<layer>.a_scale` f32 [M] (or
// [M,1]), `<layer>.w_q` i8 [N,K], `<layer>.w_scale` f32 [N] (or [N,1]), optional `<layer>.bias`
// bf16 [N]. `__metadata__` records the source; its key `layers` (comma-separated) fixes the layer
// order, otherwise layers are ordered naturally (numbers compared as numbers).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qconform/operands.hpp"

namespace qc {

struct OperandSet {
  std::string path;
  std::string sha256;  // "sha256:<hex>" of the whole file
  std::map<std::string, std::string> metadata;
  std::vector<LayerOperands> layers;  // views into the memory-mapped file
};

// Strict: unknown keys, missing parts, wrong dtypes or ranks, shape mismatches between a_q and
// w_q, non-finite or non-positive scales are input errors naming the file, the key and what was
// expected. `with_digest = false` skips hashing the file.
OperandSet load_operands(const std::string& path, bool with_digest = true);

// Writes atomically (temporary file, then rename).
void save_operands(const std::string& path, const std::vector<LayerOperands>& layers,
                   std::map<std::string, std::string> metadata);

// Natural order: "layers.2.q" < "layers.10.q".
bool natural_less(const std::string& a, const std::string& b);

}  // namespace qc
