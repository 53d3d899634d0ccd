// `qconform generate`: greedy decoding with the KV cache, one JSONL record per generated token
// (the input of `qconform transfer`), the decoded text on stdout.
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "cli/cli.hpp"
#include "cli/batch_mates.hpp"
#include "cli/paths.hpp"
#include "cli/distributed.hpp"
#include "cli/model_run.hpp"
#include "cli/run_manifest.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "model/model.hpp"
#include "model/tokenizer.hpp"

namespace qc::cli {
namespace {

struct GenerateArgs {
  ModelRunArgs run;
  std::string prompts, out, tokens_out, manifest;
  DecoderInvarianceArgs invariance;
  int64_t max_new = 256;
  bool compare = false;
  bool gpu_per_rank = false;
};

// One prompt generated greedily: its printed text, records, token sequence and timing (and the
// prefill/decode comparison with --compare-prefill-decode), as rank 0 merges them.
nlohmann::json generate_one(Decoder& decoder, const Prompt& p, int64_t max_new, const Tokenizer* tok, bool compare) {
  const auto t0 = std::chrono::steady_clock::now();
  const GenerateResult g = generate_greedy(decoder, p.tokens, max_new, p.id);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string text = tok ? fmt::format("[prompt {}] {}\n", p.id.dump(), tok->decode(g.tokens))
                         : fmt::format("[prompt {}] {}\n", p.id.dump(), fmt::join(g.tokens, " "));
  std::string lines;
  for (const PositionRecord& r : g.records) lines += format_record(r) + "\n";
  nlohmann::json result = {{"text", std::move(text)},
                           {"jsonl", std::move(lines)},
                           {"tokens", nlohmann::json{{"prompt", p.id}, {"tokens", g.tokens}}.dump() + "\n"},
                           {"generated", g.records.size()},
                           {"seconds", sec}};
  if (compare) {
    const PrefillDecodeComparison c = compare_prefill_decode(decoder, g);
    result["compare"] = {{"positions", c.positions}, {"top1_disagreements", c.top1_disagreements},
                         {"bitwise_different", c.bitwise_different}, {"max_abs_diff", c.max_abs_diff},
                         {"disagreeing_positions", c.disagreeing_positions}};
  }
  return result;
}

VerbRunner setup_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  add_model_option(app, a->run);
  app.add_option("--tokenizer", a->run.tokenizer, "llama2.c tokenizer (.bin): needed for text prompts and to print text")
      ->check(CLI::ExistingFile);
  app.add_option("--prompts", a->prompts,
                 "text file, one prompt per line (empty line = start from BOS), or a .jsonl of token ids "
                 "{\"prompt\": id, \"tokens\": [...]}; default: one empty prompt")
      ->check(CLI::ExistingFile);
  app.add_option("--max-new", a->max_new, "maximum generated tokens per prompt")->check(positive_integer(a->max_new));
  app.add_option("--out", a->out, "write the per-position JSONL records here (atomically)");
  add_manifest_option(app, a->manifest);
  add_gpu_per_rank_option(app, a->gpu_per_rank);
  app.add_option("--tokens-out", a->tokens_out, "write each full sequence as {\"prompt\": id, \"tokens\": [...]} (input of `replay --tokens`)");
  add_mode_options(app, a->run, /*with_mode=*/true);
  add_decoder_invariance_options(app, a->invariance);
  app.add_flag("--compare-prefill-decode", a->compare,
               "re-score each generated sequence with one prefill pass; report where prefill and decode disagree");
  return [a] {
    const std::vector<PathUse> paths_in = model_run_inputs(a->run, {"--prompts", a->prompts});
    check_output_paths(paths_in, {{"--out", a->out},
                                {"--tokens-out", a->tokens_out},
                                {"--manifest", manifest_path(a->manifest, a->out)}});
    if (a->gpu_per_rank) use_gpu_of_local_rank();
    preflight(a->run);
    const Model model = load_model(a->run.model);
    std::optional<Tokenizer> tok;
    if (!a->run.tokenizer.empty()) tok = Tokenizer::load_llama2c(a->run.tokenizer, model.config.vocab);
    const std::vector<Prompt> prompts = read_prompts(a->prompts, model, tok ? &*tok : nullptr);
    const ModelRun run = make_model_run(a->run, model);
    DecoderInvariance invariance;
    const LinearFn linear = decoder_linear(run, a->invariance, invariance);
    Decoder decoder(model, linear);

    nlohmann::json extra = run.header_extra;
    extra["prompts"] = a->prompts;
    extra["max_new"] = a->max_new;
    if (!a->invariance.mates.empty()) extra["batch_mates"] = a->invariance.mates;
    if (invariance.prompts) extra["batch_mates_from"] = "other prompts";
    if (a->invariance.degree != 0) {
      extra["tp"] = {{"degree", a->invariance.degree}, {"reduction", a->invariance.reduction}};
    }
    std::string jsonl = format_header("generate", run.mode, run.arm_label, model, tok ? tok->source : "",
                                      tok ? tok->sha256 : "", extra) + "\n";
    std::string tokens_jsonl;
    int64_t generated = 0;
    double seconds = 0;
    PrefillDecodeComparison total;
    // Under MPI the prompts are shared over the ranks; rank 0 prints and writes them in prompt order.
    std::vector<size_t> items;
    std::vector<double> cost;
    for (size_t i = 0; i < prompts.size(); ++i) {
      items.push_back(i);
      cost.push_back(static_cast<double>(prompts[i].tokens.size() + static_cast<size_t>(a->max_new)));
    }
    const dist::Shared shared = dist::run_shared(items, cost, [&](const std::vector<size_t>& mine, dist::Outcome& out,
                                                                   std::string& in_progress) {
      record_prompt_rows(run, model, invariance, mine, [&](Decoder& plain, size_t i) {
        in_progress = fmt::format("prompt {} (alone, recording its rows as mates)", prompts[i].id.dump());
        (void)generate_greedy(plain, prompts[i].tokens, a->max_new, prompts[i].id);
      });
      for (size_t i : mine) {
        const Prompt& p = prompts[i];
        in_progress = fmt::format("prompt {}", p.id.dump());
        mates_for(invariance, i);
        out.results[i] = generate_one(decoder, p, a->max_new, tok ? &*tok : nullptr, a->compare);
      }
    });
    if (!dist::world().root()) return kExitOk;
    for (const auto& [i, r] : shared.results) {
      fmt::print("{}", r.at("text").get<std::string>());
      generated += r.at("generated").get<int64_t>();
      seconds += r.at("seconds").get<double>();
      jsonl += r.at("jsonl").get<std::string>();
      tokens_jsonl += r.at("tokens").get<std::string>();
      if (a->compare) {
        const nlohmann::json& c = r.at("compare");
        total.positions += c.at("positions").get<int64_t>();
        total.top1_disagreements += c.at("top1_disagreements").get<int64_t>();
        total.bitwise_different += c.at("bitwise_different").get<int64_t>();
        total.max_abs_diff = std::max(total.max_abs_diff, c.at("max_abs_diff").get<double>());
        if (c.at("top1_disagreements").get<int64_t>() > 0) {
          fmt::print("  prompt {}: prefill and decode top-1 disagree at positions {}\n", prompts[i].id.dump(),
                     fmt::join(c.at("disagreeing_positions").get<std::vector<int64_t>>(), ", "));
        }
      }
    }
    fmt::print(stderr, "generate: {} prompts, {} tokens in {:.3f} s ({:.1f} tokens/s, mode {}{})\n", prompts.size(),
               generated, seconds, seconds > 0 ? generated / seconds : 0.0, to_string(run.mode),
               run.arm_label.empty() ? "" : fmt::format(", arm {}{}", run.arm_label, a->run.pow2 ? ", pow2" : ""));
    if (a->compare) {
      fmt::print("prefill vs decode: {} positions, {} top-1 disagreements, max |logit difference| {:.9g}, {} of {} "
                 "logits differ bitwise\n",
                 total.positions, total.top1_disagreements, total.max_abs_diff, total.bitwise_different,
                 total.positions * model.config.vocab);
    }
    print_decoder_invariance(a->invariance, invariance, "prompts");
    if (!a->out.empty()) write_file_atomic(a->out, jsonl);
    if (!a->tokens_out.empty()) write_file_atomic(a->tokens_out, tokens_jsonl);
    write_model_run_manifest(a->manifest, a->out, "generate", a->run, run, {"prompts", a->prompts},
                             {{"mode", to_string(run.mode)}, {"max_new", a->max_new}, {"header", extra}});
    return kExitOk;
  };
}

RegisterVerb register_generate{
    {"generate", "Greedy generation with the KV cache: one JSONL record per token (top-1/top-2 logits, margin)", 100,
     setup_generate}};

}  // namespace
}  // namespace qc::cli
