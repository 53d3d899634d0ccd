// Internal interface of the Highway fast path of verify's FP8 element pass
// (src/checks/element_pass_kernels.cpp). The scans only count; every element that goes into a
// "first" list is left to the scalar reference steps in element_pass.cpp (`fp8_accumulator_element`,
// `fp8_output_element`), which the scans stop in front of. tests/unit/test_verify_fp8.cpp
// (`Fp8ElementPass.*`) checks that the fast pass equals the reference, field for field.
#pragma once

#include <cstdint>

namespace qc::element_detail {

// One stretch of an FP8 run's elements: per arm, its model + epilogue outputs `want` (null where the
// arm's model was refused: nothing compared) and its outputs `got`; the two models' accumulators `d`
// (read only when both arms are modelled).
struct Fp8OutputScan {
  const uint16_t* want[2] = {nullptr, nullptr};
  const uint16_t* got[2] = {nullptr, nullptr};
  const float* d[2] = {nullptr, nullptr};
  bool pow2 = false;         // a power-of-two run: count the violations
  bool list_models = false;  // stop in front of a vector with an output off its model
  bool list_pow2 = false;    // stop in front of a vector with a power-of-two violation
};

// What the scan adds up, the counts of `ElementTally` of the same names. With both arms modelled:
// predicted (want A != want B), predicted != observed (got A != got B), models' accumulators differing
// bitwise, and under power-of-two scales the observed differences where those accumulators agree.
struct Fp8OutputCounts {
  int64_t formula_mismatch[2] = {0, 0};
  int64_t predicted_diff = 0, predicted_vs_observed = 0, model_acc_diff = 0, pow2_violations = 0;
};

// Elements [0, n) in whole vectors, up to the first vector that holds an element a set `list_*`
// flag asks for; returns the number of elements counted (a multiple of the vector length).
int64_t scan_fp8_outputs(const Fp8OutputScan& s, int64_t n, Fp8OutputCounts& c);

// Elements [0, n) of the arms' exposed fp32 accumulators `got[s]` against their models' `want[s]`,
// bitwise (an arm with null pointers is skipped), in whole vectors, up to the first vector with a
// difference when `list`; adds the differences to `mismatch[s]` and returns the number counted.
int64_t scan_accumulators(const float* const got[2], const float* const want[2], int64_t n, bool list,
                          int64_t mismatch[2]);

// The Highway target the dispatcher selects for the scans here.
const char* element_pass_target();

}  // namespace qc::element_detail
