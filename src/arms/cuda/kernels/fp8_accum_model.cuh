// Entry point of `fp8_accum_model.cu`: any FP8 accumulation model evaluated on the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "qconform/accumulation.hpp"

namespace qc::cuda_kernels {

// d[m,n] = accum_model::evaluate(model, a[m,:], fa, w[n,:], fw, k) bit for bit: through the fp32
// stepped evaluation (src/accum/fp8_model_fp32.hpp) where `allow_fp32` and the model is one it takes
// (`accum_fp32::gpu_kernel_takes`), else the fp64 per-output evaluation (src/accum/fp8_model_fp64.hpp)
// where the model has one, else (or with `reference_kernel`) the text of
// include/qconform/accumulation.hpp compiled for the device. a [m,k], w [n,k] FP8 codes row-major (finite: the caller validates), `w_t` scratch of
// n·k bytes (w transposed there), d [m,n] fp32; device pointers. Returns the kernel's identity.
std::string launch_fp8_accum_model(const Fp8AccumModel& model, const uint8_t* a, Fp8Format fa, const uint8_t* w,
                                   Fp8Format fw, uint8_t* w_t, float* d, int m, int n, int64_t k, bool allow_fp32,
                                   bool reference_kernel,
                                   cudaStream_t stream);

}  // namespace qc::cuda_kernels
