// verify's element pass: one pass over a run's outputs, in blocks of rows on every core, that
// applies the declared formulas to the exact accumulators, compares A with B, and gathers the
// element-level evidence of C2 (a safe layer contradicted), C4 (exposed accumulators), C5
// (power-of-two identity) and C6 (outputs off their declared formula, predicted set).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checks/verify.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "qconform/compare.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/operands.hpp"

namespace qc {

// The element-level counts; blocks merge in row order, so the "first" lists keep the first
// offending elements.
struct ElementTally {
  int64_t acc_mismatch[2] = {0, 0}, formula_mismatch[2] = {0, 0};
  int64_t safe_contradicted = 0, predicted_diff = 0, predicted_vs_observed = 0;
  int64_t pow2_excluded = 0, pow2_violations = 0;
  std::vector<std::string> acc_first;
  std::vector<DiffElement> pow2_first;
  int64_t model_acc_diff = 0;            // FP8: the two models' accumulators differ
  std::vector<std::string> model_first;  // FP8: outputs off their model, described

  void merge(const ElementTally& o, size_t max_listed);
};

// An FP8 run's reference side (both arms declare an accumulation model): per arm, the fp32
// accumulators of the model its run claims on the layer's codes (`modelled` false, nothing compared,
// when the arm's record refused its model on this run), whose outputs through the arm's declared
// epilogue (`ElementContext::formula`) under the run's scales the pass computes itself, and the fp32
// accumulator the arm exposed (`Arm::fp8_accumulate`) with the accumulators of the model that call
// claimed.
struct Fp8RunReference {
  std::string model[2];
  bool modelled[2] = {true, true};
  const std::vector<float>* d[2] = {nullptr, nullptr};        // the claimed models' accumulators [m,n]
  const std::vector<float>* arm_acc[2] = {nullptr, nullptr};  // the arms' exposed accumulators [m,n], or null
  std::string acc_model[2];                                   // the model the accumulator call claimed
  const std::vector<float>* acc_d[2] = {nullptr, nullptr};    // its accumulators [m,n]
  // The exposed accumulators against their models (`acc_mismatch`, `acc_first`) as
  // `fp8_accumulator_tally` found them: they do not depend on the scales, so verify compares them once
  // per (layer, rows) and hands the counts to each run. Null: the pass compares them itself.
  const ElementTally* acc_tally = nullptr;
  // Block-scaled pairs (block models, src/epilogue/block_models.hpp): `d` holds each block model's fp32
  // D under the run's scales, the outputs are bf16 = RNE(D) (no epilogue: `ElementContext::formula` is
  // null), and the arms' exposed accumulators are their D of this run (`ArmOutput::d`).
  bool block = false;
  // What "the two models' accumulations differ" compares bitwise, element by element (the power-of-two
  // jurisdiction of C5): null, the models' accumulators `d`; for block pairs whose chains differ, `d`
  // with B's side made unequal wherever a K block's chain differs between the two models.
  const std::vector<float>* key[2] = {nullptr, nullptr};
  std::vector<float> key_store;  // owns B's key when `key[1]` is set
  const std::vector<float>* differ_key(int s) const { return key[s] != nullptr ? key[s] : d[s]; }
  // As `ElementContext::row_ids`, for the lists the accumulators' comparison makes (which has no context).
  const int64_t* row_ids = nullptr;
  int64_t row_id(int64_t r) const { return row_ids != nullptr ? row_ids[r] : r; }
};

// Everything one element pass reads: the run's operands and scale regime, the exact accumulators,
// both arms' outputs and declared formulas (null: none declared), and the comparison options.
struct ElementContext {
  const LayerOperands& ops;
  std::string label;  // the layer's name in diff listings ("q_proj@M=4" for a row-count sweep)
  ScaleMode mode = ScaleMode::real;
  bool safe = false;  // the pinned prediction
  const ExactAccumulators& exact;
  const ArmOutput* out[2] = {nullptr, nullptr};
  const Epilogue* formula[2] = {nullptr, nullptr};
  const CompareOptions& compare;
  int threads = 0;
  const Fp8RunReference* fp8 = nullptr;  // FP8 pairs: the models take the place of `exact`; `formula` is
                                         // each arm's epilogue over its model's accumulators
  // A pass over some rows of a run (verify's device pipeline lists from the rows it brings back): the
  // run's near-zero limit, computed over all of its rows, and the row of the run each row here is
  // (`row_ids[r]`), as the lists name it. Unset: the rows are the run's, and the limit is theirs.
  std::optional<double> near_zero = std::nullopt;
  const int64_t* row_ids = nullptr;
  int64_t row_id(int64_t r) const { return row_ids != nullptr ? row_ids[r] : r; }
};

struct ElementPass {
  Comparison cmp;  // arm A vs arm B
  ElementTally tally;
};

// The pass, in blocks of rows on `run.threads` threads: FP8 runs in SIMD lanes a few rows at a time,
// the model outputs computed per block and never stored whole (element_pass_kernels.cpp, the comparison
// of A with B in compare_kernels.cpp); every element that enters a "first" list goes through the
// reference's own steps.
ElementPass element_pass(const ElementContext& run);

// The scalar reference of `element_pass`: the models' outputs through the declared epilogues over the
// whole tile (`apply_epilogue`), then one element at a time (`compare_bf16_rows_reference`, every
// exposed accumulator compared in the run, whatever `acc_tally` holds). The fast pass must return the
// same pass, field for field (tests/unit/test_verify_fp8.cpp, `Fp8ElementPass.*`).
ElementPass element_pass_reference(const ElementContext& run);

// FP8: the arms' exposed accumulators against the models their calls claimed, bitwise, over the whole
// layer (`acc_mismatch`, `acc_first`; nothing else): what `Fp8RunReference::acc_tally` holds.
ElementTally fp8_accumulator_tally(const Fp8RunReference& f, const LayerOperands& ops, int threads);

}  // namespace qc
