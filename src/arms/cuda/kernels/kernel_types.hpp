// Plain types shared by the CUDA launchers (.cpp, compiled by the host compiler) and the kernels
// (.cu, compiled by nvcc). The only project header is the epilogue formula text, which under nvcc
// includes nothing else of the project: the .cu files stay independent of fmt/json.
#pragma once

#include <cstdint>

#include "qconform/epilogue_formula.hpp"  // EpilogueKind, BiasMode, formula::apply

namespace qc::cuda_kernels {

// Tile configurations of the tensor-core kernel; `automatic` picks by shape.
// `wg*`: the sm_90a wgmma + TMA kernel (sm90_int8_scaled_mm_wgmma.cu): `wg128x*` 128 x BN tiles
// shared by both consumer warpgroups (cooperative), `wgpp*` ping-pong tiles each owned by one
// (`_c2`: clusters of 2 blocks along M that share each W box through TMA multicast).
enum class MmTile : int {
  automatic = 0, m128n128 = 1, m128n256 = 2, m64n128 = 3, m16n64_k4 = 4, m32n64_k4 = 5, m16n32_k4 = 6,
  wg128x128 = 7, wg128x256 = 8, wgpp64x256 = 9, wgpp128x128 = 10, wgpp64x256_c2 = 11, wgpp128x128_c2 = 12,
  wg128x256_c2 = 13
};

// Why a launcher cannot run formula `kind` with this bias (nullptr when it can): a kernel
// instance exists only for the kinds `formula::apply` has a body for (`sglang_sm90` is resolved
// by `formula::instance_kind` first; `exact` is CPU-only), and a bias only where the formula
// takes one. The host arms refuse both earlier with QC_INPUT errors; this guards direct callers.
inline const char* launch_formula_error(EpilogueKind kind, BiasMode mode, bool has_bias) {
  if (!formula::has_kernel_instance(kind)) return "no kernel instance for this formula kind";
  if (has_bias && (mode == BiasMode::refuse || mode == BiasMode::exact)) return "a bias for a formula that refuses one";
  return nullptr;
}
// The `bias=` part of a kernel identity: how the bias entered, or `none`.
inline const char* bias_label(BiasMode mode, bool has_bias) { return has_bias ? formula::bias_mode_name(mode) : "none"; }

}  // namespace qc::cuda_kernels

namespace qc::cuda_kernels {

// Buckets of the ordered-ulp histogram: bucket b >= 1 holds distances d with bit width b
// (d in [2^(b-1), 2^b)); bucket 0 holds pairs whose bits differ at distance 0 (+0 vs -0).
constexpr int kUlpBuckets = 18;

// Counts of one bf16 comparison, as the comparison kernel accumulates them.
struct Bf16CompareCounts {
  unsigned long long elements = 0;
  unsigned long long bitwise_diff = 0;        // bit patterns differ
  unsigned long long finite_diff = 0;         // both finite, bits differ
  unsigned long long nonfinite_mismatch = 0;  // bits differ and at least one is NaN or ±inf
  unsigned long long ulp_hist[kUlpBuckets] = {};
  unsigned long long max_ulp = 0;             // over finite pairs
  unsigned long long first_diff = ~0ull;      // smallest differing index, ~0 when none
};

}  // namespace qc::cuda_kernels
