// Plain types shared by the CUDA launchers (.cpp, compiled by the host compiler) and the kernels
// (.cu, compiled by nvcc). No project headers here: the .cu files stay independent of fmt/json.
#pragma once

#include <cstdint>

namespace qc::cuda_kernels {

// Which production formula a kernel instance computes (one template instance per formula).
enum class EpilogueFormula : int { vllm_cutlass = 0, vllm_triton = 1, sglang_sm89 = 2 };
// How a bf16 bias enters the formula: not at all, fused multiply-add, or multiply then add. For
// `vllm_triton` any value other than `none` means "after the bf16 rounding" (its only form).
enum class BiasAdd : int { none = 0, fma = 1, muladd = 2 };

// Tile configurations of the tensor-core kernel; `automatic` picks by shape.
// `wg*`: the sm_90a wgmma + TMA kernel (sm90_int8_scaled_mm_wgmma.cu), 128 x BN tiles.
enum class MmTile : int {
  automatic = 0, m128n128 = 1, m128n256 = 2, m64n128 = 3, m16n64_k4 = 4, m32n64_k4 = 5, m16n32_k4 = 6,
  wg128x128 = 7, wg128x256 = 8
};

inline const char* formula_name(EpilogueFormula f) {
  switch (f) {
    case EpilogueFormula::vllm_cutlass: return "vllm-cutlass";
    case EpilogueFormula::vllm_triton: return "vllm-triton";
    case EpilogueFormula::sglang_sm89: return "sglang-sm89";
  }
  return "?";
}
inline const char* bias_name(BiasAdd b) {
  switch (b) {
    case BiasAdd::none: return "none";
    case BiasAdd::fma: return "fma";
    case BiasAdd::muladd: return "muladd";
  }
  return "?";
}

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
