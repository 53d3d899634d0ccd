// `qconform replay`: teacher forcing. One prefill pass per sequence scores every position; one
// JSONL record per position with the forced next token (the input of `qconform transfer --replay`).
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

struct ReplayArgs {
  ModelRunArgs run;
  std::string tokens, out, manifest;
  DecoderInvarianceArgs invariance;
  bool gpu_per_rank = false;
};

VerbRunner setup_replay(CLI::App& app) {
  auto a = std::make_shared<ReplayArgs>();
  add_model_option(app, a->run);
  app.add_option("--tokenizer", a->run.tokenizer, "llama2.c tokenizer (.bin): checked against the model and recorded")
      ->check(CLI::ExistingFile);
  app.add_option("--tokens", a->tokens, "JSONL, one {\"prompt\": id, \"tokens\": [ids...]} per line")
      ->required()->check(CLI::ExistingFile);
  app.add_option("--out", a->out, "write the per-position JSONL records here (atomically)")->required();
  add_mode_options(app, a->run, /*with_mode=*/true);
  add_decoder_invariance_options(app, a->invariance);
  add_manifest_option(app, a->manifest);
  add_gpu_per_rank_option(app, a->gpu_per_rank);
  return [a] {
    const std::vector<PathUse> paths_in = model_run_inputs(a->run, {"--tokens", a->tokens});
    check_output_paths(paths_in, {{"--out", a->out}, {"--manifest", manifest_path(a->manifest, a->out)}});
    if (a->gpu_per_rank) use_gpu_of_local_rank();
    preflight(a->run);
    const Model model = load_model(a->run.model);
    std::string tok_sha;
    if (!a->run.tokenizer.empty()) tok_sha = Tokenizer::load_llama2c(a->run.tokenizer, model.config.vocab).sha256;
    const std::vector<TokenSequence> seqs = read_token_sequences(a->tokens, model.config.vocab, 2);
    const ModelRun run = make_model_run(a->run, model);
    DecoderInvariance invariance;
    const LinearFn linear = decoder_linear(run, a->invariance, invariance);
    Decoder decoder(model, linear);
    nlohmann::json extra = run.header_extra;
    extra["tokens"] = a->tokens;
    if (!a->invariance.mates.empty()) extra["batch_mates"] = a->invariance.mates;
    if (invariance.prompts) extra["batch_mates_from"] = "other prompts";
    if (a->invariance.degree != 0) {
      extra["tp"] = {{"degree", a->invariance.degree}, {"reduction", a->invariance.reduction}};
    }
    std::string jsonl = format_header("replay", run.mode, run.arm_label, model, a->run.tokenizer, tok_sha, extra) + "\n";
    int64_t positions = 0, agree = 0;
    const auto t0 = std::chrono::steady_clock::now();
    // Under MPI the sequences are shared over the ranks by length; rank 0 merges them in order.
    std::vector<size_t> items;
    std::vector<double> cost;
    for (size_t i = 0; i < seqs.size(); ++i) items.push_back(i), cost.push_back(static_cast<double>(seqs[i].tokens.size()));
    const dist::Shared shared = dist::run_shared(items, cost, [&](const std::vector<size_t>& mine, dist::Outcome& out,
                                                                   std::string& in_progress) {
      record_prompt_rows(run, model, invariance, mine, [&](Decoder& plain, size_t i) {
        in_progress = fmt::format("sequence {} (alone, recording its rows as mates)", i);
        (void)replay(plain, seqs[i].tokens, seqs[i].prompt);
      });
      for (size_t i : mine) {
        in_progress = fmt::format("sequence {} (prompt {})", i, seqs[i].prompt.dump());
        mates_for(invariance, i);
        std::string lines;
        int64_t n = 0, same = 0;
        for (const PositionRecord& r : replay(decoder, seqs[i].tokens, seqs[i].prompt)) {
          lines += format_record(r) + "\n";
          ++n;
          same += r.top1_id == r.token;
        }
        out.results[i] = {{"jsonl", std::move(lines)}, {"positions", n}, {"agree", same}};
      }
    });
    if (!dist::world().root()) return kExitOk;
    for (const auto& [i, r] : shared.results) {
      jsonl += r.at("jsonl").get<std::string>();
      positions += r.at("positions").get<int64_t>();
      agree += r.at("agree").get<int64_t>();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_file_atomic(a->out, jsonl);
    write_model_run_manifest(a->manifest, a->out, "replay", a->run, run, {"tokens", a->tokens},
                             {{"mode", to_string(run.mode)}, {"header", extra}});
    print_decoder_invariance(a->invariance, invariance, "sequences");
    fmt::print("replay: {} sequences, {} positions, top-1 = forced token at {} ({:.1f}%), {:.3f} s; wrote {}\n",
               seqs.size(), positions, agree, 100.0 * agree / std::max<int64_t>(positions, 1), seconds, a->out);
    return kExitOk;
  };
}

RegisterVerb register_replay{
    {"replay", "Teacher-forced replay: one prefill pass scores every position of given token sequences", 105,
     setup_replay}};

}  // namespace
}  // namespace qc::cli
