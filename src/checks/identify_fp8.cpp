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

#include <array>
#include <map>

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
  if (own_d_contradicts_model(m)) return;
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

// The arm's own d (its unscaled entry) on the epilogue's probes and held-out layers against the
// measured model: a layer whose d the model does not give is the accumulation stage's, whatever the
// epilogue over the arm's own d turned out to be. True (and the verdict set) when some d differs.
bool Identifier::own_d_contradicts_model(const Fp8Measurement& m) {
  int64_t wrong = 0, exposed = 0, heldout_wrong = 0;
  std::vector<std::string> layers, first;
  for (const Observation& o : obs_) {
    exposed += o.acc_exposed;
    wrong += o.acc_wrong;
    if (o.heldout) heldout_wrong += o.acc_wrong;
    if (o.acc_wrong > 0) layers.push_back(fmt::format("{} ({}x{}x{}): {} of {}", o.id, o.m, o.n, o.k, o.acc_wrong, o.size()));
    for (const std::string& f : o.acc_first) {
      if (first.size() < 3) first.push_back(f);
    }
  }
  if (wrong == 0) return false;
  // By M (the dispatch key of most kernels): how many layers and values at each M differ.
  std::map<int64_t, std::array<int64_t, 4>> by_m;  // layers differing, layers, values differing, values
  for (const Observation& o : obs_) {
    auto& t = by_m[o.m];
    t[0] += o.acc_wrong > 0;
    t[1] += 1;
    t[2] += o.acc_wrong;
    t[3] += o.acc_exposed;
  }
  std::vector<std::string> per_m;
  for (const auto& [mm, t] : by_m) per_m.push_back(fmt::format("M={}: {} of {} layers, {} of {} values", mm, t[0], t[1], t[2], t[3]));
  const std::string epilogue =
      r_.verdict == "identified"
          ? fmt::format("identified as {}{}", r_.epilogue_formula,
                        r_.epilogue_named.empty() ? std::string() : fmt::format(" = {}", fmt::join(r_.epilogue_named, ", ")))
          : fmt::format("{} ({})", r_.verdict, r_.reason);
  const int64_t clean = static_cast<int64_t>(obs_.size() - layers.size());
  r_.reason = fmt::format(
      "the accumulation stage: the measured model ({}) explains the {} designed probes and the random confirmation, but the "
      "arm's own d (fp8_accumulate, the same K loop) differs from it in {} of {} values, on {} of {} layers (agreeing on the "
      "other {}): the kernel's accumulation changes with the layer (its shape or M: another tile, instruction or split); "
      "the epilogue over the arm's own d: {}",
      model_declaration(m), m.probes.size(), wrong, exposed, layers.size(), obs_.size(), clean, epilogue);
  // The epilogue explains every output from the arm's own d: model and epilogue explain at least the
  // held-out outputs whose d the model gives.
  if (r_.verdict == "identified") r_.matching = r_.outputs - heldout_wrong;
  r_.verdict = "unexplained";
  r_.formula.clear();
  nlohmann::json diag = {{"kind", "stage"},
                         {"stage", "the accumulation"},
                         {"summary", fmt::format("the accumulation: the arm's own d differs from the measured model on {} "
                                                 "layer(s); by M: {}",
                                                 layers.size(), fmt::join(per_m, "; "))},
                         {"layers", layers},
                         {"first_heading", "the first d values that differ:"},
                         {"first", first}};
  r_.diagnosis = nlohmann::json::array({diag});
  return true;
}

}  // namespace qc::identify_detail
