// Entry point of `sm90_fp8_block_mma.cu`: qconform's own block-scaled FP8 GEMM (the `cuda:mma-fp8-block-<form>`
// arms), whose order is ours: per 128-K block, the block's 4 `mma.sync` k32 steps chained from a zero
// fp32 fragment, then the named promotion form into D (src/epilogue/fp8_block_model.hpp, `block_model::promote`).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "fp8_block_model.cuh"

namespace qc::cuda_kernels {

// a [m,k], w [n,k] e4m3 codes row-major (any m, n, k >= 1: zero codes fill the edges); scales as
// DeviceBlockScales (K blocks of 128); d [m,n] fp32 D and y [m,n] bf16 = RNE(D). Device pointers.
// Returns the kernel's identity, or "error: ..." when the launch failed.
std::string launch_fp8_block_mma(BlockPromotion form, const uint8_t* a, const uint8_t* w, DeviceBlockScales sa,
                                 DeviceBlockScales sw, float* d, uint16_t* y, int m, int n, int k,
                                 cudaStream_t stream);

}  // namespace qc::cuda_kernels
