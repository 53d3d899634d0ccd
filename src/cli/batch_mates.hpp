// `generate`/`replay --batch-mates`, `--tp-degree` (C8 end to end, docs/invariance.md): the decoder's
// LinearFn wrapped so that every call's rows run inside batches of synthetic mates and/or as
// tensor-parallel shards, and the per-layer printout.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "checks/c8_decoder.hpp"
#include "cli/cli.hpp"
#include "cli/lists.hpp"
#include "cli/model_run.hpp"
#include "dist/dist.hpp"

namespace qc::cli {

struct DecoderInvarianceArgs {
  std::string mates, reduction = "ring", mates_from = "synthetic";
  int degree = 0;  // 0: no tensor parallelism
};

struct DecoderInvariance {
  std::shared_ptr<BatchMateStats> mates = std::make_shared<BatchMateStats>();
  std::shared_ptr<BatchMateStats> tp = std::make_shared<BatchMateStats>();
  std::shared_ptr<TpDecoderCounts> unsharded = std::make_shared<TpDecoderCounts>();
  std::shared_ptr<PromptRows> prompts;  // --batch-mates-from prompts: the rows the items fed each layer
};

inline void add_decoder_invariance_options(CLI::App& app, DecoderInvarianceArgs& a) {
  app.add_option("--batch-mates", a.mates,
                 "C8 end to end: run every linear layer's rows inside a batch with this many synthetic rows more, "
                 "cycling through the list (e.g. 0,15,63,127); prints per layer the outputs that differ from the rows "
                 "run alone (docs/invariance.md)");
  app.add_option("--batch-mates-from", a.mates_from,
                 "with --batch-mates: synthetic (rows of the call's magnitude) or prompts (each prompt first runs alone "
                 "and records the rows it feeds each layer; a call's mates are then the rows the other prompts fed the "
                 "same layer)")
      ->capture_default_str()
      ->check(CLI::IsMember({"synthetic", "prompts"}));
  app.add_option("--tp-degree", a.degree,
                 "C8 end to end (w8a8 modes): every linear layer as this many tensor-parallel shards (o_proj, down_proj "
                 "split K and all-reduced, the others split N); prints per layer the outputs that differ from TP 1")
      ->check(non_negative_integer(a.degree));
  app.add_option("--tp-reduction", a.reduction,
                 "with --tp-degree: the all-reduce model, sequential, ring, ring:<chunk>, tree, +fp32")
      ->capture_default_str();
}

// `run.linear` itself without either option.
inline LinearFn decoder_linear(const ModelRun& run, const DecoderInvarianceArgs& a, DecoderInvariance& d) {
  LinearFn linear = run.linear;
  if (a.degree != 0) {
    QC_INPUT(run.mode != LinearMode::fp32, "--tp-degree: expected mode w8a8 or w8a8-fp8 (the shards' bf16 partials), "
                                           "found mode fp32");
    d.tp->title = fmt::format("tensor parallel {} ({})", a.degree, a.reduction);
    d.tp->baseline = "the layer run unsharded";
    linear = with_tensor_parallel(linear, a.degree, a.reduction, run.options, d.tp, d.unsharded);
  }
  if (!a.mates.empty() && a.mates_from == "prompts") d.prompts = std::make_shared<PromptRows>();
  if (!a.mates.empty()) linear = with_batch_mates(linear, parse_count_list("--batch-mates", a.mates), 0, d.mates, d.prompts);
  return linear;
}

// `--batch-mates-from prompts`: before the runs with mates, each of this rank's items runs once plain
// through a recorder (`item(decoder, i)`), so that a call's mates are the rows the other items fed the
// same layer; `mates_for(i)` then marks item i as the one running. Nothing without the option.
template <class Item>
void record_prompt_rows(const ModelRun& run, const Model& model, const DecoderInvariance& d,
                        const std::vector<size_t>& mine, Item&& item) {
  if (!d.prompts) return;
  Decoder plain(model, with_row_recorder(run.linear, d.prompts));
  for (size_t i : mine) {
    d.prompts->current = static_cast<int64_t>(i);
    plain.reset();
    item(plain, i);
  }
}
inline void mates_for(const DecoderInvariance& d, size_t i) {
  if (d.prompts) d.prompts->current = static_cast<int64_t>(i);
}

inline void print_decoder_invariance(const DecoderInvarianceArgs& a, DecoderInvariance& d, const char* items) {
  if (a.degree != 0) {
    fmt::print("{}", d.tp->describe());
    std::lock_guard lock(d.unsharded->mu);
    for (const auto& [layer, why] : d.unsharded->unsharded) fmt::print("  {} ran unsharded: {}\n", layer, why);
  }
  if (!a.mates.empty()) fmt::print("{}", d.mates->describe());
  if (d.prompts) {
    fmt::print("  mates: {} rows other prompts fed the same layer, {} synthetic (a layer no other prompt reached)\n",
               d.prompts->from_prompts.load(), d.prompts->synthetic.load());
  }
  if ((a.degree != 0 || !a.mates.empty()) && dist::world().size > 1) {
    fmt::print("  (rank 0's {} only: the per-layer counts are not gathered over ranks)\n", items);
  }
}

}  // namespace qc::cli
