// The operands of one W8A8 linear layer: Y = bf16((A_q · W_qᵀ) ⊙ s_a ⊙ s_w (+ bias)), with INT8 codes
// (the paper's W8A8) or OCP FP8 codes (W8A8-FP8: vLLM's dynamic FP8 path, compressed-tensors' FP8).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace qc {

// The element type of `a_q` and `w_q`. An INT8 layer holds int8 codes; an FP8 layer holds OCP FP8
// bit patterns (e4m3fn: bias 7, no infinity; e5m2: bias 15) in the same bytes. Both operands of a
// layer are INT8, or both FP8 (e4m3 and e5m2 may be mixed, e.g. e5m2 activations × e4m3 weights).
enum class ElementType : uint8_t { int8, e4m3, e5m2 };
std::string_view element_type_name(ElementType t);  // "int8", "e4m3", "e5m2"

// Borrowed views into bytes owned by `keepalive` (vectors or a memory-mapped file), so a layer
// read from a safetensors file is never copied.
struct LayerOperands {
  std::string name;
  int64_t m = 0, n = 0, k = 0;
  std::span<const int8_t> a_q;      // [m,k] row-major; FP8 bit patterns when a_type is e4m3/e5m2
  std::span<const float> a_scale;   // [m] per token
  std::span<const int8_t> w_q;      // [n,k] row-major (Wᵀ as column-major)
  std::span<const float> w_scale;   // [n] per output channel
  std::span<const uint16_t> bias;   // [n] bf16 bit patterns; empty when the layer has no bias
  std::string source;               // where the operands came from (file and key prefix, or "synth seed=...")
  std::shared_ptr<const void> keepalive;
  ElementType a_type = ElementType::int8, w_type = ElementType::int8;

  // FP8 codes already found finite in memory that nothing in this process can write (the safetensors
  // loader's read-only file mapping, whose changes are detected as the file's): validate() does not
  // scan a_q or w_q again while they lie inside these bytes under the same element type (row views
  // and scale rewrites share them). Empty for anything built in memory: those are scanned every time.
  struct CheckedCodes {
    const int8_t* begin = nullptr;
    const int8_t* end = nullptr;
    ElementType type = ElementType::int8;
    bool covers(std::span<const int8_t> codes, ElementType t) const {
      return begin != nullptr && t == type && codes.data() >= begin && codes.data() + codes.size() <= end;
    }
  };
  CheckedCodes checked_a, checked_w;

  bool has_bias() const { return !bias.empty(); }
  bool fp8() const { return a_type != ElementType::int8; }
  // The FP8 bit patterns of an FP8 layer (the same bytes as a_q, w_q).
  std::span<const uint8_t> a_codes() const { return {reinterpret_cast<const uint8_t*>(a_q.data()), a_q.size()}; }
  std::span<const uint8_t> w_codes() const { return {reinterpret_cast<const uint8_t*>(w_q.data()), w_q.size()}; }
  // Sizes consistent with m, n, k; scales finite and > 0; both operands INT8 or both FP8, and every
  // FP8 code finite (a NaN or e5m2 infinity code is an input error naming its coordinates). QC_INPUT
  // errors name `source`, the layer and the field.
  void validate() const;
};

// Owning storage for operands built in memory (synthetic operands, captures, scale rewrites).
struct OperandStorage {
  std::vector<int8_t> a_q;
  std::vector<float> a_scale;
  std::vector<int8_t> w_q;
  std::vector<float> w_scale;
  std::vector<uint16_t> bias;
  ElementType a_type = ElementType::int8, w_type = ElementType::int8;
};

// Moves `storage` into a shared holder and returns operands viewing it.
LayerOperands make_operands(std::string name, int64_t m, int64_t n, int64_t k, OperandStorage storage,
                            std::string source);

// A copy of `ops` with its scales replaced (the power-of-two probes); a_q, w_q and bias are
// shared, not copied.
LayerOperands with_scales(const LayerOperands& ops, std::vector<float> a_scale, std::vector<float> w_scale);

}  // namespace qc
