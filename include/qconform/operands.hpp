// The operands of one W8A8 linear layer: Y = bf16((A_q · W_qᵀ) ⊙ s_a ⊙ s_w (+ bias)), with INT8 codes
// (the paper's W8A8) or OCP FP8 codes (W8A8-FP8: vLLM's dynamic FP8 path, compressed-tensors' FP8),
// and the scale granularity of each operand: one scale per tensor, per row (token / output channel),
// or, block-scaled FP8 (DeepSeek-V3, Qwen3-FP8), per group of K columns of a row (1×g) or per block of
// rows × K columns (b×b), whose scales then act inside the accumulation (docs/formats.md).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qc {

// The element type of `a_q` and `w_q`. An INT8 layer holds int8 codes; an FP8 layer holds OCP FP8
// bit patterns (e4m3fn: bias 7, no infinity; e5m2: bias 15) in the same bytes. Both operands of a
// layer are INT8, or both FP8 (e4m3 and e5m2 may be mixed, e.g. e5m2 activations × e4m3 weights).
enum class ElementType : uint8_t { int8, e4m3, e5m2 };
std::string_view element_type_name(ElementType t);  // "int8", "e4m3", "e5m2"

// How the scales of one operand cover its codes. Activations take per-tensor, per-token or
// per-token-group; weights per-tensor, per-channel or per-block.
enum class ScaleGranularity : uint8_t {
  per_tensor,       // one scale for the whole call, stored once per row ([M] / [N]): a capture's rows keep
                    // the scale of the call they came from, so the entries need not be equal
  per_token,        // activations: one per row of a_q, a_scale [M]
  per_channel,      // weights: one per row of w_q (output channel), w_scale [N]
  per_token_group,  // activations: one per row and group of g columns along K, a_scale [M, ceil(K/g)]
  per_block,        // weights: one per block of b_n rows x b_k columns, w_scale [ceil(N/b_n), ceil(K/b_k)]
};
// "per-tensor", "per-token", "per-channel", "per-token-group", "per-block".
std::string_view scale_granularity_name(ScaleGranularity g);

// The scale layout of one operand: its granularity, the block it covers, and whether every scale is
// a power of two (UE8M0: 2^e with e in [-127, 127], DeepSeek-V3.1's `scale_fmt: ue8m0`). The last
// group or block along K (and the last block along N) may be partial: K = 200 with g = 128 is two
// groups, of 128 and 72 columns.
struct ScaleLayout {
  ScaleGranularity granularity = ScaleGranularity::per_token;
  int64_t block_rows = 1;  // per_block: operand rows per scale row (b_n); 1 otherwise
  int64_t block_k = 0;     // per_token_group, per_block: K columns per scale (g, b_k); 0: all of K
  bool ue8m0 = false;

  static ScaleLayout per_tensor() { return {ScaleGranularity::per_tensor, 1, 0, false}; }
  static ScaleLayout per_token() { return {ScaleGranularity::per_token, 1, 0, false}; }
  static ScaleLayout per_channel() { return {ScaleGranularity::per_channel, 1, 0, false}; }
  static ScaleLayout token_group(int64_t g) { return {ScaleGranularity::per_token_group, 1, g, false}; }
  static ScaleLayout block(int64_t b_n, int64_t b_k) { return {ScaleGranularity::per_block, b_n, b_k, false}; }

  // The scales act per K block, inside the accumulation (per-token-group, per-block).
  bool k_blocked() const { return block_k > 0; }
  // Rows and columns of the scale array of an operand with `rows` rows and `k` columns.
  int64_t scale_rows(int64_t rows) const { return (rows + block_rows - 1) / block_rows; }
  int64_t scale_cols(int64_t k) const { return k_blocked() ? (k + block_k - 1) / block_k : 1; }
  int64_t scale_count(int64_t rows, int64_t k) const { return scale_rows(rows) * scale_cols(k); }
  // The index into the scale array of operand row r and K block kb (0 when not k_blocked).
  int64_t index(int64_t r, int64_t kb, int64_t k) const { return (r / block_rows) * scale_cols(k) + kb; }
  // The spelling of `--act-scale` / `--weight-scale` and of the operand files' metadata:
  // "per-tensor", "per-token", "per-channel", "per-token-group:128", "per-block:128x128" (no "ue8m0").
  std::string spec() const;
  bool operator==(const ScaleLayout&) const = default;
};
// The spellings above; `weights` chooses which operand's granularities are accepted. QC_INPUT naming
// `what` (e.g. "--act-scale") and the valid forms otherwise.
ScaleLayout parse_scale_layout(std::string_view spec, bool weights, std::string_view what);

// Borrowed views into bytes owned by `keepalive` (vectors or a memory-mapped file), so a layer
// read from a safetensors file is never copied.
struct LayerOperands {
  std::string name;
  int64_t m = 0, n = 0, k = 0;
  std::span<const int8_t> a_q;      // [m,k] row-major; FP8 bit patterns when a_type is e4m3/e5m2
  std::span<const float> a_scale;   // a_scaling.scale_count(m, k): [m] per token, [m, ceil(k/g)] per group
  std::span<const int8_t> w_q;      // [n,k] row-major (Wᵀ as column-major)
  std::span<const float> w_scale;   // w_scaling.scale_count(n, k): [n] per channel, [ceil(n/b_n), ceil(k/b_k)]
  std::span<const uint16_t> bias;   // [n] bf16 bit patterns; empty when the layer has no bias
  std::string source;               // where the operands came from (file and key prefix, or "synth seed=...")
  std::shared_ptr<const void> keepalive;
  ElementType a_type = ElementType::int8, w_type = ElementType::int8;
  ScaleLayout a_scaling = ScaleLayout::per_token(), w_scaling = ScaleLayout::per_channel();

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
  // Block-scaled FP8: some operand's scales act per K block (inside the accumulation).
  bool block_scaled() const { return a_scaling.k_blocked() || w_scaling.k_blocked(); }
  // The K block of a block-scaled layer (both k-blocked operands agree: validated); 0 otherwise.
  int64_t scale_block_k() const { return a_scaling.k_blocked() ? a_scaling.block_k : w_scaling.block_k; }
  // "per-token x per-channel", "per-token-group:128 x per-block:128x128 (ue8m0)": for records and reports.
  std::string scaling_description() const;
  // The FP8 bit patterns of an FP8 layer (the same bytes as a_q, w_q).
  std::span<const uint8_t> a_codes() const { return {reinterpret_cast<const uint8_t*>(a_q.data()), a_q.size()}; }
  std::span<const uint8_t> w_codes() const { return {reinterpret_cast<const uint8_t*>(w_q.data()), w_q.size()}; }
  // Sizes consistent with m, n, k and the scale layouts; each operand's granularity one it can take, a
  // block-scaled layer FP8 with one K block; scales finite and > 0 (powers of two when `ue8m0`); both
  // operands INT8 or both FP8, and every FP8 code finite (a NaN or e5m2 infinity code is an input error
  // naming its coordinates). QC_INPUT errors name `source`, the layer, the field and the coordinate.
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
  ScaleLayout a_scaling = ScaleLayout::per_token(), w_scaling = ScaleLayout::per_channel();
};

// Moves `storage` into a shared holder and returns operands viewing it.
LayerOperands make_operands(std::string name, int64_t m, int64_t n, int64_t k, OperandStorage storage,
                            std::string source);

// A copy of `ops` with its scales replaced (the power-of-two probes), in the same layouts; a_q, w_q
// and bias are shared, not copied.
LayerOperands with_scales(const LayerOperands& ops, std::vector<float> a_scale, std::vector<float> w_scale);

}  // namespace qc
