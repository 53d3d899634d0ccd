// `qconform capture`: the operands every linear layer's arm received in a w8a8 or w8a8-fp8 model run
// (prefill of each prompt, rows of all prompts concatenated per layer), written as an operand file
// that `qconform predict` and `qconform verify` read (FP8 runs: F8_E4M3 / F8_E5M2 codes, for
// `verify` with two FP8 arms).
#include <fmt/format.h>

#include <memory>

#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "cli/distributed.hpp"
#include "cli/lists.hpp"
#include "cli/model_run.hpp"
#include "cli/run_manifest.hpp"
#include "qconform/error.hpp"
#include "model/model.hpp"
#include "core/operands_io.hpp"
#include "core/sha256.hpp"
#include "model/tokenizer.hpp"

namespace qc::cli {
namespace {

struct CaptureArgs {
  ModelRunArgs run;
  std::string prompts, out, manifest;
  int64_t max_tokens = 0;
  std::string shard_size;  // --shard-size: write a sharded set
};

VerbRunner setup_capture(CLI::App& app) {
  auto a = std::make_shared<CaptureArgs>();
  a->run.mode = "w8a8";
  add_model_option(app, a->run);
  app.add_option("--tokenizer", a->run.tokenizer, "llama2.c tokenizer (.bin), for text prompts")->check(CLI::ExistingFile);
  app.add_option("--prompts", a->prompts,
                 "text file, one prompt per line, or a .jsonl of token ids {\"prompt\": id, \"tokens\": [...]}")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--max-tokens", a->max_tokens, "keep only the first N tokens of each prompt (default: all)")
      ->check(positive_integer(a->max_tokens));
  app.add_option("--out", a->out, "operand file to write (safetensors, atomically; with --shard-size, NAME.index.json)")
      ->required();
  add_shard_size_option(app, a->shard_size);
  add_mode_options(app, a->run, /*with_mode=*/false);
  add_manifest_option(app, a->manifest);
  return [a] {
    const std::vector<PathUse> paths_in = model_run_inputs(a->run, {"--prompts", a->prompts});
    check_output_paths(paths_in, {{"--out", a->out}, {"--manifest", manifest_path(a->manifest, a->out)}});
    QC_INPUT(parse_linear_mode(a->run.mode) != LinearMode::fp32,
             "--mode fp32: capture records the operands of quantized linear layers; expected w8a8 or w8a8-fp8");
    preflight(a->run);
    const Model model = load_model(a->run.model);
    std::optional<Tokenizer> tok;
    if (!a->run.tokenizer.empty()) tok = Tokenizer::load_llama2c(a->run.tokenizer, model.config.vocab);
    std::vector<std::vector<int32_t>> prompts;
    for (Prompt& p : read_prompts(a->prompts, model, tok ? &*tok : nullptr)) {
      if (a->max_tokens > 0 && static_cast<int64_t>(p.tokens.size()) > a->max_tokens) p.tokens.resize(a->max_tokens);
      prompts.push_back(std::move(p.tokens));
    }
    const ModelRun run = make_model_run(a->run, model);
    const CaptureResult c = capture_operands(model, run.options, prompts);
    int64_t rows = 0;
    for (int64_t r : c.rows_per_prompt) rows += r;
    std::map<std::string, std::string> meta = {
        {"source", "qconform capture"},
        {"model", model.source},
        {"model_sha256", model.sha256},
        {"arm", run.options.arm},
        {"arm_kernel", c.record.kernel},
        {"act_quantizer", run.options.act_quantizer},
        {"pow2", run.options.pow2 ? "true" : "false"},
        {"prompts", a->prompts},
        {"prompts_sha256", sha256_file(a->prompts)},
        {"rows_per_prompt", fmt::format("{}", fmt::join(c.rows_per_prompt, ","))},
        {"rows", "prefill rows of every prompt, concatenated per layer in prompt order"},
    };
    nlohmann::json config = {{"act_quantizer", run.options.act_quantizer}, {"pow2", run.options.pow2},
                             {"max_tokens", a->max_tokens}};
    if (run.options.fp8) {  // INT8 captures keep the metadata and manifest they had before FP8 existed
      const nlohmann::json fp8 = fp8_run_config(run.options);  // named: items() of a temporary would dangle
      for (const auto& [key, value] : fp8.items()) {
        meta[key] = value.get<std::string>();
        config[key] = value;
      }
      meta["mode"] = std::string(to_string(run.mode));
      config["mode"] = to_string(run.mode);
    }
    if (a->shard_size.empty()) {
      save_operands(a->out, c.layers, meta);
    } else {
      ShardedOperandWriter writer(a->out, meta, parse_byte_size("--shard-size", a->shard_size));
      for (const LayerOperands& l : c.layers) writer.add(l);
      writer.finish();
    }
    auto inputs = model_inputs(a->run.model, a->run.tokenizer);
    inputs.emplace_back("prompts", a->prompts);
    inputs.emplace_back("operands", a->out);
    write_run_manifest(a->manifest, a->out, "capture", run.options.arm, c.record, inputs, config);
    const std::string quantizer =
        run.options.fp8 ? fmt::format("mode w8a8-fp8, element {}, act scale {}, weight scale {}",
                                      config["element"].get<std::string>(), config["act_scale"].get<std::string>(),
                                      config["weight_scale"].get<std::string>())
                        : fmt::format("act quantizer {}", run.options.act_quantizer);
    fmt::print("capture: {} layers, {} rows each ({} prompts), arm {}, {}{}; wrote {} ({})\n", c.layers.size(), rows,
               prompts.size(), run.options.arm, quantizer, run.options.pow2 ? ", pow2 weight scales" : "", a->out,
               sha256_file(a->out));
    return kExitOk;
  };
}

RegisterVerb register_capture{
    {"capture", "Capture every linear layer's quantized operands of a w8a8 or w8a8-fp8 model run (input of predict/verify)", 98,
     setup_capture}};

}  // namespace
}  // namespace qc::cli
