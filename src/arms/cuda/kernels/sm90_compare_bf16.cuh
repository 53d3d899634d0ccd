// Entry point of `sm90_compare_bf16.cu`: bitwise / ordered-ulp comparison of two bf16 arrays.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernel_types.hpp"

namespace qc::cuda_kernels {

// `a`, `b` device arrays of `n` bf16 bit patterns, 16-byte aligned; `out` a device
// Bf16CompareCounts that the caller zeroed (first_diff = ~0). Returns "error: ..." on failure.
std::string launch_compare_bf16(const uint16_t* a, const uint16_t* b, int64_t n, Bf16CompareCounts* out,
                                cudaStream_t stream);

}  // namespace qc::cuda_kernels
