// verify's results as JSON, both directions: `to_json(VerifyResult)` (docs/results-schema.md,
// `verify`), and the lossless per-layer form (`to_json(LayerVerification)`,
// `layer_verification_from_json`) that the ranks of an MPI job and `--resume` exchange.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "accum/fp8_model.hpp"
#include "checks/layer_checks.hpp"
#include "checks/verify.hpp"
#include "checks/verify_internal.hpp"
#include "core/parallel.hpp"
#include "core/results_json.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

// One run as JSON, written once for both forms. The public form is an entry of `runs` in verify's
// results (docs/results-schema.md); `lossless` adds the fields that make it read back exactly
// (layer_verification_from_json): the per-layer form the ranks of an MPI job and `--resume` exchange.
nlohmann::json run_json(const LayerRun& x, bool lossless) {
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
                      {"ulp_histogram", ulp_histogram_json(x.cmp.ulp_histogram)},
                      {"subnormal", {x.cmp.subnormal_a, x.cmp.subnormal_b}},
                      {"nonfinite_pairs", x.cmp.nonfinite_pairs},
                      {"first", x.cmp.first}};
  if (x.fp8) {
    const auto refused = [](const std::string& why) { return why.empty() ? nlohmann::json(nullptr) : nlohmann::json(why); };
    j["fp8"] = true;
    j["block_scaled"] = x.block;
    j["scaling"] = x.scaling;
    j["models"] = {refused(x.arm[0].model), refused(x.arm[1].model)};
    j["unmodelled"] = {refused(x.arm[0].unmodelled), refused(x.arm[1].unmodelled)};
    j["model_acc_diff"] = taken_json(x.model_acc_diff);
  }
  if (lossless) {
    j["int32_overflow"] = x.int32_overflow;
    j["cmp"] = x.cmp;
  }
  // Each check's evidence fields, written by the check (layer_checks.hpp).
  for (const LayerCheck& check : layer_checks()) check.write_run(j, x, lossless);
  return j;
}

// verify's results without `runs`.
nlohmann::json head_json(const VerifyResult& r) {
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
          {"wall_seconds", r.wall_seconds}};
  j["interchangeability"] = to_json(r.interchangeability);
  if (r.arm_a.fp8()) {
    const auto model = [](const ArmInfo& i) {
      return i.accumulation_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(i.accumulation_model);
    };
    j["fp8"] = {{"reference", "model"},
                {"models", {model(r.arm_a), model(r.arm_b)}},
                {"stage", r.stage ? nlohmann::json(stage_name(*r.stage)) : nlohmann::json(nullptr)},
                {"stage_detail", r.stage_detail}};
  }
  return j;
}

}  // namespace

nlohmann::json to_json(const VerifyResult& r) {
  // The runs' documents on every core, then moved into the array in order.
  std::vector<nlohmann::json> docs(r.runs.size());
  parallel_for(static_cast<int64_t>(docs.size()), 0,
               [&](int64_t i) { docs[static_cast<size_t>(i)] = run_json(r.runs[static_cast<size_t>(i)], false); });
  nlohmann::json runs = nlohmann::json::array();
  for (nlohmann::json& doc : docs) runs.push_back(std::move(doc));
  nlohmann::json j = head_json(r);
  j["runs"] = std::move(runs);
  return j;
}

std::string to_json_text(const VerifyResult& r, nlohmann::json fields) {
  // Each run's text made on a worker from its document, which goes away there: a 196-layer FP8 result
  // holds 588 runs of ~400 histogram entries each (~8 MB), 0.15 s on one core of the GPU host.
  QC_CHECK(!fields.contains("runs"), "to_json_text: `fields` may not replace the runs");
  std::vector<std::string> texts(r.runs.size());
  parallel_for(static_cast<int64_t>(texts.size()), 0, [&](int64_t i) {
    texts[static_cast<size_t>(i)] = run_json(r.runs[static_cast<size_t>(i)], false).dump(1);
  });
  nlohmann::json doc = head_json(r);
  for (auto& [key, value] : fields.items()) doc[key] = std::move(value);
  return dump_with_array(std::move(doc), "runs", texts);
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
      if (x.value("fp8", false)) {
        r.fp8 = true;
        r.block = x.value("block_scaled", false);
        r.scaling = x.value("scaling", "");
        const auto refused = [](const nlohmann::json& why) { return why.is_null() ? std::string() : why.get<std::string>(); };
        for (int s = 0; s < 2; ++s) {
          r.arm[s].model = refused(x.at("models").at(s));
          r.arm[s].unmodelled = refused(x.at("unmodelled").at(s));
        }
        r.model_acc_diff = taken_from_json(x.at("model_acc_diff"));  // written before as -1 too
      }
      for (const LayerCheck& check : layer_checks()) check.read_run(x, r);
      v.runs.push_back(std::move(r));
    }
    return v;
  } catch (const nlohmann::json::exception& e) {
    QC_FAIL_INPUT("{}: not a valid per-layer verify result: {}", where, e.what());
  }
}

}  // namespace qc
