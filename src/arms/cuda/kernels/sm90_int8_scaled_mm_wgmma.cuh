// Entry point of `sm90_int8_scaled_mm_wgmma.cu`: the Hopper wgmma + TMA INT8 GEMM with a fused
// scaled epilogue. Callers normally go through `launch_int8_scaled_mm` (sm90_int8_scaled_mm.cuh),
// which dispatches here for the `wg*` tiles and falls back to mma.sync when this returns
// "unavailable: ...".
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "sm90_int8_scaled_mm.cuh"

namespace qc::cuda_kernels {

// `args.tile` must be MmTile::wg128x128, wg128x256, wg128x256_c2 (cooperative), wgpp64x256,
// wgpp128x128, wgpp64x256_c2 or wgpp128x128_c2 (ping-pong). Returns the kernel identity for the
// RunRecord, "unavailable: <why>" when the wgmma code does not run on this device or build
// (nothing was launched), or "error: <why>" when a launch failed.
std::string launch_int8_scaled_mm_wgmma(const ScaledMmArgs& args, cudaStream_t stream);

}  // namespace qc::cuda_kernels
