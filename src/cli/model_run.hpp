// Options shared by the model verbs (`generate`, `replay`, `capture`): which model, which mode, which
// arm, which activation quantizer, the power-of-two probe; and how prompts are read.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/paths.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "model/model.hpp"
#include "model/tokenizer.hpp"

namespace qc::cli {

struct ModelRunArgs {
  std::string model, tokenizer, mode = "fp32", arm, act_quantizer = "vllm";
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
                 "model.safetensors, fp32/bf16, or compressed-tensors W8A8), or model.bin (llama2.c)")
      ->required()
      ->check(CLI::ExistingPath);
}

inline void add_mode_options(CLI::App& app, ModelRunArgs& a, bool with_mode) {
  if (with_mode) app.add_option("--mode", a.mode, "fp32 (the unquantized reference) or w8a8 (every linear layer through --arm)");
  app.add_option("--arm", a.arm, "w8a8: the arm every linear layer runs through (default cpu:vllm-cutlass; `qconform arms` lists them)");
  app.add_option("--act-quantizer", a.act_quantizer, "w8a8: per-token activation quantizer, vllm (default), sglang or reciprocal");
  app.add_flag("--pow2", a.pow2, "w8a8: round every weight scale to its nearest power of two (log2) before use: the probe, in memory");
}

struct ModelRun {
  LinearMode mode = LinearMode::fp32;
  W8a8Options options;
  LinearFn linear;
  std::string arm_label;  // "" in fp32 mode
  nlohmann::json header_extra = nlohmann::json::object();
  std::optional<W8a8Linear> w8a8;  // shares state with `linear` in w8a8 mode
};

// Checks the mode options before a (possibly large) model is loaded: bad usage fails at once.
inline void preflight(const ModelRunArgs& a) {
  if (parse_linear_mode(a.mode) == LinearMode::w8a8) {
    W8a8Options o;
    if (!a.arm.empty()) o.arm = a.arm;
    o.act_quantizer = a.act_quantizer;
    W8a8Linear check(o);  // creates the arm and parses the quantizer
  }
}

// Validates the mode options (bad usage fails fast), then builds the LinearFn.
inline ModelRun make_model_run(const ModelRunArgs& a, const Model& model) {
  ModelRun r;
  r.mode = parse_linear_mode(a.mode);
  if (r.mode == LinearMode::fp32) {
    QC_INPUT(a.arm.empty(), "--arm `{}`: mode fp32 runs no arm (use --mode w8a8)", a.arm);
    QC_INPUT(!a.pow2, "--pow2: mode fp32 has no weight scales to round (use --mode w8a8)");
    QC_INPUT(a.act_quantizer == "vllm", "--act-quantizer `{}`: mode fp32 quantizes nothing (use --mode w8a8)",
             a.act_quantizer);
    r.linear = fp32_linear;
    return r;
  }
  if (!a.arm.empty()) r.options.arm = a.arm;
  r.options.act_quantizer = a.act_quantizer;
  r.options.pow2 = a.pow2;
  r.options.weight_dtype = weight_scale_dtype_for(model.config);
  r.w8a8.emplace(r.options);
  r.linear = *r.w8a8;
  r.arm_label = r.options.arm;
  r.header_extra = {{"act_quantizer", r.options.act_quantizer},
                    {"pow2", r.options.pow2},
                    {"weight_scales", model.layers.empty() || !model.layers[0].q.quantized() ? "quantized at load (absmax/127.5)"
                                                                                            : "from the checkpoint"}};
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

}  // namespace qc::cli
