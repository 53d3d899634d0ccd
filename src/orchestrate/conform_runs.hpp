// What `conform` runs of the model (conform.cpp): the model and its prompts, and the generate and
// replay runs through one arm with their records and manifests. Internal to src/orchestrate.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checks/c8_decoder.hpp"
#include "model/model.hpp"
#include "model/tokenizer.hpp"
#include "orchestrate/conform.hpp"
#include "qconform/arm.hpp"

namespace qc {

struct LoadedModel {
  Model model;
  std::string tokenizer_path, tokenizer_sha256;
  std::vector<TokenSequence> prompts;
  std::vector<std::pair<std::string, std::string>> inputs;  // role -> path, for every manifest
  std::string description;
  // Files conform makes of its own (the synthetic model's spec, default prompts), path -> content:
  // written into the output directory once every input was validated (nothing is created before).
  std::vector<std::pair<std::string, std::string>> generated;
  // Where the prompts came from, and a warning when a real model runs on random-token prompts
  // (results.json `prompts`; printed by conform and shown in the report's banner).
  std::string prompts_source, prompts_warning;
};

// The model (a file, or the built-in synthetic one) and its prompts; files conform makes of its own
// are listed in `generated` for `dir`, not written.
LoadedModel load_model_and_prompts(const ConformOptions& options, const std::string& dir);

// `fp8`: the pair is FP8 (both arms declare an accumulation model): mode w8a8-fp8.
W8a8Options w8a8_options(const ConformOptions& o, const Model& model, const std::string& arm, bool pow2, bool fp8);

struct RunFiles {
  std::string jsonl, manifest;
  RunRecord record;
  std::vector<std::vector<int32_t>> sequences;
};

// How the model runs beside its plain run (C8 end to end, c8_decoder.hpp): every linear layer's rows
// inside batches of `mates` synthetic rows more (cycling), or every linear layer as `tp_degree`
// tensor-parallel shards all-reduced by `reduction`; the per-layer differences from the plain layer
// counted in `stats`.
struct DecoderVariant {
  std::vector<int64_t> mates;
  // Mates from other prompts: the rows `prompts` holds (recorded by a plain run); `record`: this run
  // records its own rows into `prompts` and changes nothing else.
  std::shared_ptr<PromptRows> prompts;
  bool record = false;
  int tp_degree = 0;  // 0: no tensor parallelism
  std::string reduction = "ring";
  std::shared_ptr<BatchMateStats> stats = std::make_shared<BatchMateStats>();
  std::shared_ptr<TpDecoderCounts> unsharded = std::make_shared<TpDecoderCounts>();
};

// Greedy generation (verb "generate") or teacher-forced replay of `forced` (verb "replay"), as the
// `variant` says when one is given.
RunFiles run_model(const ConformOptions& o, const LoadedModel& lm, const std::string& dir, const std::string& arm,
                   const std::string& verb, bool pow2, bool fp8, const std::vector<std::vector<int32_t>>* forced,
                   const std::string& tag, const std::vector<std::pair<std::string, std::string>>& extra_inputs,
                   const DecoderVariant* variant = nullptr);

// Records without the header line (which names the arm and so always differs).
std::string records_body(const std::string& path);

}  // namespace qc
