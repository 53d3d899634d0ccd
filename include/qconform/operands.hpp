// The operands of one W8A8 linear layer: Y = bf16((A_q · W_qᵀ) ⊙ s_a ⊙ s_w (+ bias)).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace qc {

// Borrowed views into bytes owned by `keepalive` (vectors or a memory-mapped file), so a layer
// read from a safetensors file is never copied.
struct LayerOperands {
  std::string name;
  int64_t m = 0, n = 0, k = 0;
  std::span<const int8_t> a_q;      // [m,k] row-major
  std::span<const float> a_scale;   // [m] per token
  std::span<const int8_t> w_q;      // [n,k] row-major (Wᵀ as column-major)
  std::span<const float> w_scale;   // [n] per output channel
  std::span<const uint16_t> bias;   // [n] bf16 bit patterns; empty when the layer has no bias
  std::string source;               // where the operands came from (file and key prefix, or "synth seed=...")
  std::shared_ptr<const void> keepalive;

  bool has_bias() const { return !bias.empty(); }
  // Sizes consistent with m, n, k; scales finite and > 0. QC_INPUT errors name `source`, the
  // layer and the field.
  void validate() const;
};

// Owning storage for operands built in memory (synthetic operands, captures, scale rewrites).
struct OperandStorage {
  std::vector<int8_t> a_q;
  std::vector<float> a_scale;
  std::vector<int8_t> w_q;
  std::vector<float> w_scale;
  std::vector<uint16_t> bias;
};

// Moves `storage` into a shared holder and returns operands viewing it.
LayerOperands make_operands(std::string name, int64_t m, int64_t n, int64_t k, OperandStorage storage,
                            std::string source);

// A copy of `ops` with its scales replaced (the power-of-two probes); a_q, w_q and bias are
// shared, not copied.
LayerOperands with_scales(const LayerOperands& ops, std::vector<float> a_scale, std::vector<float> w_scale);

}  // namespace qc
