// The oneDNN arm: oneDNN's own int8 matmul (s8 x s8 -> s32) followed by a declared epilogue.
//
// a_q [M,K] row-major s8 is oneDNN's `src` (strides {K,1}); w_q [N,K] row-major is oneDNN's
// `weights` [K,N] with strides {1,K} (format `ba`), passed without a copy; `dst` is s32 [M,N]
// row-major. The arm exposes oneDNN's s32 output unchanged as its accumulator, so check C4
// tests oneDNN itself, not an emulation. oneDNN's accumulation depends on the kernel it picks for
// the CPU it runs on; `onednn_accumulation` names the model of each kernel we measured
// (docs/plugins.md, section "The oneDNN arm", has the evidence).
//
// Test: `cmake --build build -j2 --target qconform_unit_tests &&
//        ./build/tests/qconform_unit_tests --gtest_filter='OnednnArm*'`
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qc {

// Registers the `onednn` backend (`onednn:s8s8`, `onednn:s8s8-<epilogue>`). Only built when the
// build found oneDNN (`QC_WITH_ONEDNN`).
void register_onednn_arms();

// What one oneDNN s8s8 matmul returned and who computed it.
struct OnednnMatmul {
  std::vector<int32_t> acc;   // [m,n] row-major, exactly as oneDNN wrote it
  std::string impl;           // `primitive_desc::impl_info_str()`, e.g. "brg:avx512_core_vnni"
  std::string isa;            // oneDNN's effective CPU ISA, e.g. "avx512_core_vnni"
  std::string version;        // "oneDNN 2.6.3 (commit ...)"
};

// Runs oneDNN's matmul on a [m,k] x w [n,k]^T. Throws QC_INPUT when oneDNN refuses the shape.
OnednnMatmul onednn_s8s8_matmul(const int8_t* a, const int8_t* w, int64_t m, int64_t n, int64_t k);

// What oneDNN's s32 output is, as a function of the exact dot product, for the kernel that ran.
enum class OnednnAccumulation {
  exact,                  // the exact INT32 sum (AMX tiles; `gemm:jit` with VNNI instructions)
  fp32_above_2p24,        // exact while |acc| <= 2^24, above: int32(float(exact)), ties to even
                          // (`brg:avx512_core_vnni`: the s32 result passes through fp32)
  int16_pair_saturation,  // `gemm:jit` without VNNI: (a+128)·w products summed in adjacent pairs
                          // with int16 saturation (`vpmaddubsw`), minus 128·Σw, wrapped to int32
  unmodelled,             // a kernel/ISA combination nobody has measured yet
};
std::string_view to_string(OnednnAccumulation model);

// The model of the kernel `impl` running on effective ISA `isa` (as `OnednnMatmul` reports them).
// The table is evidence, not a guess: each row was measured (docs/plugins.md), and a combination
// without a row is `unmodelled`.
OnednnAccumulation onednn_accumulation(std::string_view impl, std::string_view isa);

// The model's value of one dot product a[0..k) · w[0..k). For the pair-saturating kernel the pairs
// are (0,1), (2,3), ... from the start of each K block: `k_split` > 0 starts a second block there
// (oneDNN's `gemm:jit` splits K for some shapes and ISAs, e.g. 64×48×1001 on avx512_core; the
// split is not reported by oneDNN, so tests search for the one split that explains every
// element; docs/plugins.md). Throws for `unmodelled`.
int32_t onednn_model_dot(OnednnAccumulation model, const int8_t* a, const int8_t* w, int64_t k, int64_t k_split = 0);

}  // namespace qc
