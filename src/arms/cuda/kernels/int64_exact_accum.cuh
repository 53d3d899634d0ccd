// Entry point of `int64_exact_accum.cu`: exact INT8 dot products on CUDA cores (dp4a, not the tensor cores).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace qc::cuda_kernels {

// out[m,n] = Σ_k a[m,k]·w[n,k] exactly (int64). a [m,k], w [n,k] int8 row-major, any m, n, k, device
// pointers 4-byte aligned (16-byte aligned with k % 16 == 0 takes 16-byte loads). Enqueued on `stream`;
// where K is split across blocks, a cudaMemsetAsync of `out` precedes the kernel, whose blocks add into it.
std::string launch_int64_exact_accum(const int8_t* a, const int8_t* w, int64_t* out, int m, int n, int k,
                                     cudaStream_t stream);
// The same sums stored as int32, for k <= 131071 (k·2^14 < 2^31: every sum fits; the caller checks).
std::string launch_int64_exact_accum(const int8_t* a, const int8_t* w, int32_t* out, int m, int n, int k,
                                     cudaStream_t stream);

}  // namespace qc::cuda_kernels
