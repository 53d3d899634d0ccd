// The kernel configurations the CUTLASS arms instantiate, and the engines' rules that pick one per
// problem shape, written as plain C++ (no CUTLASS, no CUDA) so that the CPU tests check the rules
// and the arms' RunRecords print the same names the kernels were instantiated with.
//
// Each rule is the engine's own, read from its source (docs/epilogues.md, "CUTLASS arms", gives the
// file and the commit read):
//   - vLLM's sm90 INT8 dispatch (csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm90_int8_dispatch.cuh):
//     M bucketed by its next power of two (at least 32), N against 8192;
//   - PyTorch's sm90 rowwise FP8 dispatch (aten/src/ATen/native/cuda/RowwiseScaledMM.cu,
//     `dispatch_fp8_rowwise_kernel_on_cluster_size_and_transpose` and `_on_tile_size`): a cluster
//     shape and whether the problem is run transposed (Dᵀ = W·Xᵀ, which swaps the roles of the two
//     scales in its epilogue tree: `formula::torch_rowwise_choice`), then a 64 x 128 or 128 x 128 tile
//     by whether the smaller tiles still fit in one wave of the device's multiprocessors.
#pragma once

#include <cstdint>

#include "qconform/epilogue_formula.hpp"  // formula::torch_rowwise_choice

namespace qc::cutlass_arms {

// One kernel configuration: CUTLASS 3.x collective builder parameters, as the RunRecord prints them.
struct KernelConfig {
  const char* name;              // "m64" (vLLM's name for the bucket) or "t64x128_c1x2"
  int tile_m, tile_n, tile_k;    // CTA tile (TileShape)
  int cluster_m, cluster_n;      // ClusterShape (x 1)
  const char* kernel_schedule;   // cutlass::gemm::Kernel...
  const char* epilogue_schedule; // cutlass::epilogue::...
};

// ---- vLLM sm90 INT8 ---------------------------------------------------------------------------

enum class Int8Config : int { m32_nsmall = 0, m32_nbig = 1, m64 = 2, m128 = 3, fallback = 4 };
inline constexpr int kInt8Configs = 5;

inline constexpr KernelConfig kInt8ConfigTable[kInt8Configs] = {
    {"M32_NSmall (M <= 32, N < 8192)", 64, 64, 256, 1, 8, "KernelTmaWarpSpecialized", "TmaWarpSpecialized"},
    {"M32_NBig (M <= 32, N >= 8192)", 64, 128, 256, 1, 4, "KernelTmaWarpSpecialized", "TmaWarpSpecialized"},
    {"M64 (32 < M <= 64)", 64, 64, 256, 1, 1, "KernelTmaWarpSpecialized", "TmaWarpSpecialized"},
    {"M128 (64 < M <= 128)", 64, 128, 128, 2, 1, "KernelTmaWarpSpecializedPingpong", "TmaWarpSpecialized"},
    {"default (M > 128)", 128, 128, 128, 2, 1, "KernelTmaWarpSpecializedPingpong", "TmaWarpSpecialized"},
};

// `next_pow_2(m)` as vLLM computes it (the smallest power of two >= m; m >= 1).
constexpr uint64_t next_pow_2(uint64_t m) {
  uint64_t p = 1;
  while (p < m) p <<= 1;
  return p;
}

// vLLM's `cutlass_gemm_sm90_int8_dispatch`: mp2 = max(32, next_pow_2(m)).
constexpr Int8Config vllm_int8_config(int64_t m, int64_t n) {
  const uint64_t p2 = next_pow_2(static_cast<uint64_t>(m < 1 ? 1 : m));
  const uint64_t mp2 = p2 < 32 ? 32 : p2;
  if (mp2 <= 32) return n < 8192 ? Int8Config::m32_nsmall : Int8Config::m32_nbig;
  if (mp2 <= 64) return Int8Config::m64;
  if (mp2 <= 128) return Int8Config::m128;
  return Int8Config::fallback;
}

// ---- PyTorch sm90 rowwise FP8 -------------------------------------------------------------------

// Which cluster, orientation and swizzle PyTorch picks for an M x N problem is the formula's
// `formula::torch_rowwise_choice` (include/qconform/epilogue_formula.hpp): the orientation decides
// the order of the scale products, so it is written once, where the `torch-rowwise` epilogue reads it.

// `dispatch_fp8_rowwise_kernel_on_tile_size`: the 64 x 128 tile when its CTAs (in clusters) fit in
// one wave of `sm_count` multiprocessors, else 128 x 128. `rows`, `cols` are the problem as launched
// (swapped when transposed), not rounded.
constexpr bool torch_rowwise_small_tile(int64_t rows, int64_t cols, int cluster_m, int cluster_n, int sm_count) {
  const int64_t tiles = ((rows + 64 * cluster_m - 1) / (64 * cluster_m)) * ((cols + 128 * cluster_n - 1) / (128 * cluster_n));
  return tiles <= sm_count / (cluster_m * cluster_n);
}

// The instances the FP8 rowwise arms have: tile (64 or 128 rows) x cluster (1x2 or 2x1) x
// orientation; fast accumulation is a separate set. Index: tile128 * 4 + cluster2x1 * 2 + transposed.
inline constexpr int kRowwiseConfigs = 8;
constexpr int rowwise_index(bool tile128, bool cluster2x1, bool transposed) {
  return (tile128 ? 4 : 0) + (cluster2x1 ? 2 : 0) + (transposed ? 1 : 0);
}
// The schedules PyTorch pairs with a tile (`Schedule<LargeTile, FastAccum>`).
constexpr const char* rowwise_kernel_schedule(bool tile128, bool fast) {
  if (fast) return tile128 ? "KernelTmaWarpSpecializedPingpongFP8FastAccum" : "KernelTmaWarpSpecializedFP8FastAccum";
  return tile128 ? "KernelTmaWarpSpecializedCooperative" : "KernelTmaWarpSpecialized";
}
constexpr const char* rowwise_epilogue_schedule(bool tile128, bool fast) {
  return tile128 && !fast ? "TmaWarpSpecializedCooperative" : "TmaWarpSpecialized";
}

}  // namespace qc::cutlass_arms
