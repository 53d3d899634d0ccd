// The document `qconform verify --json` writes and `qconform.verify()` returns: one builder for
// the CLI (src/cli/verb_verify.cpp) and the Python binding (python/src/ext_checks.cpp), so the
// two cannot drift. Layout: docs/results-schema.md (`verify`), kind `qconform-verify`.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "checks/verify.hpp"

namespace qc {

// Where the operands and the predictions of a verify run came from.
struct VerifyInputs {
  std::string operands_path, operands_sha256;
  std::string predictions_path;    // "" when the predictions were computed in the run
  std::string predictions_sha256;  // `sha256:<hex>` of the predictions file, "" when computed
  bool predictions_pinned = false;  // true when a predictions file was given (`--predictions`)
};

// `to_json(result)` in the results envelope (`results_envelope("verify")`), with `operands` and
// `predictions` as given.
nlohmann::json verify_results_json(const VerifyResult& result, const VerifyInputs& inputs);
// `verify_results_json(result, inputs)` with the members of `extra` added, as the text of `dump(1)`
// (to_json_text): what `verify --json` writes.
std::string verify_results_text(const VerifyResult& result, const VerifyInputs& inputs,
                                const nlohmann::json& extra = nlohmann::json::object());

// The ranks' phase seconds (`rank_info[r]["seconds"]`: [phase, seconds] pairs, ranks without it
// skipped) added into `result.seconds` phase by phase: the CPU-side seconds of the whole job.
void add_rank_seconds(VerifyResult& result, const std::vector<nlohmann::json>& rank_info);

}  // namespace qc
