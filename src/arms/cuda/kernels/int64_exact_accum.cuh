// Entry point of `int64_exact_accum.cu`: exact INT8 dot products in int64 on CUDA cores.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace qc::cuda_kernels {

// out[m,n] = Σ_k a[m,k]·w[n,k] exactly (int64). a [m,k], w [n,k] int8 row-major, k a multiple of
// 4, device pointers 4-byte aligned.
std::string launch_int64_exact_accum(const int8_t* a, const int8_t* w, int64_t* out, int m, int n, int k,
                                     cudaStream_t stream);

}  // namespace qc::cuda_kernels
