// An arm with a declared epilogue formula given from outside (`verify --declare B=<formula>`): the
// wrapped arm runs unchanged; its info and run records name the declared formula, so verify
// checks its outputs against that formula bit for bit and predicts the differences exactly.
#pragma once

#include <memory>
#include <string>

#include "qconform/arm.hpp"

namespace qc {

// `formula`: a name of the formula table or a formula string of the formula space (validated
// here: QC_INPUT naming `what` otherwise). `provenance` says who declared it, in the arm's
// description: " [epilogue <provenance>: <formula>]".
std::unique_ptr<Arm> declare_epilogue(std::unique_ptr<Arm> arm, const std::string& formula, const std::string& what,
                                      const std::string& provenance = "declared by the user");

}  // namespace qc
