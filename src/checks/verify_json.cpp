// verify's results as JSON, both directions: `to_json(VerifyResult)` (docs/results-schema.md,
// `verify`), and the lossless per-layer form (`to_json(LayerVerification)`,
// `layer_verification_from_json`) that the ranks of an MPI job and `--resume` exchange.
#include <fmt/format.h>

#include <string>

#include "accum/fp8_model.hpp"
#include "checks/verify.hpp"
#include "checks/verify_internal.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

// One run as JSON, written once for both forms. The public form is an entry of `runs` in verify's
// results (docs/results-schema.md); `lossless` adds the fields that make it read back exactly
// (layer_verification_from_json): the per-layer form the ranks of an MPI job and `--resume` exchange.
nlohmann::json run_json(const LayerRun& x, bool lossless) {
  // A count that was not taken (-1: the arm exposes no accumulator, declares no formula, nothing was
  // predicted) is null: nothing was compared, and no number claims otherwise.
  const auto count = [](int64_t v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  const auto taken = [](const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"layer", x.layer},
                      {"m", x.m},
                      {"n", x.n},
                      {"k", x.k},
                      {"scales", scale_mode_name(x.mode)},
                      {"safe", x.safe},
                      {"bitwise_diff", x.cmp.bitwise_diff},
                      {"total", x.cmp.total},
                      {"max_ulp", x.cmp.max_ulp},
                      {"max_rel", x.cmp.max_rel},
                      {"ulp_histogram", nlohmann::json(x.cmp)["ulp_histogram"]},
                      {"subnormal", {x.cmp.subnormal_a, x.cmp.subnormal_b}},
                      {"nonfinite_pairs", x.cmp.nonfinite_pairs},
                      {"operands_identical", x.operands_identical},
                      {"acc_mismatch", {taken(x.arm[0].acc_mismatch), taken(x.arm[1].acc_mismatch)}},
                      {"prediction_held", x.prediction_held},
                      {"pow2_excluded", x.pow2_excluded},
                      {"pow2_violations", x.pow2_violations},
                      {"pow2_not_commutable", x.pow2_not_commutable},
                      {"formula_mismatch", {taken(x.arm[0].formula_mismatch), taken(x.arm[1].formula_mismatch)}},
                      {"predicted_diff", count(x.predicted_diff)},
                      {"predicted_equals_observed",
                       x.predicted_diff < 0 ? nlohmann::json(nullptr) : nlohmann::json(x.predicted_equals_observed)},
                      {"first", x.cmp.first}};
  if (x.fp8) {
    const auto refused = [](const std::string& why) { return why.empty() ? nlohmann::json(nullptr) : nlohmann::json(why); };
    j["fp8"] = true;
    j["block_scaled"] = x.block;
    j["scaling"] = x.scaling;
    j["models"] = {refused(x.arm[0].model), refused(x.arm[1].model)};
    j["unmodelled"] = {refused(x.arm[0].unmodelled), refused(x.arm[1].unmodelled)};
    j["model_acc_diff"] = count(x.model_acc_diff);
    j["model_first"] = x.model_first;
    j["acc_first"] = x.acc_first_mismatch;
    j["acc_note"] = x.acc_note;
    if (x.mode != ScaleMode::real) j["pow2_first"] = x.pow2_first;
  }
  if (lossless) {
    j["int32_overflow"] = x.int32_overflow;
    j["cmp"] = x.cmp;
    j["operands_note"] = x.operands_note;
    j["acc_first_mismatch"] = x.acc_first_mismatch;
    j["pow2_first"] = x.pow2_first;
  }
  return j;
}

}  // namespace

nlohmann::json to_json(const VerifyResult& r) {
  nlohmann::json runs = nlohmann::json::array();
  for (const LayerRun& x : r.runs) runs.push_back(run_json(x, /*lossless=*/false));
  const auto info = [](const ArmInfo& i, const RunRecord& rec) {
    nlohmann::json j{{"label", i.label},
                     {"description", i.description},
                     {"epilogue", i.epilogue},
                     {"exposes_accumulator", i.exposes_accumulator},
                     {"record", rec}};
    if (!i.accumulation_model.empty()) {  // FP8: what the arm declared, which the reference evaluated
      j["accumulation_model"] = i.accumulation_model;
      j["accumulation_formula"] = declared_model_formula(i.accumulation_model);
      const Epilogue* formula = verify_declared_formula(i);
      j["declared_epilogue"] = formula ? std::string(formula->name) : "bf16 = RNE(D), part of the block model";
    } else if (i.fp8()) {  // FP8, no model declared: nothing predicted its outputs
      j["accumulation_model"] = nullptr;
      j["accumulation_formula"] = nullptr;
      j["fp8_model_unknown"] = true;
      const Epilogue* formula = verify_declared_formula(i);  // none for a block-scaled arm: bf16 = RNE(D)
      j["declared_epilogue"] = formula ? std::string(formula->name) : "bf16 = RNE(D) (a block-scaled arm, model undeclared)";
    }
    return j;
  };
  nlohmann::json seconds = nlohmann::json::array();
  for (const auto& [phase, s] : r.seconds) seconds.push_back({{"phase", phase}, {"seconds", s}});
  nlohmann::json j = {{"arms", {info(r.arm_a, r.record_a), info(r.arm_b, r.record_b)}},
          {"reference", r.reference},
          {"checks", r.checks},
          {"total_real", r.total_real},
          {"seconds", seconds},
          {"wall_seconds", r.wall_seconds},
          {"runs", runs}};
  j["interchangeability"] = to_json(r.interchangeability);
  if (r.arm_a.fp8()) {
    const auto model = [](const ArmInfo& i) {
      return i.accumulation_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(i.accumulation_model);
    };
    j["fp8"] = {{"reference", "model"},
                {"models", {model(r.arm_a), model(r.arm_b)}},
                {"stage", r.stage.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.stage)},
                {"stage_detail", r.stage_detail}};
  }
  return j;
}

nlohmann::json to_json(const LayerVerification& v) {
  nlohmann::json runs = nlohmann::json::array();
  for (const LayerRun& x : v.runs) runs.push_back(run_json(x, /*lossless=*/true));
  return {{"name", v.name}, {"stale", v.stale}, {"record_a", v.record_a}, {"record_b", v.record_b}, {"runs", runs}};
}

LayerVerification layer_verification_from_json(const nlohmann::json& j, const std::string& where) {
  try {
    LayerVerification v;
    v.name = j.at("name").get<std::string>();
    v.stale = j.at("stale").get<std::string>();
    v.record_a = j.at("record_a").get<RunRecord>();
    v.record_b = j.at("record_b").get<RunRecord>();
    for (const auto& x : j.at("runs")) {
      LayerRun r;
      r.layer = x.at("layer").get<std::string>();
      r.m = x.at("m").get<int64_t>();
      r.n = x.at("n").get<int64_t>();
      r.k = x.at("k").get<int64_t>();
      r.mode = scale_mode_from_name(x.at("scales").get<std::string>());
      r.safe = x.at("safe").get<bool>();
      r.int32_overflow = x.at("int32_overflow").get<bool>();
      r.cmp = x.at("cmp").get<Comparison>();
      r.operands_identical = x.at("operands_identical").get<bool>();
      r.operands_note = x.at("operands_note").get<std::string>();
      // Counts not taken are null (written before: -1); both read back as -1.
      const auto count = [](const nlohmann::json& v) { return v.is_null() ? int64_t{-1} : v.get<int64_t>(); };
      // An arm's counts: null when not taken (written before as -1: read as not taken too).
      const auto taken = [](const nlohmann::json& v) {
        return v.is_null() || v.get<int64_t>() < 0 ? std::optional<int64_t>() : std::optional<int64_t>(v.get<int64_t>());
      };
      for (int s = 0; s < 2; ++s) {
        r.arm[s].acc_mismatch = taken(x.at("acc_mismatch").at(s));
        r.arm[s].formula_mismatch = taken(x.at("formula_mismatch").at(s));
      }
      r.acc_first_mismatch = x.at("acc_first_mismatch").get<std::vector<std::string>>();
      r.prediction_held = x.at("prediction_held").get<bool>();
      r.pow2_excluded = x.at("pow2_excluded").get<int64_t>();
      r.pow2_violations = x.at("pow2_violations").get<int64_t>();
      r.pow2_first = x.at("pow2_first").get<std::vector<DiffElement>>();
      r.pow2_not_commutable = x.at("pow2_not_commutable").get<bool>();
      r.predicted_diff = count(x.at("predicted_diff"));
      const nlohmann::json& equal = x.at("predicted_equals_observed");
      r.predicted_equals_observed = equal.is_null() || equal.get<bool>();
      if (x.value("fp8", false)) {
        r.fp8 = true;
        r.block = x.value("block_scaled", false);
        r.scaling = x.value("scaling", "");
        const auto refused = [](const nlohmann::json& why) { return why.is_null() ? std::string() : why.get<std::string>(); };
        for (int s = 0; s < 2; ++s) {
          r.arm[s].model = refused(x.at("models").at(s));
          r.arm[s].unmodelled = refused(x.at("unmodelled").at(s));
        }
        r.model_acc_diff = count(x.at("model_acc_diff"));
        r.model_first = x.at("model_first").get<std::vector<std::string>>();
        r.acc_note = x.at("acc_note").get<std::string>();
      }
      v.runs.push_back(std::move(r));
    }
    return v;
  } catch (const nlohmann::json::exception& e) {
    QC_FAIL_INPUT("{}: not a valid per-layer verify result: {}", where, e.what());
  }
}

}  // namespace qc
