// Entry point of `sm90_int32_scaled_epilogue.cu`: the separate epilogue after a library GEMM.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernel_types.hpp"

namespace qc::cuda_kernels {

// y[m,n] = formula::apply<formula>(acc[m,n], sa[m], sw[n], bias[n]); acc int32 [m,n] row-major
// (device); `formula` an instance kind (`formula::instance_kind`), `bias` null for none.
std::string launch_int32_scaled_epilogue(const int32_t* acc, const float* sa, const float* sw, const uint16_t* bias,
                                         uint16_t* y, int m, int n, EpilogueKind formula, BiasMode bias_mode,
                                         cudaStream_t stream);

// y[m,n] = formula::apply<formula>(d[m,n], sa[m], sw[n]) for an fp32 GEMM result, no bias: the FP8
// arms pass `fp8_epilogue().kind` (`bf16(rn32(rn32(d * sa) * sw))`) when cuBLASLt cannot apply
// the outer-vector scales itself.
std::string launch_f32_scale_to_bf16(const float* d, const float* sa, const float* sw, uint16_t* y, int m, int n,
                                     EpilogueKind formula, cudaStream_t stream);

}  // namespace qc::cuda_kernels
