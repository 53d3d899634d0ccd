// The model engine: a LLaMA/Qwen3-family decoder whose every linear layer runs through one
// pluggable function (`LinearFn`), its loaders, greedy generation and teacher-forced replay.
//
// Numerics of the floating-point reference (mode `fp32`), see docs/model.md:
// - activations are stored in fp32 between operations;
// - every reduction (linear-layer dot products, RMSNorm's sum of squares, attention scores,
//   the softmax denominator and the weighted sum of values) accumulates in double, in one fixed
//   order (ascending index), and is rounded to fp32 once;
// - each row of a batch is computed by the same code in the same order, whatever the number of
//   rows, so a prefill of M tokens and M single-token decode steps give bit-identical logits.
//
// Layouts: every matrix is row-major; a linear layer's weight is [n_out, k_in] (PyTorch's
// `nn.Linear.weight`, llama2.c's `matmul` convention): y[m,n] = Σ_k x[m,k]·w[n,k] (+ bias[n]).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/arm.hpp"
#include "epilogue/quantize.hpp"

namespace qc {

// How rotary embeddings pair the elements of one head (a config flag, not a guess):
// `interleaved` rotates (x[2i], x[2i+1]) (llama2.c and Meta's original LLaMA code);
// `rotate_half` rotates (x[i], x[i + head_dim/2]) (Hugging Face `rotate_half`, Qwen).
// Both use the angle pos · theta^(-2i/head_dim) for pair i.
enum class RopeStyle { interleaved, rotate_half };

// The hyper-parameters of a decoder; field names follow Hugging Face's config.json where one
// exists (`hidden_size` -> `hidden`, `intermediate_size` -> `intermediate`, ...).
struct ModelConfig {
  std::string arch = "llama";  // "llama2c", "llama", "qwen2", "qwen3": informational
  int64_t hidden = 0;          // model width (llama2.c `dim`)
  int64_t intermediate = 0;    // MLP width (llama2.c `hidden_dim`)
  int64_t n_layers = 0;
  int64_t n_heads = 0;         // query heads
  int64_t n_kv_heads = 0;      // key/value heads (grouped-query attention: n_heads % n_kv_heads == 0)
  int64_t head_dim = 0;        // hidden / n_heads for LLaMA; explicit for Qwen3
  int64_t vocab = 0;
  int64_t max_seq_len = 0;     // positions the KV cache and RoPE accept
  double rope_theta = 10000.0;
  float rms_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::rotate_half;
  bool tie_embeddings = false;  // head reuses the token embedding
  bool qk_norm = false;         // Qwen3: RMSNorm over each head of q and k before RoPE
  bool qkv_bias = false;        // Qwen2: q, k and v projections carry a bias
  int32_t bos_id = 1;
  std::vector<int32_t> stop_ids = {};  // greedy generation stops after producing one of these
  std::string dtype = "f32";    // storage dtype of the checkpoint's floating tensors: "f32" or "bf16"

  // Throws QC_INPUT naming `source` and the field when the dimensions are inconsistent.
  void validate(const std::string& source) const;
};

// One linear layer, unquantized. `name` is the Hugging Face module path without the leading
// "model." (e.g. "layers.3.self_attn.q_proj", "layers.3.mlp.down_proj"), so that it matches
// safetensors / compressed-tensors keys and operand-capture keys.
struct LinearLayer {
  std::string name;
  int64_t n_out = 0, k_in = 0;
  std::vector<float> weight;  // [n_out, k_in] fp32
  std::vector<float> bias;    // [n_out] or empty
  // A quantized checkpoint (compressed-tensors "int-quantized": int8 codes, per-channel scales;
  // "float-quantized": e4m3 codes, per-channel or per-tensor scales) carries its codes and scales;
  // `weight` then holds their dequantization fp32(q·scale) (one rounding; exact for bf16 scales),
  // which is what mode `fp32` runs. Empty for unquantized checkpoints.
  std::vector<int8_t> weight_q;      // [n_out, k_in]: int8 codes, or FP8 bit patterns (weight_type e4m3)
  std::vector<float> weight_scale;   // [n_out] fp32 (the exact upcast of the stored scale; a per-tensor
                                     // scale repeated n_out times, as operand files keep it)
  ElementType weight_type = ElementType::int8;
  WeightScaling weight_scaling = WeightScaling::per_channel;
  // Block-scaled FP8 checkpoints (Hugging Face `quant_method: fp8` with `weight_block_size`,
  // compressed-tensors strategy "block"): the block, and `weight_scale` holds [ceil(n/b_n), ceil(k/b_k)].
  std::optional<ScaleLayout> weight_blocks;
  bool quantized() const { return !weight_q.empty(); }
};

struct Model;

// How a checkpoint stores its linear layers' weights: floating point (`quantized` false: the W8A8
// modes quantize them at run time), compressed-tensors int-quantized (int8, per channel) or
// float-quantized (e4m3, per channel or per tensor).
struct WeightStorage {
  bool quantized = false;
  ElementType type = ElementType::int8;
  WeightScaling scaling = WeightScaling::per_channel;
  std::optional<ScaleLayout> blocks;  // block-scaled FP8 weights: their block
  bool hf_fp8 = false;                // block-scaled, in the Hugging Face fp8 format (scales in `weight_scale_inv`)
  // "unquantized", "compressed-tensors int-quantized (int8, per-channel scales)", "compressed-tensors
  // float-quantized (e4m3, per-tensor scales)": for messages and run headers.
  std::string describe() const;
};
WeightStorage weight_storage(const LinearLayer& layer);
// A model's storage: that of its first linear layer (a checkpoint has one quantization scheme for
// every layer; the loaders and `fp8_quantized` keep it so).
WeightStorage weight_storage(const Model& model);

// What a model run must know about a checkpoint before it runs: how its weights are stored and
// whether it has a q/k/v bias (Qwen2).
struct CheckpointTraits {
  WeightStorage weights;
  bool qkv_bias = false;
};
// From `config.json` alone for a Hugging Face directory (no tensor is read: cheap, so a mode that
// cannot run the checkpoint fails before a large model is loaded); a llama2.c checkpoint has neither
// quantization nor bias. The same input errors as `load_model` for a malformed config.json.
CheckpointTraits peek_checkpoint(const std::string& path);

// The one interface every linear layer (q, k, v, o, gate, up, down; not the head) runs through:
// x [M, k_in] fp32 -> y [M, n_out] fp32. Quantized modes plug in here.
using LinearFn = std::function<void(const LinearLayer& layer, const float* x, int64_t M, float* y)>;

// Called after each linear layer with its input rows x [M, k_in] and output rows y [M, n_out]
// (operand capture hooks in here; the capture verb quantizes `x` itself or asks the arm).
using CaptureFn = std::function<void(const LinearLayer& layer, const float* x, int64_t M, const float* y)>;

// The plain fp32 matmul: y[m,n] = fp32( Σ_{k ascending} double(x[m,k])·double(w[n,k]) + bias[n] ).
// Products are exact in double; the sum is rounded to fp32 once, after the bias is added.
// Threaded over blocks of output channels when the work is large (`threads` = 0: all hardware
// threads above about 2 M multiply-adds, one below); every output is computed by the same code in
// the same order whatever the thread count, so results are bit-identical for any `threads`.
void matmul_fp32(const float* x, int64_t M, const float* w, const float* bias, int64_t N, int64_t K, float* y,
                 int threads = 0);
// `matmul_fp32` as a LinearFn (the default, mode `fp32`).
void fp32_linear(const LinearLayer& layer, const float* x, int64_t M, float* y);

// Modes of `qconform generate/replay/capture`: fp32, w8a8 (INT8 operands), w8a8-fp8 (FP8 operands).
//
// THE W8A8 PATH (`W8a8Linear`): a LinearFn that, per layer,
// (1) quantizes `layer.weight` per output channel to symmetric int8 once, the compressed-tensors
//     way (`absmax/127.5`, half-even; `quantize_weights_per_channel` with the model's dtype), and
//     caches it by `layer.name` — or takes a quantized checkpoint's own int8 weights and scales;
//     with `pow2` every weight scale is then rounded to its nearest power of two in log2 (the
//     probe, in memory);
// (2) quantizes the input rows `x` per token with the chosen activation quantizer (quantize.hpp);
// (3) builds `LayerOperands` (bias, when the layer has one, rounded to bf16: the operand format's
//     bias dtype) and calls `Arm::run` for the chosen arm;
// (4) widens the arm's bf16 output to fp32 into `y`.
// Attention, norms and the head stay floating point.
//
// THE W8A8-FP8 PATH is the same `W8a8Linear` with `W8a8Options::fp8` set: weights quantized once
// with `quantize_weights_fp8` (compressed-tensors "float-quantized", in the model's dtype; or an FP8
// checkpoint's own e4m3 codes and scales), activations per call with `quantize_activations_fp8`
// (vLLM's dynamic FP8 path), FP8 `LayerOperands` (a_type / w_type set) to an FP8 arm (one whose
// `ArmInfo::accumulation_model` is non-empty). FP8 arms take no bias.
enum class LinearMode { fp32, w8a8, w8a8_fp8 };
LinearMode parse_linear_mode(std::string_view text);  // "fp32", "w8a8", "w8a8-fp8"; QC_INPUT on anything else
std::string_view to_string(LinearMode mode);
// The arm a mode runs when none is named: cpu:vllm-cutlass (w8a8), cpu:fp8-hopper-fp8-promote4
// (w8a8-fp8: the model of cuBLASLt's default FP8 path; block-scaled: cpu:fp8-block-triton, the model
// of SGLang's and vLLM's Triton block kernel); "" for fp32.
std::string_view default_arm(LinearMode mode, bool block_scaled = false);

struct W8a8Options {
  std::string arm;                     // "" = the mode's `default_arm`
  std::string act_quantizer = "vllm";  // "vllm", "sglang" or "reciprocal" (per-token dynamic); FP8: "vllm"
  bool pow2 = false;                   // weight scales rounded to the nearest power of two (log2)
  WeightScaleDtype weight_dtype = WeightScaleDtype::f32;  // the model's dtype (bf16 models: bf16 scales)
  std::optional<Fp8Quantization> fp8;  // set: mode w8a8-fp8, with these element types and scalings
};
// w8a8 or w8a8-fp8, as `options.fp8` says.
LinearMode linear_mode(const W8a8Options& options);

// The one check between a checkpoint (or one of its layers, `where` naming it) and the W8A8 options:
// mode w8a8-fp8 refuses a bias (the FP8 arms take none) and an INT8 checkpoint, mode w8a8 an FP8
// checkpoint; an FP8 checkpoint's stored element type and weight scaling must be those of
// `options.fp8` (`--element`'s weight half, `--weight-scale`). QC_INPUT naming `where`, the option,
// what was expected and what was found.
void check_checkpoint_takes_options(const std::string& where, const WeightStorage& weights, bool has_bias,
                                    const W8a8Options& options);
// The FP8 quantization of a w8a8-fp8 run from the spellings of `--element`, `--act-scale` and
// `--weight-scale` (empty: the default, e4m3 x e4m3 per token x per channel; without `--weight-scale`
// an FP8 checkpoint's own scaling). QC_INPUT naming the option on a bad spelling.
Fp8Quantization fp8_quantization(std::string_view element, std::string_view act_scale, std::string_view weight_scale,
                                 const WeightStorage& checkpoint);
// The FP8 choice of a w8a8-fp8 run as it is recorded in the JSONL header, the capture metadata and the
// manifests' config: two runs that differ in quantization then differ there (C0's join sees it).
nlohmann::json fp8_run_config(const W8a8Options& options);

// The quantizer dtype that matches a model: bf16 for bf16 checkpoints, f32 otherwise.
WeightScaleDtype weight_scale_dtype_for(const ModelConfig& config);

// Called after each arm run with the operands it received and its output. The operands own their
// bytes (`keepalive`), so an observer may keep them.
using OperandObserver = std::function<void(const LayerOperands& ops, const ArmOutput& out)>;

class W8a8Linear {
 public:
  explicit W8a8Linear(W8a8Options options);
  // The LinearFn. Copies share the arm and the weight cache.
  void operator()(const LinearLayer& layer, const float* x, int64_t M, float* y) const;
  void set_observer(OperandObserver observer);
  const W8a8Options& options() const;
  ArmInfo arm_info() const;
  // The RunRecord of the most recent arm run (empty before the first).
  RunRecord last_record() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// fp32: `fp32_linear` (an arm, --pow2 or FP8 options are input errors); w8a8: a `W8a8Linear` (FP8 options
// are an input error); w8a8-fp8: a `W8a8Linear` with `options.fp8` (the default `Fp8Quantization` when unset).
LinearFn make_linear_fn(LinearMode mode, std::string_view arm_label = {});
LinearFn make_linear_fn(LinearMode mode, const W8a8Options& options);

struct DecoderLayer {
  std::vector<float> attn_norm;         // [hidden]   input_layernorm (llama2.c rms_att_weight)
  std::vector<float> ffn_norm;          // [hidden]   post_attention_layernorm (rms_ffn_weight)
  std::vector<float> q_norm, k_norm;    // [head_dim] Qwen3 only
  LinearLayer q, k, v, o;               // self_attn.{q,k,v,o}_proj (llama2.c wq, wk, wv, wo)
  LinearLayer gate, up, down;           // mlp.{gate,up,down}_proj (llama2.c w1, w3, w2)
};

struct Model {
  ModelConfig config;
  std::vector<float> embed;      // [vocab, hidden]
  std::vector<DecoderLayer> layers;
  std::vector<float> final_norm; // [hidden]
  std::vector<float> lm_head;    // [vocab, hidden]; empty when config.tie_embeddings
  std::string source;            // the file it came from
  std::string sha256;            // "sha256:<64 hex>" of that file, empty for in-memory models

  const float* head_weight() const { return config.tie_embeddings ? embed.data() : lm_head.data(); }
  // Every linear layer in forward order (q, k, v, o, gate, up, down per layer).
  std::vector<const LinearLayer*> linear_layers() const;
  // Checks every tensor's size against the config (QC_CHECK: loaders must produce consistent models).
  void check_shapes() const;
};

// ---- Loaders and writers ----

// Any supported model: a directory holding `config.json` + `model.safetensors` or the shards of
// `model.safetensors.index.json` (Hugging Face layout, fp32/bf16, or a compressed-tensors W8A8
// checkpoint), a directory holding `model.bin` (llama2.c, as `synth-model --format llama2c`
// writes), or a llama2.c `.bin` file.
Model load_model(const std::string& path);

// The files a model consists of, as (role, path) for manifests: `model`; or `model.config` and
// `model.weights`; or `model.config`, `model.weights.index` and `model.weights.<shard file>`.
std::vector<std::pair<std::string, std::string>> model_files(const std::string& path);

// Hugging Face layout (LLaMA / Qwen2 / Qwen3 keys, see docs/model.md). A `quantization_config`
// must be a compressed-tensors W8A8 config, "int-quantized" or "float-quantized" (validated
// strictly; anything else is an input error naming the field); its linear layers are then int8
// `weight` [N,K] + `weight_scale` [N,1], or F8_E4M3 `weight` [N,K] + `weight_scale` [N,1] (strategy
// channel) or [1] / [] (strategy tensor), the scales in the model dtype. Every tensor must be present with its expected dtype and shape, and no
// other tensor may be present.
// Block-scaled FP8 checkpoints (src/model/hf_block.hpp): the Hugging Face `quant_method: fp8` format with
// `weight_block_size` (F8_E4M3 `weight`, `weight_scale_inv` [ceil(N/b_n), ceil(K/b_k)] F32 or BF16) and
// compressed-tensors' block strategy (`weight_scale` of that shape in the model dtype).
Model load_hf(const std::string& dir);

enum class ModelFormat { hf, compressed_tensors, compressed_tensors_fp8, hf_fp8, compressed_tensors_fp8_block, llama2c };
// "hf", "compressed-tensors", "compressed-tensors-fp8", "hf-fp8" (block-scaled, DeepSeek-V3's layout),
// "compressed-tensors-fp8-block", "llama2c"
ModelFormat parse_model_format(std::string_view text);
std::string_view to_string(ModelFormat format);
// Writes `model` into the directory `out` (built in a temporary directory and renamed into place;
// `out` must not exist): `config.json` + `model.safetensors` for hf / compressed-tensors,
// `model.bin` (version-1 layout) for llama2c. Floating tensors are stored in `model.config.dtype` (bf16: the values must already be
// bf16-representable, QC_CHECK). compressed-tensors quantizes every linear layer that is not already
// quantized with `quantize_weights_per_channel` in the model dtype; compressed-tensors-fp8 writes a
// "float-quantized" checkpoint (F8_E4M3 `weight` [N,K], `weight_scale` [N,1] per channel or [1] per
// tensor, in the model dtype), quantizing every layer not already FP8 with `fp8_quantized` per channel.
// A layer quantized to the other format is an input error. Rotary layouts are converted:
// hf/compressed-tensors store rotate_half, llama2c stores interleaved (q/k rows permuted as Hugging
// Face's `convert_llama_weights_to_hf.py` does).
// hf-fp8 and compressed-tensors-fp8-block write block-scaled checkpoints (`blocks`, default 128x128),
// quantizing every layer not yet block-scaled with `fp8_block_quantized` (hf-fp8: DeepGEMM's
// per_block_cast_to_fp8, fp32 `weight_scale_inv`; compressed-tensors-fp8-block: its block strategy,
// `weight_scale` in the model dtype).
// `extra_files` (name -> content) are written into the directory too (e.g. a tokens JSONL).
void save_model(const Model& model, const std::string& out, ModelFormat format,
                const std::map<std::string, std::string>& extra_files = {},
                const std::optional<ScaleLayout>& blocks = std::nullopt);
// The same model with every linear layer not yet quantized quantized to e4m3 per block (`blocks`) with
// `quantize_weights_fp8_blocks` (`quantizer`), `weight` replaced by the dequantization; layers already
// block-scaled with these blocks stay; any other quantized layer is an input error.
Model fp8_block_quantized(const Model& model, const ScaleLayout& blocks, BlockQuantizer quantizer);

// The same model with every linear layer that is not yet quantized quantized to e4m3 with
// `quantize_weights_fp8` (`scaling`, in the model dtype), its codes and scales kept and `weight`
// replaced by their dequantization, as `load_hf` reads a float-quantized checkpoint. Layers already
// FP8 stay as they are if their scaling is `scaling`; any other quantized layer is an input error.
Model fp8_quantized(const Model& model, WeightScaling scaling);

// The same model with its q/k projections (rows, q/k bias, QK-norm weights) permuted to `style`.
Model with_rope_style(const Model& model, RopeStyle style);

// Seeded random models for the demo and tests: "tiny" (LLaMA-shaped, 2 layers of width 64, every
// format can hold it), "tiny-qwen3" (QK-norm, explicit head_dim), "tiny-qwen2" (q/k/v bias),
// "qwen3-1.7b-shaped" (hidden 2048, intermediate 6144, 16/8 heads of 128, QK-norm, vocab 4096).
// `layers` > 0 overrides the preset's layer count (qwen3-1.7b-shaped default: 2).
ModelConfig synth_config(std::string_view name, int64_t layers = 0);
// Deterministic on every machine (splitmix64 and integer-derived uniforms, no libm): weights
// ~ N(0, 1/K) approximately (Irwin–Hall of 4), norms 1 + small noise, embeddings ~ N(0, 1).
// With config.dtype == "bf16" every value is rounded to bf16.
Model synth_model(const ModelConfig& config, uint64_t seed);

// ---- Operand capture and the power-of-two checkpoint ----

// Runs one prefill pass per prompt in mode w8a8 or w8a8-fp8 (`options.fp8`) and records, for every linear layer, the operands
// its arm received and what the arm returned. Rows of all prompts are concatenated per layer in
// prompt order (the weights are the same for every prompt), so layer L's `a_q` holds
// Σ_p len(p) rows. Layers come in forward order (`Model::linear_layers`).
struct CaptureResult {
  std::vector<LayerOperands> layers;              // owning (make_operands)
  std::vector<std::vector<uint16_t>> outputs;     // per layer [rows, n] bf16: the arm's outputs in the run
  std::vector<int64_t> rows_per_prompt;
  RunRecord record;                               // the arm's record of its last run
};
CaptureResult capture_operands(const Model& model, const W8a8Options& options,
                               const std::vector<std::vector<int32_t>>& prompts);

// `qconform pow2 IN OUT`: a copy of checkpoint IN whose every weight scale is rounded to its
// nearest power of two in log2 (`pow2_nearest_log2`), the probe checkpoint. IN is a
// compressed-tensors directory (every `*.safetensors` rewritten: `*.weight_scale` tensors in their
// own dtype, F32 or BF16, where a power of two stays exactly representable; every other tensor's
// bytes and the metadata copied unchanged; every other file copied byte for byte) or a single
// `.safetensors` file. OUT must not exist (so it is never IN); it is built beside OUT and renamed
// into place. A llama2.c or unquantized Hugging Face checkpoint has no weight scales: that is an
// input error that says so (their probe is `--mode w8a8 --pow2` at run time).
struct Pow2Report {
  std::vector<std::pair<std::string, std::string>> inputs, outputs;  // (path, "sha256:...") per file
  int64_t scale_tensors = 0;      // tensors rewritten
  int64_t scales = 0;             // scale values seen
  int64_t scales_changed = 0;     // of them, not already a power of two
  int64_t tensors_copied = 0;     // tensors copied byte for byte
};
Pow2Report pow2_checkpoint(const std::string& in, const std::string& out);

// Token-id sequences, JSONL lines {"prompt": <string|int>, "tokens": [ids...]}; blank lines and
// header objects ({"kind": "header", ...}) are skipped. Every id in [0, vocab), at least
// `min_tokens` per line; QC_INPUT naming the file, the line and the field otherwise.
struct TokenSequence {
  nlohmann::json prompt;
  std::vector<int32_t> tokens;
};
std::vector<TokenSequence> read_token_sequences(const std::string& path, int64_t vocab, size_t min_tokens);

// llama2.c checkpoints: the legacy layout of run.c (7-int header, vocab_size < 0 means an
// untied classifier follows) and export.py's version 1 ("ak42" magic, 256-byte header).
// Throws QC_INPUT naming the file and field on anything malformed.
Model load_llama2c(const std::string& path);
// Writes `model` in the version-1 layout (used by tests; llama2.c's export.py writes the same bytes).
std::vector<uint8_t> encode_llama2c_v1(const Model& model);

// ---- Blocks (exposed for the unit tests, which pin each against an fp64 reference) ----

// out[i] = fp32( w[i] · x[i] / sqrt(mean(x²) + eps) ), mean in double. `out` may alias `x`.
void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps);
// The angles of one position: cos/sin of pos · theta^(-2i/head_dim), i < head_dim/2, in double.
void rope_angles(int64_t pos, int64_t head_dim, double theta, double* cos_out, double* sin_out);
// Rotates every head of vec [n_heads, head_dim] in place with the angles of one position.
void rope_rotate(float* vec, int64_t n_heads, int64_t head_dim, const double* cos, const double* sin, RopeStyle style);
// Causal grouped-query attention for M query rows at positions pos0 .. pos0+M-1.
// q [M, n_heads·head_dim]; k_cache, v_cache [pos0+M, n_kv_heads·head_dim] (position-major);
// query row t sees cache rows 0 .. pos0+t; query head h reads kv head h / (n_heads/n_kv_heads).
// out [M, n_heads·head_dim]. Scores scaled by 1/sqrt(head_dim); everything in double, one rounding.
// A score q·k is summed pair by pair in RoPE's pairing (`style`): Σ_i (q[a_i]k[a_i] + q[b_i]k[b_i])
// in ascending i, so a model stored with rotate_half and the same model stored interleaved (its
// q/k rows permuted, as Hugging Face's conversion does) compute bit-identical scores.
void causal_attention(const float* q, int64_t M, int64_t pos0, const float* k_cache, const float* v_cache,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, RopeStyle style, float* out);
// h[i] = fp32( silu(gate[i]) · up[i] ), silu(g) = g / (1 + exp(-g)), in double. `h` may alias either input.
void swiglu(float* h, const float* gate, const float* up, int64_t n);

// ---- The decoder with its KV cache ----

enum class LogitRows { all, last };

class Decoder {
 public:
  explicit Decoder(const Model& model, LinearFn linear = fp32_linear, CaptureFn capture = {});
  // Forgets the KV cache: the next `forward` starts at position 0.
  void reset() { pos_ = 0; }
  int64_t position() const { return pos_; }
  // Runs `tokens` at positions position() .. position()+M-1 (prefill when M > 1, decode when
  // M == 1), appends their keys and values to the cache and writes logits [M or 1, vocab].
  void forward(std::span<const int32_t> tokens, LogitRows rows, std::vector<float>& logits);
  const Model& model() const { return model_; }

 private:
  void linear(const LinearLayer& layer, const float* x, int64_t M, float* y);

  const Model& model_;
  LinearFn linear_;
  CaptureFn capture_;
  int64_t pos_ = 0;
  std::vector<std::vector<float>> k_cache_, v_cache_;  // per layer [positions, n_kv_heads·head_dim]
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_;
  std::vector<double> cos_, sin_;
};

// ---- Generation and replay: one record per position ----

// The JSONL record (read by `qconform transfer`; keep the field names and order):
// {"prompt": <string or int>, "position": p, "token": t, "top1_id", "top1_logit", "top2_id",
//  "top2_logit", "margin"}. `position` is the index of the last context token, whose logits
// are scored; `token` is the token at p+1: the generated one (= top1_id) in generation, the
// forced one in replay. margin = fp32(top1_logit − top2_logit).
struct PositionRecord {
  nlohmann::json prompt;
  int64_t position = 0;
  int32_t token = 0;
  int32_t top1_id = 0, top2_id = 0;
  float top1_logit = 0, top2_logit = 0, margin = 0;
};
// Top-2 of one logits row: the largest (lowest id on ties, like run.c's argmax) and the
// largest of the rest. NaN logits are never chosen (a row of NaNs is an internal error).
PositionRecord top2(const float* logits, int64_t vocab);
// One JSONL line (no newline): shortest round-trip float printing; non-finite values as null.
std::string format_record(const PositionRecord& r);

struct GenerateResult {
  std::vector<int32_t> tokens;     // the prompt tokens followed by the generated ones
  int64_t n_prompt = 0;
  std::vector<PositionRecord> records;  // one per generated token
  std::vector<float> logits;            // [records.size(), vocab]: the decode logits behind them
};
// Greedy decoding with the KV cache: one prefill of the prompt, then one decode step per
// token; stops after `max_new` tokens, after a token in config.stop_ids, or at max_seq_len.
GenerateResult generate_greedy(Decoder& decoder, std::span<const int32_t> prompt, int64_t max_new,
                               const nlohmann::json& prompt_id);
// Teacher forcing: one prefill pass over `tokens`; records for positions 0 .. size-2 with
// `token` = tokens[p+1]. If `logits_out` is given it receives [size-1, vocab].
std::vector<PositionRecord> replay(Decoder& decoder, std::span<const int32_t> tokens, const nlohmann::json& prompt_id,
                                   std::vector<float>* logits_out = nullptr);

// The first JSONL line of a generate/replay output: {"kind": "header", "mode": "generate" |
// "replay" (the verb, as `qconform transfer` reads it), "linear_mode": "fp32" | "w8a8" | "w8a8-fp8",
// "arm": label ("fp32" when no arm runs), "model", "model_sha256", "tokenizer", "tokenizer_sha256",
// "qconform_version", plus `extra`'s fields}.
std::string format_header(std::string_view verb, LinearMode mode, std::string_view arm, const Model& model,
                          const std::string& tokenizer_path, const std::string& tokenizer_sha256,
                          const nlohmann::json& extra = nlohmann::json::object());

struct PrefillDecodeComparison {
  int64_t positions = 0;
  int64_t top1_disagreements = 0;
  std::vector<int64_t> disagreeing_positions;
  double max_abs_diff = 0;  // over every logit of every compared position
  int64_t bitwise_different = 0;  // logits whose bit patterns differ
};
// Re-scores a generated sequence with one prefill pass and compares it with the decode logits.
PrefillDecodeComparison compare_prefill_decode(Decoder& decoder, const GenerateResult& generated);

}  // namespace qc
