// C1, the arithmetic preconditions, tested through an arm's own code path and device: the 2^24
// int->fp32 boundary and the arm's conversion mode, exact integer accumulation against INT64
// (random, all-extreme, ragged K, and K beyond the INT32 proof), power-of-two commutation across
// the exponent range, bf16 rounding midpoints, and subnormal handling (FTZ/DAZ).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "qconform/arm.hpp"
#include "qconform/check.hpp"

namespace qc {

struct BoundaryCase {
  std::string group;  // "int-to-fp32", "accumulation", "pow2-commutation", "bf16-midpoints", "subnormal"
  std::string id;     // names its parameters, e.g. "accumulation/all-min/K=32768"
  Verdict verdict = Verdict::pass;
  std::string detail;  // one line; on failure: coordinates, values and bit patterns
  nlohmann::json evidence = nlohmann::json::object();
};

struct BoundaryOptions {
  int64_t max_k = 32768;       // accumulation sweep K in {512, ..., max_k}
  bool overflow_probe = true;  // K = 131072 all -128*-128: the exact value leaves INT32
};

struct BoundaryResult {
  ArmInfo arm;
  RunRecord record;
  nlohmann::json environment;
  std::string conversion_mode;  // the arm's int32->fp32 conversion as observed: "RNE", "RZ", ...
  std::vector<BoundaryCase> cases;
  CheckResult c1;
};

BoundaryResult run_boundary(Arm& arm, const BoundaryOptions& options = {});
nlohmann::json to_json(const BoundaryResult& r);
// CPU model and ISA, compiler and flags, MXCSR FTZ/DAZ, library versions, project version.
nlohmann::json environment_stamp();

}  // namespace qc
