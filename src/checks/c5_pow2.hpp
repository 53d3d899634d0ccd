// C5, the power-of-two probe: with weight scales rounded to powers of two (`pow2-channel`) and,
// separately, every scale of a layer set to one power of two (`pow2-layer`; the regimes are
// `apply_scale_mode` in verify.cpp), the two arms' outputs must be bit-identical in every layer
// predicted safe, for elements whose exact value and intermediates are finite and normal (the
// element pass counts the rest as excluded).
#pragma once

#include <cstddef>
#include <vector>

#include "checks/verify.hpp"
#include "qconform/check.hpp"
#include "qconform/epilogue.hpp"

namespace qc {

// True when the declared formulas (null: not declared) share no commutation class
// (docs/epilogues.md), so a run under power-of-two scales proves nothing: bias after a bf16 rounding
// has none, and `exact` rounds once where the fp32 formulas round twice.
bool c5_not_commutable(const Epilogue* formula_a, const Epilogue* formula_b, bool has_bias);

CheckResult c5_pow2(const std::vector<LayerRun>& runs);

// `conform` runs the probe end to end too (generation with power-of-two weight scales through both
// arms): evidence under C5, not a verdict, since the generated positions were not captured and
// predicted. `fp8`: an FP8 pair, whose differing accumulation models leave differences under any scales.
void c5_add_end_to_end(CheckResult& c5, size_t sequences, size_t identical_sequences, bool records_bit_identical,
                       bool fp8 = false);

}  // namespace qc
