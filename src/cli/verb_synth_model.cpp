// `qconform synth-model`: a seeded random model in the Hugging Face, compressed-tensors (INT8 or FP8) or
// llama2.c format, with a small tokens JSONL beside it (`tokens.jsonl`: {"prompt": id, "tokens": [...]}).
#include <fmt/format.h>

#include <memory>

#include "cli/cli.hpp"
#include "qconform/error.hpp"
#include "model/model.hpp"
#include "synth/synth.hpp"

namespace qc::cli {
namespace {

struct SynthModelArgs {
  std::string config = "tiny", out, format = "hf", dtype = "f32", weight_scale;
  int64_t layers = 0, sequences = 4, length = 16;
  uint64_t seed = 0;
};

VerbRunner setup_synth_model(CLI::App& app) {
  auto a = std::make_shared<SynthModelArgs>();
  app.add_option("--config", a->config, "tiny | tiny-qwen2 | tiny-qwen3 | qwen3-1.7b-shaped")->required();
  app.add_option("--layers", a->layers, "decoder layers (default: the preset's; qwen3-1.7b-shaped: 2)")
      ->check(positive_integer(a->layers));
  app.add_option("--seed", a->seed, "generator seed")->required()->check(non_negative_integer(a->seed));
  app.add_option("--out", a->out, "output directory (must not exist)")->required();
  app.add_option("--format", a->format,
                 "hf (default) | compressed-tensors (int-quantized W8A8) | compressed-tensors-fp8 (float-quantized: "
                 "e4m3 weights, as vLLM's FP8-dynamic checkpoints) | hf-fp8 (block-scaled: quant_method fp8, "
                 "weight_block_size, weight_scale_inv, as DeepSeek-V3 and Qwen3-FP8) | compressed-tensors-fp8-block "
                 "(strategy block) | llama2c");
  app.add_option("--weight-scale", a->weight_scale,
                 "compressed-tensors-fp8: per-channel (default, weight_scale [N,1]) or per-tensor (weight_scale [1]); "
                 "hf-fp8, compressed-tensors-fp8-block: per-block:<rows>x<cols> (default per-block:128x128)");
  app.add_option("--dtype", a->dtype, "f32 (default) | bf16 (hf and compressed-tensors)");
  app.add_option("--sequences", a->sequences, "token sequences in tokens.jsonl (default 4)")
      ->check(positive_integer(a->sequences));
  app.add_option("--length", a->length, "tokens per sequence, BOS first (default 16)")
      ->check(integer_in(a->length, int64_t{2}, int64_t{1} << 20));
  return [a] {
    const ModelFormat format = parse_model_format(a->format);
    ModelConfig config = synth_config(a->config, a->layers);
    config.dtype = a->dtype;
    QC_INPUT(a->length <= config.max_seq_len, "--length {}: expected at most the model's max_seq_len {}", a->length,
             config.max_seq_len);
    const bool block = format == ModelFormat::hf_fp8 || format == ModelFormat::compressed_tensors_fp8_block;
    QC_INPUT(a->weight_scale.empty() || format == ModelFormat::compressed_tensors_fp8 || block,
             "--weight-scale `{}`: expected it only with --format compressed-tensors-fp8, hf-fp8 or "
             "compressed-tensors-fp8-block, found --format {}",
             a->weight_scale, a->format);
    std::optional<ScaleLayout> blocks;
    if (block && !a->weight_scale.empty()) {
      blocks = parse_scale_layout(a->weight_scale, /*weights=*/true, "--weight-scale");
      QC_INPUT(blocks->k_blocked(), "--weight-scale `{}` with --format {}: expected per-block:<rows>x<cols>",
               a->weight_scale, a->format);
    }
    Model model = synth_model(config, a->seed);
    if (!a->weight_scale.empty() && !block) model = fp8_quantized(model, parse_weight_scaling(a->weight_scale));
    // Token ids from their own stream: BOS, then uniform ids above the special tokens 0..2.
    uint64_t state = a->seed ^ 0x746f6b656e73ull;  // "tokens"
    std::string tokens;
    for (int64_t s = 0; s < a->sequences; ++s) {
      std::vector<int32_t> t = {config.bos_id};
      while (static_cast<int64_t>(t.size()) < a->length) {
        t.push_back(static_cast<int32_t>(3 + splitmix64(state) % static_cast<uint64_t>(config.vocab - 3)));
      }
      tokens += nlohmann::json{{"prompt", s}, {"tokens", t}}.dump() + "\n";
    }
    save_model(model, a->out, format, {{"tokens.jsonl", tokens}}, blocks);
    int64_t params = static_cast<int64_t>(model.embed.size() + model.lm_head.size());
    for (const LinearLayer* l : model.linear_layers()) params += l->n_out * l->k_in;
    fmt::print("synth-model: {} ({} layers, hidden {}, intermediate {}, {}/{} heads of {}, vocab {}, {} params), seed "
               "{}, format {}{}, dtype {}; wrote {} with tokens.jsonl ({} sequences of {})\n",
               a->config, config.n_layers, config.hidden, config.intermediate, config.n_heads, config.n_kv_heads,
               config.head_dim, config.vocab, params, a->seed, to_string(format),
               a->weight_scale.empty() ? "" : " (" + a->weight_scale + " weight scales)", config.dtype, a->out, a->sequences,
               a->length);
    return kExitOk;
  };
}

RegisterVerb register_synth_model{
    {"synth-model",
     "Write a seeded random model (tiny or Qwen3-1.7B-shaped) as hf, compressed-tensors (INT8 or FP8) or llama2c", 36,
     setup_synth_model}};

}  // namespace
}  // namespace qc::cli
