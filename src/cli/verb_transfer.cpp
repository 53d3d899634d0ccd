// `qconform transfer A.jsonl B.jsonl [--replay]`: check C7, from layer differences to tokens.
// A is the reference arm. Without --replay: sequence-level agreement of free-running
// generations; with --replay: teacher-forced flips versus A's logit margin (ROC-AUC with a
// cluster bootstrap CI, AP, leave-one-prompt-out, calibration, isotonic, held-out Brier).
// Estimators and seeds: docs/statistics.md.
#include <fmt/format.h>

#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "stats/transfer.hpp"

namespace qc::cli {
namespace {

VerbRunner setup_transfer(CLI::App& app) {
  struct Args {
    std::string a, b, json;
    transfer::TransferOptions opt;
  };
  auto args = std::make_shared<Args>();
  app.add_option("A", args->a, "reference arm's JSONL (one record per position)")->required()->check(CLI::ExistingFile);
  app.add_option("B", args->b, "compared arm's JSONL")->required()->check(CLI::ExistingFile);
  app.add_flag("--replay", args->opt.replay,
               "teacher-forced mode: both files score the same forced tokens at the same positions");
  app.add_option("--json", args->json, "write the results JSON (schema_version 1) to this file, atomically");
  add_non_negative_option(app, "--seed", args->opt.seed, "seed: the bootstrap uses it, the fold permutation seed+1");
  add_positive_option(app, "--bootstrap", args->opt.bootstrap, "cluster bootstrap resamples (prompts are the clusters)");
  add_positive_option(app, "--min-bin-support", args->opt.min_bin_support, "minimum positions per calibration bin");
  add_positive_option(app, "--bins", args->opt.initial_bins, "quantile bins before merging");
  add_positive_option(app, "--folds", args->opt.folds, "cross-validation folds over prompts for the held-out Brier score");
  app.add_option("--ci-level", args->opt.ci_level, "bootstrap and Beta interval level")
      ->capture_default_str()
      ->check(finite_in(0.5, 0.999999));
  return [args] {
    check_output_paths({{"A", args->a}, {"B", args->b}}, {{"--json", args->json}});
    const transfer::TransferFile a = transfer::read_transfer_jsonl(args->a);
    const transfer::TransferFile b = transfer::read_transfer_jsonl(args->b);
    const transfer::TransferResult result = transfer::analyze_transfer(a, b, args->opt);
    fmt::print("{}", transfer::summary(result));
    if (!args->json.empty()) {
      write_file_atomic(args->json, transfer::to_json(result).dump(2) + "\n");
      fmt::print("results: {}\n", args->json);
    }
    return kExitOk;
  };
}

RegisterVerb register_transfer{
    {"transfer", "C7 token transfer: sequence agreement, or teacher-forced flips versus the logit margin (--replay)", 120,
     setup_transfer}};

}  // namespace
}  // namespace qc::cli
