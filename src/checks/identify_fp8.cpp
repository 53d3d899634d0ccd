// identify on FP8 arms (docs/identify.md, "FP8 arms"): the formula is an accumulation model followed
// by an epilogue, both measured.
//   1. The accumulation model, by the prober of c1_fp8_model.cpp (one for `boundary` and `identify`):
//      through the arm's unscaled `fp8_accumulate` where it offers one, else through `run` with unit
//      scales and the readable probes (Fp8MeasureOptions::through_run).
//   2. The epilogue, by the INT8 identification over the FP8 space (formulas over the fp32 `d`), with
//      probes whose `d` is the measured model's on codes the design chose (identify_probes.cpp) and
//      held-out FP8 `synth` layers: model and epilogue together predict every held-out output.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "accum/fp8_model.hpp"
#include "checks/c1_fp8_model.hpp"
#include "checks/identify_internal.hpp"
#include "epilogue/formula_space.hpp"

namespace qc::identify_detail {

namespace {

// The name verify and conform declare for a measured model: its table name, else its spelling.
std::string model_declaration(const Fp8Measurement& m) {
  return m.model_name.empty() ? fp8_model_spelling(m.model) : m.model_name;
}

}  // namespace

void Identifier::identify_fp8() {
  Fp8MeasureOptions mo;
  mo.seed = options_.seed;
  mo.through_run = !r_.arm.offers_unscaled();
  const Fp8Measurement m = measure_fp8_accumulation(arm_, mo);
  r_.fp8_accumulation = to_json(m);
  r_.fp8_accumulation.erase("probes");  // the printout and --json of boundary carry them
  r_.fp8_accumulation["probe_count"] = m.probes.size();
  r_.record.arm = m.arm.label;
  r_.record.kernel = m.record.value("kernel", std::string());
  r_.record.device = m.record.value("device", std::string());
  if (m.record.contains("extra")) r_.record.extra = m.record.at("extra");
  if (m.measured && m.confirm_matching == m.confirm_outputs) {
    identify_fp8_epilogue(m);
    return;
  }
  // The accumulation stage is where the space is exceeded: no epilogue is probed on an unknown d.
  r_.verdict = "unexplained";
  r_.outputs = m.confirm_outputs;
  r_.matching = m.measured ? m.confirm_matching : 0;
  r_.reason = fmt::format("the accumulation stage: {}", m.reason);
  r_.diagnosis = nlohmann::json::array(
      {{{"kind", "stage"},
        {"stage", "the accumulation"},
        {"summary", fmt::format("the accumulation: no model of the FP8 family explains the arm's {} (measured through {}); "
                                "the epilogue was not probed. {}",
                                mo.through_run ? "outputs" : "unscaled d", m.observed_through, m.reason)}}});
  if (!m.contradiction.empty()) r_.nearest = nlohmann::json::array({m.contradiction});
  r_.unexplained = nlohmann::json::array();
  for (const auto& row : m.confirmation) {
    if (row.contains("first_mismatch")) r_.unexplained.push_back(row);
  }
}

void Identifier::identify_fp8_epilogue(const Fp8Measurement& m) {
  input_ = FormulaInput::fp32;
  model_ = m.model;
  r_.accumulation_model = model_declaration(m);
  r_.accumulation_formula = accumulation_formula(m.model);
  identify_epilogue();
  // What the epilogue identification named is the epilogue; `named` is the model's (and its class's).
  r_.epilogue_formula = r_.formula;
  r_.epilogue_named = r_.named;
  r_.named.clear();
  if (!m.model_name.empty()) r_.named.push_back(m.model_name);
  for (size_t i = 1; i < m.equivalent.size(); ++i) {
    const std::string n = named_model_of(m.equivalent[i]);
    if (!n.empty() && std::find(r_.named.begin(), r_.named.end(), n) == r_.named.end()) r_.named.push_back(n);
  }
  const std::string model_part = fmt::format("accumulation: {}", r_.accumulation_formula);
  if (r_.verdict == "identified") {
    r_.formula = fmt::format("{}; epilogue: {}{}", model_part, r_.epilogue_formula,
                             r_.epilogue_named.empty() ? std::string()
                                                       : fmt::format(" = {}", fmt::join(r_.epilogue_named, ", ")));
    r_.reason = fmt::format("the accumulation model measured by {} designed probes through {} ({}); then {}",
                            m.probes.size(), m.observed_through, m.verdict, r_.reason);
    return;
  }
  r_.formula.clear();
  r_.reason = fmt::format("the accumulation model is measured ({}, {} designed probes through {}); the epilogue: {}",
                          m.model_name.empty() ? r_.accumulation_model : m.model_name, m.probes.size(), m.observed_through,
                          r_.reason);
}

}  // namespace qc::identify_detail
