// Entry points of `fp8_block_model.cu`: the block-scaled FP8 accumulation models
// (src/epilogue/fp8_block_model.hpp) evaluated on the GPU, for verify's reference side and the tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "epilogue/fp8_block_model.hpp"

namespace qc::cuda_kernels {

// One operand's scales on the device: operand row r's scale of K block b is
// `p[(r / block_rows) * cols + b * step]` (ScaleLayout::index; step 0 repeats one scale for every block).
struct DeviceBlockScales {
  const float* p = nullptr;
  int64_t block_rows = 1;
  int64_t cols = 1;
  int64_t step = 0;
};

// The reference kernel: one thread per output, `block_model::evaluate` (the header's text, with the
// chain's `accum_model::evaluate` in int128) on a [m,k], w [n,k] codes; d [m,n] fp32. Device pointers.
std::string launch_fp8_block_model_reference(const Fp8AccumModel& chain, BlockPromotion form, const uint8_t* a,
                                             Fp8Format fa, const uint8_t* w, Fp8Format fw, float* d, int m, int n,
                                             int64_t k, int64_t block_k, DeviceBlockScales sa, DeviceBlockScales sw,
                                             cudaStream_t stream);

// Columns [k0, k0 + len) of `src` [rows, k] copied contiguous into `dst` [rows, len]; for a chain with
// interleaved steps (`interleave` > 0, steps of `step_k`), in step order into `dst` [rows, len_out],
// len_out = gathered_steps_k(chain, len), zero codes past the block (src/accum/fp8_model.hpp).
std::string launch_gather_columns(const uint8_t* src, uint8_t* dst, int rows, int64_t k, int64_t k0, int64_t len,
                                  cudaStream_t stream, int64_t step_k = 0, int64_t interleave = 0, int64_t len_out = 0);

// d[i,j] <- block_model::promote(form, c[i,j], sa(i, b), sw(j, b), d[i,j]) for K block `b`.
std::string launch_block_promote(BlockPromotion form, const float* c, float* d, int m, int n, int64_t b,
                                 DeviceBlockScales sa, DeviceBlockScales sw, cudaStream_t stream);

}  // namespace qc::cuda_kernels
