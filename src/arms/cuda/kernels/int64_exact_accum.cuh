// Entry point of `int64_exact_accum.cu`: exact INT8 dot products in int64 on CUDA cores.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace qc::cuda_kernels {

// out[m,n] = Σ_k a[m,k]·w[n,k] exactly (int64). a [m,k], w [n,k] int8 row-major, any k, device
// pointers 4-byte aligned.
std::string launch_int64_exact_accum(const int8_t* a, const int8_t* w, int64_t* out, int m, int n, int k,
                                     cudaStream_t stream);
// The same sums stored as int32, for k <= 131071 (k·2^14 < 2^31: every sum fits; the caller checks).
std::string launch_int64_exact_accum(const int8_t* a, const int8_t* w, int32_t* out, int m, int n, int k,
                                     cudaStream_t stream);

}  // namespace qc::cuda_kernels
