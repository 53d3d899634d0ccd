#pragma once

#include <string>

#include "qconform/arm.hpp"

namespace qc {

void register_cpu_arms();
void register_mutant_arms();
// The RunRecord of an arm that runs on this CPU inside qconform itself.
RunRecord cpu_run_record(const ArmInfo& info, std::string kernel);

}  // namespace qc
