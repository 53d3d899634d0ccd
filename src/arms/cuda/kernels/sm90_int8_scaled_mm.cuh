// Entry point of `sm90_int8_scaled_mm.cu`: INT8 tensor-core GEMM with a fused scaled epilogue.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernel_types.hpp"

namespace qc::cuda_kernels {

struct ScaledMmArgs {
  const int8_t* a = nullptr;     // [m,k] row-major (device)
  const int8_t* w = nullptr;     // [n,k] row-major, i.e. Wᵀ column-major (device)
  const float* sa = nullptr;     // [m] per-token scale
  const float* sw = nullptr;     // [n] per-channel scale
  const uint16_t* bias = nullptr;  // [n] bf16 bits, nullptr for no bias
  uint16_t* y = nullptr;         // [m,n] bf16 bits out
  int32_t* acc = nullptr;        // [m,n] INT32 accumulator out, nullptr to skip
  int m = 0, n = 0, k = 0;       // m >= 1; n, k multiples of 16 (the launcher's caller checks)
  // The formula instance (`formula::instance_kind` of the declared epilogue for this m, n) and
  // how it adds a bias (read only when `bias` is set).
  EpilogueKind formula = EpilogueKind::vllm_cutlass;
  BiasMode bias_mode = BiasMode::muladd;
  MmTile tile = MmTile::automatic;
};

// Launches on `stream` and returns the identity of what was launched (kernel template instance
// and launch configuration) for the RunRecord. Returns an error string starting with "error:"
// when the launch failed.
std::string launch_int8_scaled_mm(const ScaledMmArgs& args, cudaStream_t stream);

// The tile `automatic` resolves to for this shape.
MmTile select_tile(int m, int n, int k);

}  // namespace qc::cuda_kernels
