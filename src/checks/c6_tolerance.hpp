// C6, real-scale tolerance: under the real scales every finite pair differs by at most the tolerance
// (ordered bf16 ulps), every non-finite pair is bit-identical, and when both arms declare formulas
// each output equals its formula and the observed set of differing elements the predicted set.
#pragma once

#include <cstdint>
#include <vector>

#include "checks/verify.hpp"
#include "qconform/check.hpp"
#include "qconform/compare.hpp"

namespace qc {

// `total_real`: the real-scale runs merged (the largest row count of each layer).
CheckResult c6_tolerance(const std::vector<LayerRun>& runs, const Comparison& total_real, int64_t tolerance_ulps);

}  // namespace qc
