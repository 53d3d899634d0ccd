// C4, accumulator equality: every arm that exposes its INT32 accumulator equals the exact
// emulation bit for bit (the element pass counts the mismatches of each run).
#pragma once

#include <vector>

#include "checks/verify.hpp"
#include "qconform/check.hpp"

namespace qc {

CheckResult c4_accumulator(const std::vector<LayerRun>& runs);

}  // namespace qc
