// The detection matrix: every mutant arm through the boundary suite (C1) and the layer-level
// checks (C2–C6) against the reference arm, with the check that fired and whether it is the
// check for the stage the mutant breaks. An FP8 mutant (it declares an accumulation model) is
// verified on FP8 operands against `cpu:fp8-<its declared model>` instead; its C1 is not
// applicable (the boundary probes are INT8's).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "qconform/arm.hpp"
#include "qconform/check.hpp"

namespace qc {

struct MutantRow {
  ArmInfo arm;
  std::string reference;                 // the correct arm it was verified against
  std::vector<CheckResult> checks;       // C1..C6
  std::vector<std::string> fired;        // ids of checks with verdict fail
  std::vector<std::string> stage_checks; // the checks responsible for the stage it breaks
  bool caught = false;                   // some falsifiable check (C1–C5) fired
  bool caught_by_stage = false;          // one of `stage_checks` fired
};

struct MutantMatrix {
  std::string reference;
  MutantRow control;                     // the reference against a correct arm: nothing may fire
  std::vector<MutantRow> rows;
  bool all_caught_by_stage() const;
};

// The checks responsible for a stage: accumulation -> C1, C4; epilogue -> C5; arithmetic -> C1.
std::vector<std::string> checks_for_stage(const std::string& stage);

MutantMatrix run_mutant_matrix(const std::string& reference = "cpu:vllm-cutlass",
                               const std::string& control = "cpu:vllm-triton");
nlohmann::json to_json(const MutantMatrix& m);

}  // namespace qc
