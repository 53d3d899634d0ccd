// C1, the arithmetic preconditions, tested through an arm's own code path and device: the 2^24
// int->fp32 boundary and the arm's conversion mode, exact integer accumulation against INT64
// (random, all-extreme, ragged K, and K beyond the INT32 proof), power-of-two commutation across
// the exponent range, bf16 rounding midpoints, and subnormal handling (FTZ/DAZ).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "checks/c1_block_model.hpp"
#include "checks/c1_fp8_model.hpp"
#include "qconform/arm.hpp"
#include "qconform/check.hpp"

namespace qc {

struct BoundaryCase {
  std::string group;  // "int-to-fp32", "accumulation", "pow2-commutation", "bf16-midpoints", "subnormal"
  std::string id;     // names its parameters, e.g. "accumulation/all-min/K=32768"
  Verdict verdict = Verdict::pass;
  std::string detail;  // one line; on failure: coordinates, what the arm returned and what was expected
  std::string inputs;  // the operands the case ran, in words ("a_q [1,131072] all -128, ...")
  std::string points_to;  // what a failure of this case points to (the cause), always set
  nlohmann::json evidence = nlohmann::json::object();
};

// The failed cases of a C1 result, one line each: the case id, its inputs, what the arm returned
// against what was expected, and what it points to (`qconform boundary`, `conform`, the report).
std::vector<std::string> describe_failed_cases(const std::vector<BoundaryCase>& cases);

struct BoundaryOptions {
  int64_t max_k = 32768;       // accumulation sweep K in {512, ..., max_k}
  bool overflow_probe = true;  // K = 131072 all -128*-128: the exact value leaves INT32
  Fp8MeasureOptions fp8;       // FP8 arms: the model measurement (c1_fp8_model.hpp)
  BlockMeasureOptions block;   // block-scaled FP8 arms: the block model measurement (c1_block_model.hpp)
};

// The mandatory probe families: C1 passes only when each ran through the arm. FP8 arms (those that
// declare an accumulation model) have their own: the model measured with designed probes, and its
// confirmation on random operands.
inline constexpr const char* kBoundaryFamilies[] = {"int-to-fp32", "accumulation", "pow2-commutation",
                                                    "bf16-midpoints", "subnormal"};
inline constexpr const char* kBoundaryFamiliesFp8[] = {"fp8-model", "fp8-confirmation"};
inline constexpr const char* kBoundaryFamiliesBlock[] = {"block-structure", "block-form"};

struct BoundaryResult {
  ArmInfo arm;
  RunRecord record;
  nlohmann::json environment;
  std::string conversion_mode;  // the arm's int32->fp32 conversion as observed: "RNE", "RZ", ...
  std::vector<BoundaryCase> cases;
  CheckResult c1;
  nlohmann::json families = nlohmann::json::object();  // family -> {cases, ran_through_arm}
  std::vector<std::string> families_not_run;            // families no probe of which ran through the arm
  // FP8 arms: the measured accumulation model (the cases are its parameters and its confirmation).
  std::optional<Fp8Measurement> fp8;
  // Block-scaled FP8 arms: the measured block model (the cases are its chain, its block and its form).
  std::optional<BlockMeasurement> block;
  // True when C1 checked something in every family (pass or fail); false = nothing to check.
  bool checked() const { return families_not_run.empty(); }
};

// An FP8 arm (ArmInfo::accumulation_model non-empty) has its accumulation model measured
// (measure_fp8_accumulation) instead of the INT8 families; a block-scaled one its block model
// (measure_block_model).
BoundaryResult run_boundary(Arm& arm, const BoundaryOptions& options = {});
nlohmann::json to_json(const BoundaryResult& r);

}  // namespace qc
