// Options shared by the model verbs (`generate`, `replay`, `capture`): which model, which mode, which
// arm, which activation quantizer (INT8) or FP8 quantization (element types and scalings, spelled as
// `qconform synth` spells them), the power-of-two probe; and how prompts are read.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/paths.hpp"
#include "cli/run_manifest.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "model/model.hpp"
#include "model/tokenizer.hpp"

namespace qc::cli {

struct ModelRunArgs {
  std::string model, tokenizer, mode = "fp32", arm, act_quantizer = "vllm";
  // Mode w8a8-fp8 only; "" = not given (defaults: e4m3, per-token, and the checkpoint's weight
  // scaling for an FP8 checkpoint, else per-channel).
  std::string element, act_scale, weight_scale;
  bool pow2 = false;
};

// The files a model run reads, for check_output_paths: the model (and its files), the tokenizer,
// the verb's own input (`--prompts`, `--tokens`), a plugin arm.
inline std::vector<PathUse> model_run_inputs(const ModelRunArgs& run, PathUse input) {
  std::vector<PathUse> paths;
  add_model_inputs(paths, "--model", run.model);
  paths.push_back({"--tokenizer", run.tokenizer});
  paths.push_back(std::move(input));
  add_arm_inputs(paths, "--arm", run.arm);
  return paths;
}

inline void add_model_option(CLI::App& app, ModelRunArgs& a) {
  app.add_option("--model", a.model,
                 "llama2.c checkpoint (.bin, legacy or v1), or a directory: Hugging Face layout (config.json + "
                 "model.safetensors, fp32/bf16, or compressed-tensors W8A8: INT8 int-quantized or FP8 float-quantized, "
                 "or block-scaled FP8: Hugging Face quant_method fp8 with weight_block_size, compressed-tensors "
                 "strategy block), or model.bin (llama2.c)")
      ->required()
      ->check(CLI::ExistingPath);
}

// `with_mode` false: the verb has no fp32 mode (capture), and `--mode` chooses between w8a8 and w8a8-fp8.
inline void add_mode_options(CLI::App& app, ModelRunArgs& a, bool with_mode) {
  app.add_option("--mode", a.mode,
                 with_mode ? "fp32 (the unquantized reference), w8a8 (INT8 operands: every linear layer through --arm) or "
                             "w8a8-fp8 (FP8 operands: vLLM's dynamic FP8 activations, compressed-tensors FP8 weights, "
                             "through an FP8 --arm)"
                           : "w8a8 (default: INT8 operands) or w8a8-fp8 (FP8 operands: vLLM's dynamic FP8 activations, "
                             "compressed-tensors FP8 weights)");
  app.add_option("--arm", a.arm,
                 "the arm every linear layer runs through (`qconform arms` lists them): an INT8 arm in w8a8 (default "
                 "cpu:vllm-cutlass), an FP8 arm in w8a8-fp8 (default cpu:fp8-hopper-fp8-promote4, the model of "
                 "cuBLASLt's default FP8 path; e.g. cpu:fp8-hopper-fp8-chain, cuda:cublaslt-fp8[-fastacc])");
  app.add_option("--act-quantizer", a.act_quantizer,
                 "w8a8: per-token activation quantizer, vllm (default), sglang or reciprocal; w8a8-fp8: vllm only");
  app.add_option("--element", a.element,
                 "w8a8-fp8: element types, activations-weights: e4m3 (default), e5m2, e5m2-e4m3 or e4m3-e5m2 (as `qconform "
                 "synth --element`); an FP8 checkpoint's weights are e4m3");
  app.add_option("--act-scale", a.act_scale,
                 "w8a8-fp8: activation scales, per-token (default, vLLM's dynamic_per_token_scaled_fp8_quant) or per-tensor "
                 "(dynamic_scaled_fp8_quant: the scale then depends on the whole batch), or per-token-group:<g> "
                 "(block-scaled, vLLM's per_token_group_quant_fp8; default on a block-scaled checkpoint, with its K block)");
  app.add_option("--weight-scale", a.weight_scale,
                 "w8a8-fp8: weight scales, per-channel or per-tensor (compressed-tensors), or per-block:<rows>x<cols> "
                 "(block-scaled: DeepGEMM's per_block_cast_to_fp8, with a block-scaled arm, default cpu:fp8-block-triton); "
                 "default: an FP8 checkpoint's own, else per-channel");
  app.add_flag("--pow2", a.pow2,
               "w8a8, w8a8-fp8: round every weight scale to its nearest power of two (log2) before use: the probe, in memory");
}

struct ModelRun {
  LinearMode mode = LinearMode::fp32;
  W8a8Options options;  // the arm resolved (the mode's default when --arm is not given)
  LinearFn linear;
  std::string arm_label;  // "" in fp32 mode
  nlohmann::json header_extra = nlohmann::json::object();
  std::optional<W8a8Linear> w8a8;  // shares state with `linear` in w8a8 and w8a8-fp8 mode
};

// The W8A8 options of a run in `mode` (w8a8 or w8a8-fp8) from the flags and what the checkpoint
// stores; the flags of the other mode are input errors.
inline W8a8Options w8a8_options(const ModelRunArgs& a, LinearMode mode, const CheckpointTraits& checkpoint) {
  W8a8Options o;
  o.arm = a.arm;
  o.act_quantizer = a.act_quantizer;
  o.pow2 = a.pow2;
  if (mode != LinearMode::w8a8_fp8) {
    for (const auto& [flag, value] : {std::pair{"--element", &a.element}, std::pair{"--act-scale", &a.act_scale},
                                      std::pair{"--weight-scale", &a.weight_scale}}) {
      QC_INPUT(value->empty(), "{} `{}`: mode {} has no FP8 quantization; expected it only with --mode w8a8-fp8", flag,
               *value, to_string(mode));
    }
    return o;
  }
  o.fp8 = fp8_quantization(a.element, a.act_scale, a.weight_scale, checkpoint.weights);
  return o;
}

// Mode fp32 runs no arm and quantizes nothing: every quantization flag is an input error.
inline void check_fp32_args(const ModelRunArgs& a) {
  QC_INPUT(a.arm.empty(), "--arm `{}`: mode fp32 runs no arm (use --mode w8a8)", a.arm);
  QC_INPUT(!a.pow2, "--pow2: mode fp32 has no weight scales to round (use --mode w8a8)");
  QC_INPUT(a.act_quantizer == "vllm", "--act-quantizer `{}`: mode fp32 quantizes nothing (use --mode w8a8)",
           a.act_quantizer);
  (void)w8a8_options(a, LinearMode::fp32, {});  // refuses the FP8 flags
}

// Checks the mode options before a (possibly large) model is loaded: bad usage fails at once. Reads
// the model's config.json (not its weights) to refuse a checkpoint the mode cannot run.
inline void preflight(const ModelRunArgs& a) {
  const LinearMode mode = parse_linear_mode(a.mode);
  if (mode == LinearMode::fp32) return check_fp32_args(a);
  const CheckpointTraits checkpoint = peek_checkpoint(a.model);
  const W8a8Options o = w8a8_options(a, mode, checkpoint);
  W8a8Linear check(o);  // creates the arm, parses the quantizer, matches the arm to the mode
  check_checkpoint_takes_options(a.model, checkpoint.weights, checkpoint.qkv_bias, o);
}

// Validates the mode options (bad usage fails fast), then builds the LinearFn.
inline ModelRun make_model_run(const ModelRunArgs& a, const Model& model) {
  ModelRun r;
  r.mode = parse_linear_mode(a.mode);
  if (r.mode == LinearMode::fp32) {
    check_fp32_args(a);
    r.linear = fp32_linear;
    return r;
  }
  const WeightStorage stored = weight_storage(model);
  r.options = w8a8_options(a, r.mode, {stored, model.config.qkv_bias});
  r.options.weight_dtype = weight_scale_dtype_for(model.config);
  check_checkpoint_takes_options(model.source, stored, model.config.qkv_bias, r.options);
  r.w8a8.emplace(r.options);
  r.options = r.w8a8->options();  // with the arm resolved
  r.linear = *r.w8a8;
  r.arm_label = r.options.arm;
  if (!r.options.fp8) {
    r.header_extra = {{"act_quantizer", r.options.act_quantizer},
                      {"pow2", r.options.pow2},
                      {"weight_scales", !stored.quantized ? "quantized at load (absmax/127.5)" : "from the checkpoint"}};
    return r;
  }
  const Fp8Quantization& f = *r.options.fp8;
  r.header_extra = fp8_run_config(r.options);
  r.header_extra["pow2"] = r.options.pow2;
  r.header_extra["weight_scales"] = !stored.quantized ? fmt::format("quantized at load (absmax/{})", fp8_max(f.weight))
                                                      : "from the checkpoint";
  return r;
}

struct Prompt {
  nlohmann::json id;
  std::vector<int32_t> tokens;
};

// `--prompts`: a `.jsonl` file holds token ids ({"prompt": id, "tokens": [...]}, any model);
// any other file holds one text prompt per line (empty line = BOS only), encoded with the
// llama2.c tokenizer; no file = one empty prompt (BOS only).
inline std::vector<Prompt> read_prompts(const std::string& path, const Model& model, const Tokenizer* tok) {
  std::vector<Prompt> out;
  if (path.size() >= 6 && path.substr(path.size() - 6) == ".jsonl") {
    for (TokenSequence& s : read_token_sequences(path, model.config.vocab, 1)) out.push_back({s.prompt, std::move(s.tokens)});
    return out;
  }
  if (path.empty()) {
    if (tok) return {{0, tok->encode("", /*bos=*/true, /*eos=*/false)}};
    return {{0, {model.config.bos_id}}};
  }
  QC_INPUT(tok, "{}: text prompts need --tokenizer (or give token ids in a .jsonl file: {{\"prompt\": id, \"tokens\": "
           "[...]}} per line)", path);
  const std::string text = read_file(path);
  size_t start = 0;
  int64_t i = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back({i++, tok->encode(line, /*bos=*/true, /*eos=*/false)});
    start = end + 1;
  }
  QC_INPUT(!out.empty(), "{}: expected at least one prompt line, the file is empty", path);
  return out;
}

// The manifest of a model run (generate, replay): the model's files, the tokenizer and the verb's own
// input `input` (when given) as its inputs, the arm with the record of its last call (fp32: qconform's
// own reference), and `config`.
inline void write_model_run_manifest(const std::string& manifest, const std::string& out, std::string_view kind,
                                     const ModelRunArgs& a, const ModelRun& run,
                                     const std::pair<std::string, std::string>& input, nlohmann::json config) {
  auto inputs = model_inputs(a.model, a.tokenizer);
  if (!input.second.empty()) inputs.push_back(input);
  write_run_manifest(manifest, out, kind, run.arm_label.empty() ? "fp32" : run.arm_label,
                     run.w8a8 ? run.w8a8->last_record() : fp32_record(), inputs, std::move(config));
}

}  // namespace qc::cli
