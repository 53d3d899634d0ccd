#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qconform/arm.hpp"

namespace qc {

void register_cpu_arms();
void register_mutant_arms();
// `mutant-shape:` (shape_mutants.cpp): C8's positive controls, apart from the C0–C7 mutant matrix.
void register_shape_mutant_arms();
// `fp8:<order>`, the sweep's old FP8 labels, as aliases of `cpu:fp8-<model>` (fp8_arms.cpp).
void register_fp8_alias_arms();
// `cpu:fp8-<model>` (fp8_arms.cpp); QC_INPUT for an unknown model.
std::unique_ptr<Arm> make_cpu_fp8_arm(std::string_view model);
// The RunRecord of an arm that runs on this CPU inside qconform itself.
RunRecord cpu_run_record(const ArmInfo& info, std::string kernel);

}  // namespace qc
