#include "orchestrate/mutant_matrix.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "checks/c1_boundary.hpp"
#include "orchestrate/sweep.hpp"
#include "checks/verify.hpp"
#include "core/results_json.hpp"
#include "synth/synth.hpp"

namespace qc {

namespace {

// The layer-level operands every mutant faces: the `tiny` synthetic model at M = 64, and one
// adversarial layer of extreme codes (-128 and 127) with a ragged K (1008 = 15*64 + 48).
std::vector<LayerOperands> matrix_operands() {
  SynthOptions o;
  o.shapes = "tiny";
  o.m = 64;
  o.seed = 2026;
  std::vector<LayerOperands> layers = synth_operands(o);
  OperandStorage s;
  const int64_t m = 16, n = 64, k = 1008;
  uint64_t state = 0xE87EE;
  for (int64_t i = 0; i < m * k; ++i) s.a_q.push_back((splitmix64(state) & 1) ? int8_t{127} : int8_t{-128});
  for (int64_t i = 0; i < n * k; ++i) s.w_q.push_back((splitmix64(state) & 1) ? int8_t{127} : int8_t{-128});
  for (int64_t i = 0; i < m; ++i) s.a_scale.push_back(0x1.3p-14f * static_cast<float>(1 + i % 5));
  for (int64_t i = 0; i < n; ++i) s.w_scale.push_back(0x1.7p-9f * static_cast<float>(1 + i % 3));
  layers.push_back(make_operands("extremes.k1008", m, n, k, std::move(s), "mutant matrix: extreme codes"));
  return layers;
}

// The FP8 layers an FP8 mutant faces: realistic e4m3 operands (the sweep's), K deep enough that the
// declared models' roundings matter.
std::vector<LayerOperands> fp8_matrix_operands() {
  std::vector<LayerOperands> layers;
  uint64_t seed = 2026;
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{16, 64, 1024}, std::array<int64_t, 3>{8, 32, 4096}}) {
    layers.push_back(synth_fp8_layer(fmt::format("fp8.k{}", k), m, n, k, seed++, "mutant matrix: FP8 operands"));
  }
  return layers;
}

MutantRow evaluate(const std::string& reference, const std::string& label, const std::vector<LayerOperands>& layers,
                   const PredictionSet& predictions) {
  MutantRow row;
  auto arm = make_arm(label);
  row.arm = arm->info();
  if (!row.arm.accumulation_model.empty()) {
    // FP8: against the CPU arm of the model it declares, on FP8 operands.
    row.reference = "cpu:fp8-" + row.arm.accumulation_model;
    auto ref = make_arm(row.reference);
    CheckResult c1 = make_check("C1", Verdict::not_applicable);
    c1.summary = "not applicable: the boundary probes are INT8's; an FP8 arm's C1 measures its accumulation model";
    row.checks.push_back(std::move(c1));
    const std::vector<LayerOperands> fp8_layers = fp8_matrix_operands();
    const VerifyResult v = verify_layers(*ref, *arm, fp8_layers, predict(fp8_layers, "mutant matrix FP8 operands", ""),
                                         VerifyOptions{});
    row.checks.insert(row.checks.end(), v.checks.begin(), v.checks.end());
  } else {
    row.reference = reference;
    auto ref = make_arm(reference);
    row.checks.push_back(run_boundary(*arm).c1);
    const VerifyResult v = verify_layers(*ref, *arm, layers, predictions, VerifyOptions{});
    row.checks.insert(row.checks.end(), v.checks.begin(), v.checks.end());
  }
  for (const CheckResult& c : row.checks) {
    if (c.verdict != Verdict::fail) continue;
    row.fired.push_back(c.id);
    row.caught = row.caught || c.falsifiable;
  }
  row.stage_checks = checks_for_stage(row.arm.breaks_stage);
  row.caught_by_stage = std::any_of(row.stage_checks.begin(), row.stage_checks.end(), [&](const std::string& id) {
    return std::find(row.fired.begin(), row.fired.end(), id) != row.fired.end();
  });
  return row;
}

}  // namespace

std::vector<std::string> checks_for_stage(const std::string& stage) {
  if (stage == "accumulation") return {"C1", "C4"};
  if (stage == "epilogue") return {"C5"};
  if (stage == "arithmetic") return {"C1"};
  return {};
}

bool MutantMatrix::all_caught_by_stage() const {
  return control.fired.empty() &&
         std::all_of(rows.begin(), rows.end(), [](const MutantRow& r) { return r.caught && r.caught_by_stage; });
}

MutantMatrix run_mutant_matrix(const std::string& reference, const std::string& control) {
  const std::vector<LayerOperands> layers = matrix_operands();
  const PredictionSet predictions = predict(layers, "mutant matrix operands", "");
  MutantMatrix matrix;
  matrix.reference = reference;
  matrix.control = evaluate(reference, control, layers, predictions);
  for (const ArmBackend& b : arm_backends()) {
    if (b.prefix != "mutant") continue;
    for (const std::string& variant : b.variants()) {
      matrix.rows.push_back(evaluate(reference, fmt::format("mutant:{}", variant), layers, predictions));
    }
  }
  return matrix;
}

nlohmann::json to_json(const MutantMatrix& m) {
  const auto row_json = [](const MutantRow& r) {
    nlohmann::json checks = nlohmann::json::object();
    for (const CheckResult& c : r.checks) checks[c.id] = c;
    return nlohmann::json{{"arm", r.arm.label},
                          {"reference", r.reference},
                          {"breaks_stage", r.arm.breaks_stage},
                          {"description", r.arm.description},
                          {"fired", r.fired},
                          {"stage_checks", r.stage_checks},
                          {"caught", r.caught},
                          {"caught_by_stage", r.caught_by_stage},
                          {"checks", checks}};
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const MutantRow& r : m.rows) rows.push_back(row_json(r));
  return results_envelope("mutants", {{"reference", m.reference},
                                      {"control", row_json(m.control)},
                                      {"mutants", rows},
                                      {"all_caught_by_stage", m.all_caught_by_stage()}});
}

}  // namespace qc
