// Token transfer (check C7): from two arms' per-position JSONL records to sequence-level
// agreement (free-running generations) or to teacher-forced flips and their dependence on the
// reference arm's logit margin (`--replay`). Estimators: src/stats/stats.hpp; definitions,
// seeds and what is claimed: docs/statistics.md.
//
// JSONL record (one object per line, one line per position):
//   {"prompt": <string|int>, "position": <int>, "token": <int>, "top1_id": <int>,
//    "top1_logit": <float>, "top2_id": <int>, "top2_logit": <float>, "margin": <float>?}
// `top1_logprob`/`top2_logprob` may replace the logits (the margin is shift invariant). Objects
// with `"kind": "header"` before the first record are kept as manifest information (`arm`,
// `model`, `mode` = "generate" | "replay"). Any malformed line is a `qc::Error` of kind input
// whose message starts with "<file>:<line>:".
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "stats/stats.hpp"

namespace qc::transfer {

struct PositionRecord {
  std::size_t prompt = 0;  // index into `TransferFile::prompts`
  std::int64_t position = 0, token = 0, top1_id = 0, top2_id = 0;
  double top1 = 0, top2 = 0;  // logits or log-probabilities, as the file gave them
  double margin = 0;          // the file's `margin` when present, else top1 − top2 (fp64)
  std::size_t line = 0;       // 1-based line in the file
};

struct TransferFile {
  std::string path;
  std::vector<nlohmann::json> headers;
  std::string mode;                  // the headers' `mode`, "" when no header gives one
  std::vector<std::string> prompts;  // distinct prompt ids as JSON text (`"abc"` or `17`), first-appearance order
  std::vector<PositionRecord> records;  // in file order
  std::string values;                   // "logits", "logprobs" or "mixed"
};

// Parses and validates one JSONL stream; `name` is the file name used in error messages.
TransferFile parse_transfer_jsonl(std::istream& in, const std::string& name);
TransferFile read_transfer_jsonl(const std::string& path);

// Input error when the headers of `a` and `b` record different model digests (`model_sha256`).
void check_same_model(const TransferFile& a, const TransferFile& b);

struct TransferOptions {
  bool replay = false;
  std::uint64_t seed = 20240607;  // bootstrap uses `seed`, the fold permutation `seed + 1`
  std::size_t bootstrap = 2000;   // cluster bootstrap resamples
  std::size_t min_bin_support = 50;
  std::size_t initial_bins = 10;  // quantile bins before merging
  std::size_t folds = 5;          // cross-validation folds over prompts
  double ci_level = 0.95;
};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct SequenceRow {
  std::string prompt;
  std::size_t len_a = 0, len_b = 0;
  bool identical = false;
  std::optional<std::int64_t> first_divergence_position;  // absent when identical
  std::size_t tokens_until_divergence = 0;                // equal tokens before the first divergence
};

struct SequenceResult {
  std::size_t n_prompts = 0, n_identical = 0;
  double mean_tokens_until_divergence = kNaN;  // over the prompts that diverge
  std::vector<SequenceRow> rows;
};

struct CalibrationBin {
  double lo = 0, hi = 0;        // bin edges (lo inclusive, hi exclusive; ±inf at the ends)
  double x_min = 0, x_max = 0;  // observed margin range in the bin
  std::size_t support = 0, flips = 0;
  double rate = 0;                    // flips / support
  double p = 0, p_lo = 0, p_hi = 0;  // (flips+1)/(support+2) and the Beta posterior interval
};

struct IsotonicBlock {
  double x_lo = 0, x_hi = 0;  // margin range of the block (observed values)
  double p = 0;               // fitted flip probability
  double weight = 0;          // positions in the block
};

struct BrierResult {
  bool computed = false;  // false when fewer than two prompts (or folds < 2)
  std::size_t folds = 0, n_heldout = 0;
  std::uint64_t seed = 0;
  double model = kNaN, baseline = kNaN, isotonic = kNaN;
  double skill = kNaN;  // 1 − model / baseline
  std::vector<std::size_t> fold_of_prompt;  // per prompt, in `ReplayResult::prompts` order
};

struct PromptReplayRow {
  std::string prompt;
  std::size_t n_positions = 0, n_flips = 0;
  std::optional<std::int64_t> first_flip_position;
  double lopo_delta_auc = kNaN;  // AUC without this prompt minus the full AUC
};

struct ReplayResult {
  std::size_t n_prompts = 0, n_positions = 0, n_flips = 0;
  double flip_rate = kNaN;
  double auc = kNaN;  // score = −margin of A: small margin predicts a flip
  stats::BootstrapCI auc_ci;
  double ap = kNaN;
  double lopo_max_abs_delta = kNaN;
  std::string lopo_prompt;  // the prompt whose removal moves the AUC most
  std::vector<CalibrationBin> calibration;
  std::vector<IsotonicBlock> isotonic;
  BrierResult brier;
  std::vector<PromptReplayRow> prompts;
};

struct TransferResult {
  std::string path_a, path_b;
  nlohmann::json headers_a, headers_b;  // arrays of header objects
  std::string values_a, values_b;
  std::size_t records_a = 0, records_b = 0;
  TransferOptions options;
  std::optional<SequenceResult> sequence;  // default mode
  std::optional<ReplayResult> replay;      // `options.replay`
};

// A is the reference arm. Throws `qc::Error` (input) when the files do not pair up: different
// prompt sets; in replay mode different positions or forced tokens; in generate mode
// non-contiguous positions or different starting positions; a header `mode` contradicting
// `options.replay`.
TransferResult analyze_transfer(const TransferFile& a, const TransferFile& b, const TransferOptions& options);

// Results JSON (kind `qconform-transfer`, docs/results-schema.md); NaN becomes null.
nlohmann::json to_json(const TransferResult& result);

// The human-readable summary printed by `qconform transfer`.
std::string summary(const TransferResult& result);

}  // namespace qc::transfer
