// `qconform identify`: which point of the formula space (src/epilogue/formula_space.hpp) an arm
// computes, found by designed probes through the arm's own code path and confirmed on held-out
// synthetic operands (docs/identify.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "qconform/arm.hpp"

namespace qc {

struct IdentifyOptions {
  uint64_t seed = 20261201;
  int max_rounds = 16;                 // designed probe rounds at most
  std::string heldout_shapes = "tiny";  // `synth` shapes of the held-out confirmation
  std::vector<int64_t> heldout_m = {8, 80};  // one swap-AB shape (M <= 16) and one without
};

struct IdentifyResult {
  ArmInfo arm;
  RunRecord record;
  std::string verdict;   // "identified", "ambiguous", "unexplained", "not-supported"
  std::string formula;   // identified: the class's formula (notation); else ""
  std::vector<std::string> named;  // production formulas of the table in the identified class
  std::string reason;    // one paragraph: why this verdict
  int64_t outputs = 0, matching = 0;  // held-out outputs, and how many the formula explains
  nlohmann::json candidates;  // {space, classes, survivors:[{formula, key, members}]}
  nlohmann::json probes;      // one entry per probe run: id, shape, bias, elements, eliminated, left
  nlohmann::json nearest;     // unexplained: the nearest candidates with residual statistics
  nlohmann::json unexplained; // unexplained: the first unexplained outputs (coordinates, values, bits)
  nlohmann::json diagnosis;   // what the residuals look like (accumulator, bias, scale, epilogue)
  // Exposed INT32 accumulators that differ from the exact dot products ({exposed, differ, first});
  // empty when none differ. Reported with any verdict; the verdict is decided by the outputs.
  nlohmann::json accumulator = nlohmann::json::object();
  // FP8 arms: the accumulation model measured through the arm (c1_fp8_model.hpp, the measurement
  // `boundary` makes), to_json of it; null for INT8 arms.
  nlohmann::json fp8_accumulation;
  double seconds = 0;
};

// FP8 arms (ArmInfo::accumulation_model non-empty): the formula is the measured accumulation model
// (measure_fp8_accumulation) then the declared `fp8-scaled` epilogue (not probed); the held-out
// confirmation is the measurement's, on random operands no probe used.
IdentifyResult identify(Arm& arm, const IdentifyOptions& options = {});
nlohmann::json to_json(const IdentifyResult& r);
// The printout a person reads.
std::string describe(const IdentifyResult& r);

}  // namespace qc
