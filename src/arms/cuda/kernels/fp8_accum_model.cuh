// Entry point of `fp8_accum_model.cu`: any FP8 accumulation model evaluated on the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "qconform/accumulation.hpp"

namespace qc::cuda_kernels {

// d[m,n] = accum_model::evaluate(model, a[m,:], fa, w[n,:], fw, k): the text of
// include/qconform/accumulation.hpp, compiled for the device. a [m,k], w [n,k] FP8 codes
// row-major (finite: the caller validates), d [m,n] fp32; device pointers.
std::string launch_fp8_accum_model(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* w,
                                   Fp8Format fw, float* d, int m, int n, int64_t k, cudaStream_t stream);

}  // namespace qc::cuda_kernels
