// Internal interface of the Highway FP8 model kernels (src/accum/fp8_model_kernels.cpp), the fast
// evaluation behind `qc::fp8_model_evaluate` (src/accum/fp8_model.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "accum/fp8_model.hpp"

namespace qc::fp8_kernels {

// Exact-term sums in fp32: each range [bounds[j], bounds[j+1]) summed sequentially from +0 in fp32,
// the range sums added in order into an fp32 total from +0. Operands must be finite (validated by
// the caller).
void sum_panels(const Fp8Gemm& g, const std::vector<int64_t>& bounds, float* d, int threads);

// Models with finite term_bits (`Fp8FastPath::steps_f64`), in fp64 lanes.
void step_panels(const Fp8AccumModel& m, const Fp8Gemm& g, float* d, int threads);

// The exact model on e4m3 x e4m3 operands with K <= 2^17 (`Fp8FastPath::exact_f64`): fp64 values,
// every product and partial sum exact, lanes along k, rounded once to fp32.
void exact_e4m3(const Fp8Gemm& g, float* d, int threads);

const char* target_name();

}  // namespace qc::fp8_kernels
