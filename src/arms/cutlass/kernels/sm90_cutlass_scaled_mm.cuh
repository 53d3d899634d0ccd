// Entry points of the CUTLASS kernels (sm90_cutlass_int8_config<i>.cu and sm90_cutlass_fp8_rowwise_*.cu,
// which cmake/cutlass.cmake generates from the templates beside this header, *.cu.in;
// sm90_cutlass_fp8_blockwise_*.cu):
// plain types only, so the host launcher (cutlass_arms.cpp) needs neither CUTLASS nor nvcc.
//
// Layouts: a [M,K] row-major (int8 or e4m3 codes), w [N,K] row-major (Wᵀ column-major, CUTLASS's
// "TN"), sa [M] fp32 per token, sw [N] fp32 per channel, optional bias [N] bf16 bits; y [M,N] bf16
// bits row-major. Every pointer is device memory; the scale buffers are readable up to the next
// multiple of 256 elements (PyTorch pads its token scales so, pytorch/pytorch#133334).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qc::cutlass_kernels {

struct ScaledMmArgs {
  const void* a = nullptr;
  const void* w = nullptr;
  const float* sa = nullptr;
  const float* sw = nullptr;
  const uint16_t* bias = nullptr;  // nullptr: no bias
  uint16_t* y = nullptr;           // bf16 out (nullptr with `d` set: the fp32 accumulator entry)
  float* d = nullptr;              // fp32 out of the identity-epilogue FP8 entry
  int m = 0, n = 0, k = 0;
  int swizzle = 1;                 // the persistent tile scheduler's max_swizzle_size (FP8 rowwise)
  cudaStream_t stream = nullptr;
};

// What a launch reports: an empty `error` on success, else CUTLASS's status in words; the stage
// count the collective builder chose (StageCountAutoCarveout) for the RunRecord.
struct LaunchResult {
  const char* error = nullptr;
  int stages = 0;
  size_t workspace_bytes = 0;
};

// vLLM's INT8 ScaledEpilogue (no bias) or ScaledEpilogueBias (bias), instance `config`
// (cutlass_dispatch.hpp, `Int8Config`). Defined one config per translation unit,
// generated from sm90_cutlass_int8_config.cu.in.
LaunchResult launch_int8_vllm_config0(const ScaledMmArgs& args, bool bias);
LaunchResult launch_int8_vllm_config1(const ScaledMmArgs& args, bool bias);
LaunchResult launch_int8_vllm_config2(const ScaledMmArgs& args, bool bias);
LaunchResult launch_int8_vllm_config3(const ScaledMmArgs& args, bool bias);
LaunchResult launch_int8_vllm_config4(const ScaledMmArgs& args, bool bias);

// PyTorch's f8f8bf16_rowwise epilogue tree over e4m3 x e4m3, instance `index`
// (`rowwise_index(tile128, cluster2x1, transposed)`), default or fast accumulation. When
// `transposed`, the kernel is launched on Dᵀ = W·Xᵀ exactly as PyTorch's `handle_transposition`
// does (w as the A operand, sw as the column scale); `args` is always the untransposed problem.
LaunchResult launch_fp8_rowwise(const ScaledMmArgs& args, int index, bool fast);
// The same mainloop (64 x 128 x 128 tile, 2 x 1 cluster, the default or fast schedule) with
// CUTLASS's identity epilogue to fp32: the unscaled accumulator `d`.
LaunchResult launch_fp8_accumulate(const ScaledMmArgs& args, bool fast);

// CUTLASS's sm90 blockwise-scaling FP8 mainloop (sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp),
// e4m3 x e4m3, activation scales per row and 128 columns of K, weight scales per 128 x 128 block, with the
// identity epilogue: bf16 out (`launch_fp8_blockwise_bf16`, into `y`) or the fp32 accumulator D
// (`launch_fp8_blockwise_f32`, into `d`). Layouts: a [m,k] and w [n,k] row-major codes, k a multiple of
// 16 and n of 8; `sa` MN-major, sa[b * m + i]; `sw` K-major, sw[nb * ceil(k/128) + b] (the layouts of
// CUTLASS example 67, groupwise: Sm90BlockwiseScaleConfig<1, 128, 128, MN, K>).
struct BlockwiseArgs {
  const void* a = nullptr;
  const void* w = nullptr;
  const float* sa = nullptr;
  const float* sw = nullptr;
  uint16_t* y = nullptr;
  float* d = nullptr;
  int m = 0, n = 0, k = 0;
  cudaStream_t stream = nullptr;
};
LaunchResult launch_fp8_blockwise_bf16(const BlockwiseArgs& args);
LaunchResult launch_fp8_blockwise_f32(const BlockwiseArgs& args);

}  // namespace qc::cutlass_kernels
