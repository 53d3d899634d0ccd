// C2, range prediction, at verify time (c2_range.hpp).
#include "checks/c2_range.hpp"
#include "checks/layer_checks.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "qconform/numerics.hpp"

namespace qc {

std::string c2_stale_prediction(const std::string& layer, const LayerPrediction& pinned, const RangeStats& fresh) {
  const bool fresh_safe = fresh.max_abs_acc <= kFp32ExactIntLimit && fresh.int32_overflow_count == 0;
  if (fresh.max_abs_acc == pinned.stats.max_abs_acc && fresh.count_above_2p24 == pinned.stats.count_above_2p24 &&
      fresh.int32_overflow_count == pinned.stats.int32_overflow_count && fresh_safe == pinned.safe) {
    return "";
  }
  return fmt::format("{}: predicted max|acc| {} ({} above 2^24, safe {}), exact {} ({} above 2^24, safe {})", layer,
                     pinned.stats.max_abs_acc, pinned.stats.count_above_2p24, pinned.safe, fresh.max_abs_acc,
                     fresh.count_above_2p24, fresh_safe);
}

CheckResult c2_range(const std::vector<LayerRun>& runs, const PredictionSet& predictions,
                     const std::vector<std::string>& stale) {
  if (!runs.empty() && runs.front().fp8) {
    // FP8: no range can make a floating-point accumulation exact, and none is needed: the declared
    // models predict every element (C4-C6). A pass here would claim something nothing checked.
    CheckResult c2 = make_check("C2", Verdict::not_applicable);
    const bool block = runs.front().block;
    c2.summary = block ? "not applicable: block-scaled FP8 accumulation is floating point and its scales act inside "
                         "it (per K block); the block models predict every element"
                       : "not applicable: FP8 accumulation is floating point; the models predict every element";
    c2.evidence = {{"fp8", true}, {"block_scaled", block}};
    return c2;
  }
  CheckResult c2 = make_check("C2", Verdict::pass);
  const int64_t stale_predictions = static_cast<int64_t>(stale.size());
  const std::vector<std::string> stale_first(stale.begin(), stale.begin() + std::min<size_t>(stale.size(), 5));
  size_t safe_layers = 0;
  for (const LayerPrediction& p : predictions.layers) safe_layers += p.safe;
  int64_t held_violations = 0;
  bool exposed = false;  // some arm exposed an accumulator that could contradict a safe verdict
  for (const LayerRun& r : runs) {
    held_violations += !r.prediction_held;
    exposed = exposed || r.arm[0].acc_mismatch || r.arm[1].acc_mismatch;
  }
  if (stale_predictions || held_violations) c2.verdict = Verdict::fail;
  // Only a pinned file can match or not; predictions computed here are the operands' statistics.
  const std::string pin = stale_predictions    ? "the predictions DO NOT match the operands"
                          : !predictions.pinned ? "computed here, not pinned"
                                                : "pinned predictions match the operands";
  c2.summary = fmt::format("{}/{} layers predicted safe (|acc| <= 2^24), {}; {}", safe_layers, predictions.layers.size(),
                           pin,
                           exposed ? fmt::format("{} runs contradicted by an arm's accumulator", held_violations)
                                   : std::string("no arm exposes its accumulator, so none could contradict a safe "
                                                 "verdict"));
  c2.evidence = {{"safe_layers", safe_layers},
                 {"layers", predictions.layers.size()},
                 {"stale_predictions", stale_predictions},
                 {"stale_first", stale_first},
                 {"pinned", predictions.pinned},
                 {"contradicted_runs", exposed ? nlohmann::json(held_violations) : nlohmann::json(nullptr)}};
  return c2;
}

// C2's run evidence: whether each exposing arm's observed max |acc| stayed within the prediction.
const LayerCheck kC2Range = {
    .id = "C2",
    .decide = [](const LayerCheckInputs& in) { return c2_range(in.runs, in.predictions, in.stale); },
    .write_run = [](nlohmann::json& j, const LayerRun& x, bool) { j["prediction_held"] = x.prediction_held; },
    .read_run = [](const nlohmann::json& j, LayerRun& x) { x.prediction_held = j.at("prediction_held").get<bool>(); },
};

}  // namespace qc
