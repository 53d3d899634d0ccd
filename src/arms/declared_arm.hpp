// An arm with a declared formula given from outside (`verify --declare B=<formula>`, conform's
// identified declarations): the wrapped arm runs unchanged; its info and run records name the
// declared formula, so verify checks its outputs against that formula bit for bit and predicts the
// differences exactly.
#pragma once

#include <memory>
#include <string>

#include "qconform/arm.hpp"

namespace qc {

// `formula`: a name of the formula table or a formula string of the formula space (validated here:
// QC_INPUT naming `what` otherwise); for an FP8 arm also `<model>; <epilogue>` (what `qconform
// identify` prints as its declaration: an accumulation model name of docs/accumulation.md or its
// `fp8-model(...)` spelling, then an epilogue over `d` or `fp8-scaled`), which declares both.
// `provenance` says who declared it, in the arm's description: " [epilogue <provenance>: <formula>]".
std::unique_ptr<Arm> declare_epilogue(std::unique_ptr<Arm> arm, const std::string& formula, const std::string& what,
                                      const std::string& provenance = "declared by the user");

}  // namespace qc
