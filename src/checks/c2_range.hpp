// C2, range prediction: the pinned predictions (predict.cpp computes them, before any comparison
// runs) must be the exact statistics of the operands verify runs, and no arm's exposed accumulator
// may contradict a layer predicted safe.
#pragma once

#include <string>
#include <vector>

#include "checks/verify.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/check.hpp"

namespace qc {

// "" when the pinned prediction of a layer equals its exact statistics `fresh` (and its `safe`
// verdict follows from them), else a line with both.
std::string c2_stale_prediction(const std::string& layer, const LayerPrediction& pinned, const RangeStats& fresh);

// C2 over every run; `stale`: the layers' non-empty c2_stale_prediction lines, in layer order.
CheckResult c2_range(const std::vector<LayerRun>& runs, const PredictionSet& predictions,
                     const std::vector<std::string>& stale);

}  // namespace qc
