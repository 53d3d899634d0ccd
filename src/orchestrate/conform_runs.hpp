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

// Every linear layer's rows inside batches of `mates` synthetic rows more (c8_decoder.hpp), the per-layer
// differences from the rows alone counted in `stats`.
struct BatchMatesRun {
  std::vector<int64_t> mates;
  std::shared_ptr<BatchMateStats> stats;
};

// Greedy generation (verb "generate") or teacher-forced replay of `forced` (verb "replay"), with batch
// mates when `mates` is given.
RunFiles run_model(const ConformOptions& o, const LoadedModel& lm, const std::string& dir, const std::string& arm,
                   const std::string& verb, bool pow2, bool fp8, const std::vector<std::vector<int32_t>>* forced,
                   const std::string& tag, const std::vector<std::pair<std::string, std::string>>& extra_inputs,
                   const BatchMatesRun* mates = nullptr);

// Records without the header line (which names the arm and so always differs).
std::string records_body(const std::string& path);

}  // namespace qc
