// Entry point of `sm90_int32_scaled_epilogue.cu`: the separate epilogue after a library GEMM.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernel_types.hpp"

namespace qc::cuda_kernels {

// y[m,n] = formula(acc[m,n], sa[m], sw[n], bias[n]); acc int32 [m,n] row-major (device).
std::string launch_int32_scaled_epilogue(const int32_t* acc, const float* sa, const float* sw, const uint16_t* bias,
                                         uint16_t* y, int m, int n, EpilogueFormula formula, BiasAdd bias_add,
                                         cudaStream_t stream);

// y[m,n] = bf16(rn32(rn32(d[m,n] * sa[m]) * sw[n])) for an fp32 GEMM result (the FP8 arms when
// cuBLASLt cannot apply the outer-vector scales itself).
std::string launch_f32_scale_to_bf16(const float* d, const float* sa, const float* sw, uint16_t* y, int m, int n,
                                     cudaStream_t stream);

}  // namespace qc::cuda_kernels
